//! [`EnqueueBatch`]: one validated batch encoded for the enqueue statement, for drivers
//! other than tokio-postgres (relayer-sqlx binds its parameters).

use std::time::SystemTime;

use relayer_core::MessageId;
use relayer_core::postgres::JsonbHeaders;
use tokio_postgres::types::{ToSql, Type};

/// One validated batch of messages encoded for the enqueue statement (see
/// [`OutboxWriter::batch`](crate::OutboxWriter::batch)): the statement text and its parameters in order.
///
/// A driver runs [`statement`](Self::statement) with [`params`](Self::params) bound as
/// `$1, $2, …` in the order given, each with the PostgreSQL type its [`EnqueueParam`]
/// variant names, and reads back `(seq int8, message_id uuid)` per message, in enqueue
/// order.
#[derive(Debug)]
pub struct EnqueueBatch<'a> {
    pub(super) statement: &'a str,
    pub(super) ids: Vec<MessageId>,
    pub(super) transports: Vec<&'a str>,
    pub(super) destinations: Vec<&'a str>,
    pub(super) bodies: Vec<&'a [u8]>,
    pub(super) headers: Vec<JsonbHeaders<'a>>,
    pub(super) trace_contexts: Vec<Option<&'a str>>,
    pub(super) lanes: Vec<Option<&'a str>>,
    pub(super) deliver_at: Vec<Option<SystemTime>>,
    pub(super) delays: Vec<Option<i64>>,
    pub(super) lane_keys: Vec<i64>,
    /// The channel to notify on commit, unless the writer is silent.
    pub(super) channel: Option<&'a str>,
}

