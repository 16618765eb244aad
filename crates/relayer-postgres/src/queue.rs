//! The PostgreSQL queue table, producer side (QUE-1).
//!
//! relayer's own queue transport stores each message as a row of the `queue` table, the
//! queue name in `queue`. Producing is one multi-row insert per batch (through `unnest`,
//! one round trip); the message's id, headers, body, creation context and `created_at` are
//! kept as the outbox had them, and `visible_at` defaults to the insert's `now()`, so the
//! message is receivable at once. The insert notifies the namespace's queue channel
//! ([`queue_channel`], the queue's name as payload) so consumers in any process wake on
//! commit; the transport's batches are few, so the commit serialization a NOTIFY costs
//! (docs/performance.md) is paid once per batch.
//!
//! The consumer side ([`ConsumeStatements`]: receive, ack, requeue, dead-letter, heartbeat)
//! is in `queue/consume.rs`; writing straight into the queue inside the caller's
//! transaction ([`QueueWriter`], QUE-4) in `queue/direct.rs`.

use std::time::SystemTime;

use relayer_core::postgres::JsonbHeaders;
use relayer_core::{Envelope, MessageId, Namespace};
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::Executor;

mod consume;
mod direct;

pub use consume::{ConsumeStatements, DeadLetter, QueueMessage, Receipt, Received, Requeue, Undecodable};
pub use direct::{DEFAULT_NOTIFY_INTERVAL, NOTIFY_AFTER_QUIET, QueueBatch, QueueWriter};

/// The LISTEN/NOTIFY channel of a namespace's queue table: every insert notifies it with
/// the queue's name as payload, and every pump of the namespace listens on it.
///
/// `relayer_` followed by 16 hex digits of SHA-1 over the schema and prefix, like the
/// outbox's channel and distinct from it.
pub fn queue_channel(namespace: &Namespace) -> String {
    crate::outbox::channel("queue-channel", namespace)
}

/// The queue statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct QueueStatements {
    insert: String,
    channel: String,
    /// The most bytes of rows one insert binds ([`crate::split`]); lowered only by tests.
    max_statement_bytes: usize,
}

impl QueueStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let queue = namespace.table("queue");
        QueueStatements {
            // Index: none read; maintains queue_pkey and queue_receive_idx. The NOTIFY runs
            // once, after the insert, and only when it inserted rows.
            insert: format!(
                "WITH inserted AS ( \
                   INSERT INTO {queue} (message_id, queue, body, headers, trace_context, created_at) \
                   SELECT m.id, $1, m.body, m.headers, m.trace_context, m.created_at \
                   FROM unnest($2::uuid[], $3::bytea[], $4::jsonb[], $5::text[], $6::timestamptz[]) \
                        WITH ORDINALITY AS m(id, body, headers, trace_context, created_at, ord) \
                   ORDER BY m.ord RETURNING 1), \
                 counted AS (SELECT count(*) AS n FROM inserted) \
                 SELECT n, CASE WHEN n > 0 THEN pg_notify($7, $1) END FROM counted"
            ),
            channel: queue_channel(namespace),
            max_statement_bytes: crate::split::MAX_STATEMENT_BYTES,
        }
    }

    /// The largest total of row bytes one insert binds, lowered by tests to split small
    /// batches (the default is [`MAX_STATEMENT_BYTES`](crate::split::MAX_STATEMENT_BYTES)).
    #[cfg(test)]
    pub(crate) fn with_max_statement_bytes(mut self, bytes: usize) -> Self {
        self.max_statement_bytes = bytes;
        self
    }

    /// Inserts `messages` into queue `queue`, in order, in one statement — or, when their
    /// rows add up to more than 256 MiB, in one statement per run under PostgreSQL's 1 GiB
    /// limits (SPEC §15) — and returns how many rows were inserted. On an autocommitting
    /// client a failure after the first run leaves the runs before it written: the caller's
    /// retry sends them again (at least once, DSP-7).
    pub async fn insert(
        &self,
        client: &impl Executor,
        queue: &str,
        messages: &[Envelope],
    ) -> Result<u64, StorageError> {
        let sizes: Vec<usize> = messages.iter().map(crate::split::envelope_bytes).collect();
        let mut inserted = 0;
        for run in crate::split::split_by_bytes(&sizes, self.max_statement_bytes) {
            inserted += self.insert_run(client, queue, &messages[run]).await?;
        }
        Ok(inserted)
    }

    async fn insert_run(
        &self,
        client: &impl Executor,
        queue: &str,
        messages: &[Envelope],
    ) -> Result<u64, StorageError> {
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
        let headers: Vec<JsonbHeaders<'_>> =
            messages.iter().map(|m| JsonbHeaders::from(&m.headers)).collect();
        let trace_contexts: Vec<Option<&str>> = messages.iter().map(|m| m.trace_context.as_deref()).collect();
        let created_at: Vec<SystemTime> = messages.iter().map(|m| m.created_at.to_system_time()).collect();
        let params: [(&(dyn ToSql + Sync), Type); 7] = [
            (&queue, Type::TEXT),
            (&ids, Type::UUID_ARRAY),
            (&bodies, Type::BYTEA_ARRAY),
            (&headers, Type::JSONB_ARRAY),
            (&trace_contexts, Type::TEXT_ARRAY),
            (&created_at, Type::TIMESTAMPTZ_ARRAY),
            (&self.channel, Type::TEXT),
        ];
        let context = || format!("inserting {} into queue {queue:?}", crate::error::messages(messages.len()));
        let row = crate::exec::one_row(client, &self.insert, &params, &context()).await?;
        let inserted: i64 = row.try_get(0).map_err(|e| StorageError::database(context(), e))?;
        Ok(u64::try_from(inserted).unwrap_or(0))
    }
}
