//! Reading outbox rows into messages, one row at a time (SPEC §15).
//!
//! Every statement that hands rows to a sender — a claim, a lane head, a recovery page —
//! returns the [`CLAIMED_COLUMNS`], and [`RowCodec`] turns each row into a
//! [`ClaimedMessage`] on its own. A row it cannot turn into a message is an
//! [`UndecodableRow`] naming the table, the `seq`, the column and the reason; it never
//! fails the rows around it. What becomes of it is the caller's: an unordered row moves to
//! the dead table with the rest of its batch's completion
//! ([`Completion::bury_undecodable`](relayer_core::store::Completion::bury_undecodable)),
//! a lane head parks its lane (skipping it would reorder the lane, LAN-5).
//!
//! A row is undecodable when a column has a type or shape the writer never produces —
//! headers that are not a JSON object of strings (jsonb `null` included), an empty
//! destination. A row naming a transport this process lacks is *not* undecodable (TRN-6):
//! it waits for an instance that has it. The codec carries the worker's registry
//! (`with_transports` on the statements) only so that every claim and recovery page binds
//! it (`transport = ANY(…)`) and never reads such a row; one that reaches a worker anyway
//! is released by the worker, untouched. Only a row whose `seq` cannot be read fails the
//! whole read: there is nothing to name.

use std::sync::Arc;
use std::time::SystemTime;

use relayer_core::postgres::{JsonbHeaders, MalformedHeaders};
use relayer_core::store::{Claimed, ClaimedMessage, UndecodableRow};
use relayer_core::{Envelope, MessageId, Namespace, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::error::{StorageError, StorageErrorKind};

/// The columns every claim returns, in the order [`RowCodec::decode`] reads them.
pub(crate) const CLAIMED_COLUMNS: &str =
    "seq, message_id, transport, destination, body, headers, trace_context, lane, created_at, attempts";

/// Decodes outbox rows of one namespace, and carries the transports its statements read.
#[derive(Clone, Debug)]
pub(crate) struct RowCodec {
    /// The outbox as errors name it: `schema.prefixoutbox`.
    table: String,
    /// The transports the worker can send to, bound into every claim (TRN-6); `None`
    /// reads rows of any transport.
    transports: Option<Arc<[String]>>,
}

impl RowCodec {
    /// A codec for `namespace`'s outbox accepting any transport name.
    pub(crate) fn new(namespace: &Namespace) -> Self {
        RowCodec {
            table: format!("{}.{}", namespace.schema(), namespace.object_name("outbox")),
            transports: None,
        }
    }

    /// The statements read only rows naming one of `names` (TRN-6).
    pub(crate) fn with_transports<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort();
        names.dedup();
        self.transports = Some(names.into());
        self
    }

    /// Whether rows naming `transport` are this worker's (TRN-6): always, without a
    /// registry.
    pub(crate) fn serves(&self, transport: &str) -> bool {
        self.transports
            .as_ref()
            .is_none_or(|names| names.binary_search_by(|name| name.as_str().cmp(transport)).is_ok())
    }

    /// The transports to bind as a statement's `text[]` filter: `None` (SQL NULL) reads
    /// every transport.
    pub(crate) fn registered(&self) -> Option<Vec<&str>> {
        self.transports.as_ref().map(|names| names.iter().map(String::as_str).collect())
    }

    /// Decodes every row's [`CLAIMED_COLUMNS`], starting at column `at`, into a [`Claimed`]
    /// with both lists in `seq` order (RETURNING gives no order; a destination's messages
    /// are sent in the order they were written).
    pub(crate) fn decode_all<'r>(
        &self,
        rows: impl IntoIterator<Item = &'r Row>,
        at: usize,
    ) -> Result<Claimed, StorageError> {
        let mut claimed = Claimed::default();
        for row in rows {
            match self.decode(row, at)? {
                Ok(message) => claimed.messages.push(message),
                Err(undecodable) => claimed.undecodable.push(undecodable),
            }
        }
        claimed.messages.sort_by_key(|message| message.seq);
        claimed.undecodable.sort_by_key(|row| row.seq);
        Ok(claimed)
    }

    /// Decodes the [`CLAIMED_COLUMNS`] of `row`, which start at column `at`: the message,
    /// or why this row cannot be one. Fails only when the `seq` itself cannot be read.
    pub(crate) fn decode(
        &self,
        row: &Row,
        at: usize,
    ) -> Result<Result<ClaimedMessage, UndecodableRow>, StorageError> {
        let seq: i64 = row.try_get(at).map_err(|e| {
            StorageError::new(
                format!("decoding a row of {}: column seq: {e}", self.table),
                StorageErrorKind::MalformedRow,
            )
        })?;
        Ok(self.decode_columns(row, at, seq).map_err(|(column, reason)| UndecodableRow {
            table: self.table.clone(),
            seq,
            column: column.to_owned(),
            reason,
        }))
    }

    fn decode_columns(
        &self,
        row: &Row,
        at: usize,
        seq: i64,
    ) -> Result<ClaimedMessage, (&'static str, String)> {
        let transport: String = column(row, at + 2, "transport")?;
        let destination: String = column(row, at + 3, "destination")?;
        if destination.trim().is_empty() {
            return Err(("destination", "is empty".to_owned()));
        }
        let headers = column::<JsonbHeaders<'_>>(row, at + 5, "headers")?.into_headers();
        let created_at: SystemTime = column(row, at + 8, "created_at")?;
        let attempts: i32 = column(row, at + 9, "attempts")?;
        let attempts =
            u32::try_from(attempts).map_err(|_| ("attempts", format!("is negative ({attempts})")))?;
        Ok(ClaimedMessage {
            seq,
            transport,
            destination,
            envelope: Envelope {
                id: column::<MessageId>(row, at + 1, "message_id")?,
                body: column(row, at + 4, "body")?,
                headers,
                created_at: Timestamp::from_system_time(created_at),
                trace_context: column(row, at + 6, "trace_context")?,
                lane: column(row, at + 7, "lane")?,
                attempts,
            },
        })
    }
}