/// One parameter of the enqueue statement, by its PostgreSQL type.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum EnqueueParam<'b> {
    /// `uuid[]`: message ids.
    MessageIds(&'b [MessageId]),
    /// `text[]` without NULLs.
    Texts(&'b [&'b str]),
    /// `text[]` with NULLs.
    OptionalTexts(&'b [Option<&'b str>]),
    /// `bytea[]`.
    Bytes(&'b [&'b [u8]]),
    /// `jsonb[]`: message headers, each a JSON object of strings.
    Headers(&'b [JsonbHeaders<'b>]),
    /// `timestamptz[]` with NULLs.
    OptionalTimestamps(&'b [Option<SystemTime>]),
    /// `int8[]` with NULLs.
    OptionalInt8s(&'b [Option<i64>]),
    /// `int8[]` without NULLs.
    Int8s(&'b [i64]),
    /// `text`.
    Text(&'b str),
    /// `uuid`: one message id (the one-message statements).
    Id(&'b MessageId),
    /// `text` or NULL.
    OptionalText(Option<&'b str>),
    /// `bytea`: one message body.
    Body(&'b [u8]),
    /// `jsonb`: one message's headers, a JSON object of strings.
    HeaderObject(&'b JsonbHeaders<'b>),
    /// `timestamptz` or NULL.
    OptionalTimestamp(Option<SystemTime>),
    /// `int8` or NULL.
    OptionalInt8(Option<i64>),
}

impl EnqueueParam<'_> {
    /// The value for tokio-postgres, with the PostgreSQL type it is bound as.
    pub fn typed(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            EnqueueParam::MessageIds(values) => (values, Type::UUID_ARRAY),
            EnqueueParam::Texts(values) => (values, Type::TEXT_ARRAY),
            EnqueueParam::OptionalTexts(values) => (values, Type::TEXT_ARRAY),
            EnqueueParam::Bytes(values) => (values, Type::BYTEA_ARRAY),
            EnqueueParam::Headers(values) => (values, Type::JSONB_ARRAY),
            EnqueueParam::OptionalTimestamps(values) => (values, Type::TIMESTAMPTZ_ARRAY),
            EnqueueParam::OptionalInt8s(values) => (values, Type::INT8_ARRAY),
            EnqueueParam::Int8s(values) => (values, Type::INT8_ARRAY),
            EnqueueParam::Text(value) => (value, Type::TEXT),
            EnqueueParam::Id(id) => (id.as_uuid(), Type::UUID),
            EnqueueParam::OptionalText(value) => (value, Type::TEXT),
            EnqueueParam::Body(value) => (value, Type::BYTEA),
            EnqueueParam::HeaderObject(value) => (*value, Type::JSONB),
            EnqueueParam::OptionalTimestamp(value) => (value, Type::TIMESTAMPTZ),
            EnqueueParam::OptionalInt8(value) => (value, Type::INT8),
        }
    }
}

impl<'a> EnqueueBatch<'a> {
    /// Whether the batch has no message (then nothing needs to run).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The statement to run: one of six renderings, chosen by whether the batch is one
    /// message, whether it has lane rows and whether the writer notifies.
    pub fn statement(&self) -> &'a str {
        self.statement
    }

    /// Whether the batch is written by the one-message statement: a single message without
    /// lane keys. That `INSERT … VALUES` plans in a fraction of the multi-row statement's
    /// time, which matters most where a statement is planned on every call (unnamed).
    pub(super) fn is_single(&self) -> bool {
        self.ids.len() == 1 && self.lane_keys.is_empty()
    }

    /// The statement's parameters, `$1` first.
    pub fn params(&self) -> Vec<EnqueueParam<'_>> {
        if self.is_single() {
            let mut params = vec![
                EnqueueParam::Id(&self.ids[0]),
                EnqueueParam::Text(self.transports[0]),
                EnqueueParam::Text(self.destinations[0]),
                EnqueueParam::Body(self.bodies[0]),
                EnqueueParam::HeaderObject(&self.headers[0]),
                EnqueueParam::OptionalText(self.trace_contexts[0]),
                EnqueueParam::OptionalTimestamp(self.deliver_at[0]),
                EnqueueParam::OptionalInt8(self.delays[0]),
            ];
            if let Some(channel) = self.channel {
                params.push(EnqueueParam::Text(channel));
            }
            return params;
        }
        let mut params = vec![
            EnqueueParam::MessageIds(&self.ids),
            EnqueueParam::Texts(&self.transports),
            EnqueueParam::Texts(&self.destinations),
            EnqueueParam::Bytes(&self.bodies),
            EnqueueParam::Headers(&self.headers),
            EnqueueParam::OptionalTexts(&self.trace_contexts),
            EnqueueParam::OptionalTexts(&self.lanes),
            EnqueueParam::OptionalTimestamps(&self.deliver_at),
            EnqueueParam::OptionalInt8s(&self.delays),
            EnqueueParam::Int8s(&self.lane_keys),
        ];
        if let Some(channel) = self.channel {
            params.push(EnqueueParam::Text(channel));
        }
        params
    }
}

/// Runs an enqueue `statement` with its `encoded` parameters on `client` and returns the
/// rows it read back, `(seq, message_id)` per message in enqueue order: the tokio-postgres
/// side of both writers (outbox and direct queue), whose statements share that shape.
pub(crate) async fn insert_and_read_back(
    client: &impl crate::exec::Executor,
    statement: &str,
    encoded: &[EnqueueParam<'_>],
    what: String,
) -> Result<Vec<super::Enqueued>, crate::error::StorageError> {
    let params: Vec<(&(dyn ToSql + Sync), Type)> = encoded.iter().map(EnqueueParam::typed).collect();
    let rows = crate::exec::rows(client, statement, &params, what).await?;
    Ok(rows.iter().map(|row| super::Enqueued { seq: row.get(0), id: row.get(1) }).collect())
}

/// The highest `$n` a statement names: what its parameters must number.
#[cfg(test)]
pub(crate) fn placeholders(sql: &str) -> usize {
    sql.split('$')
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .max()
        .unwrap_or(0)
}