/// Column `index` of `row`, or the column's name and why it cannot be read.
fn column<'r, T: FromSql<'r>>(
    row: &'r Row,
    index: usize,
    name: &'static str,
) -> Result<T, (&'static str, String)> {
    row.try_get(index).map_err(|e| {
        let reason = malformed(&e).unwrap_or_else(|| {
            let reason = std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string);
            format!("cannot be read: {reason}")
        });
        (name, reason)
    })
}

/// The codec's reason, when `e` is a headers value of a shape the writer never produces
/// (`expected a JSON object of strings, found null`): it is the whole story, no driver
/// wording around it.
pub(crate) fn malformed(e: &tokio_postgres::Error) -> Option<String> {
    std::error::Error::source(e)?.downcast_ref::<MalformedHeaders>().map(ToString::to_string)
}

/// The CTEs `present(t)` and `registered(t)` (for a `WITH RECURSIVE`): the transports whose
/// rows a statement reads (TRN-6) — those bound as `param` (a `text[]`), or, when it is
/// NULL (a codec without a registry), every transport the unordered rows name, found by a
/// skip scan of `outbox_due_idx` (one descent per distinct transport, a handful).
pub(crate) fn registered_ctes(outbox: &str, param: &str) -> String {
    format!(
        "present(t) AS ( \
           SELECT min(transport) FROM {outbox} WHERE lane IS NULL AND {param}::text[] IS NULL \
           UNION ALL \
           SELECT (SELECT min(transport) FROM {outbox} WHERE lane IS NULL AND transport > present.t) \
           FROM present WHERE present.t IS NOT NULL), \
         registered(t) AS ( \
           SELECT unnest({param}::text[]) \
           UNION ALL \
           SELECT t FROM present WHERE t IS NOT NULL AND {param}::text[] IS NULL)"
    )
}
