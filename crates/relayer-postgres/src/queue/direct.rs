//! Direct enqueue (QUE-4): messages for relayer's own queue written straight into the queue
//! table inside the caller's transaction.
//!
//! The outbox hop buys nothing when the queue lives in the caller's database: the caller's
//! transaction already makes the message atomic with its writes. So [`QueueWriter`] inserts
//! the batch into the queue table in one statement, with the outbox writer's validation
//! (OUT-3) and scheduling through `visible_at` (an instant or a delay on the database
//! clock). Lane messages keep going through the outbox.
//!
//! # The wake-up
//!
//! A consumer in another process learns of new messages through NOTIFY. But PostgreSQL
//! serializes the commits of every transaction that issued a NOTIFY under one lock, so a
//! NOTIFY in every writing transaction costs concurrent writers their group commit
//! (docs/performance.md). The writer therefore notifies a queue at most once per
//! `notify_interval` (default [`DEFAULT_NOTIFY_INTERVAL`]), tracked per writer (clones
//! share it): under load almost no transaction pays for a NOTIFY. The pump makes up for
//! the notifications left out: a pump that received a full batch reads again at once, and
//! a notified pump reads once more `notify_interval` later, catching what committed in the
//! silent window; polling covers the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use relayer_core::{Delivery, MessageId, Namespace, NewMessage};
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::Executor;
use crate::outbox::{DEFAULT_MAX_BODY_BYTES, EnqueueError, Enqueued, WrittenColumns};

/// How often, at most, a [`QueueWriter`] notifies one queue unless told otherwise.
pub const DEFAULT_NOTIFY_INTERVAL: Duration = Duration::from_millis(50);

/// Writes messages straight into relayer's queue table, inside the caller's transaction
/// (QUE-4). A message's destination is its queue.
///
/// ```no_run
/// # async fn example(client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use relayer_core::{Delivery, Namespace, NewMessage};
/// use relayer_postgres::QueueWriter;
///
/// let writer = QueueWriter::new(&Namespace::default(), "queue");
/// let tx = client.transaction().await?;
/// // … the service's own writes on `tx` …
/// writer
///     .enqueue(&tx, &[
///         NewMessage::new("queue", "orders", b"{}".to_vec()),
///         NewMessage::new("queue", "reminders", b"{}".to_vec()).delivery(Delivery::After(Duration::from_secs(60))),
///     ])
///     .await?;
/// tx.commit().await?; // receivable (the second in a minute) iff this commits
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct QueueWriter {
    insert: String,
    channel: String,
    transport: String,
    max_body_bytes: usize,
    notify_interval: Duration,
    /// When each queue was last notified by this writer (or its clones).
    notified: Arc<Mutex<HashMap<String, Instant>>>,
}

impl QueueWriter {
    /// A writer for `namespace`'s queue table accepting messages whose transport is
    /// `queue_transport` (the name the queue transport is registered under, `"queue"` by
    /// default), with bodies up to [`DEFAULT_MAX_BODY_BYTES`].
    pub fn new(namespace: &Namespace, queue_transport: impl Into<String>) -> Self {
        let queue = namespace.table("queue");
        QueueWriter {
            // One multi-row insert; the NOTIFY of the queues in $8 (often none) runs once,
            // after it. Index: none read; maintains queue_pkey and queue_receive_idx.
            insert: format!(
                "WITH inserted AS ( \
                   INSERT INTO {queue} (message_id, queue, body, headers, trace_context, visible_at) \
                   SELECT m.id, m.queue, m.body, m.headers, m.trace_context, \
                          coalesce(m.deliver_at, now() + m.delay_us * interval '1 microsecond', now()) \
                   FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::jsonb[], $5::text[], \
                               $6::timestamptz[], $7::int8[]) WITH ORDINALITY \
                        AS m(id, queue, body, headers, trace_context, deliver_at, delay_us, ord) \
                   ORDER BY m.ord RETURNING seq, message_id), \
                 notified AS (SELECT count(pg_notify($9, q)) AS n FROM unnest($8::text[]) AS q \
                              WHERE EXISTS (SELECT FROM inserted)) \
                 SELECT inserted.seq, inserted.message_id FROM inserted, notified ORDER BY inserted.seq"
            ),
            channel: super::queue_channel(namespace),
            transport: queue_transport.into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            notify_interval: DEFAULT_NOTIFY_INTERVAL,
            notified: Arc::default(),
        }
    }

    /// Sets the largest body accepted, in bytes.
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }

    /// Notifies each queue at most once per `interval` ([`Duration::ZERO`]: in every
    /// writing transaction). See the [module docs](self) for the trade.
    pub fn with_notify_interval(mut self, interval: Duration) -> Self {
        self.notify_interval = interval;
        self
    }

    /// The channel this writer notifies on commit.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Writes `messages` on `client` (a client, a transaction or a pooled connection) in
    /// one round trip, and returns their rows in order.
    ///
    /// Every message is validated first (OUT-3, and no lane); on any refusal nothing is
    /// written. The messages become receivable iff the caller's transaction commits, each
    /// at its delivery time.
    pub async fn enqueue(
        &self,
        client: &impl Executor,
        messages: &[NewMessage],
    ) -> Result<Vec<Enqueued>, EnqueueError> {
        for (index, message) in messages.iter().enumerate() {
            message.validate_direct(index, self.max_body_bytes, &self.transport)?;
        }
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let count = messages.len();
        let WrittenColumns { ids, destinations: queues, bodies, headers, trace_contexts, deliver_at, delays } =
            WrittenColumns::of(messages);
        let wake = self.queues_to_notify(messages);
        let params: [(&(dyn ToSql + Sync), Type); 9] = [
            (&ids, Type::UUID_ARRAY),
            (&queues, Type::TEXT_ARRAY),
            (&bodies, Type::BYTEA_ARRAY),
            (&headers, Type::JSONB_ARRAY),
            (&trace_contexts, Type::TEXT_ARRAY),
            (&deliver_at, Type::TIMESTAMPTZ_ARRAY),
            (&delays, Type::INT8_ARRAY),
            (&wake, Type::TEXT_ARRAY),
            (&self.channel, Type::TEXT),
        ];
        let rows = client.rows(&self.insert, &params).await.map_err(|e| {
            StorageError::database(format!("enqueueing {count} messages into the queue table"), e)
        })?;
        Ok(rows
            .iter()
            .map(|row| Enqueued { seq: row.get(0), id: MessageId::from_uuid(row.get(1)) })
            .collect())
    }

    /// The queues of immediately deliverable messages not notified within the interval;
    /// marks them notified. Scheduled messages wake nobody: the pump's polling finds them.
    fn queues_to_notify(&self, messages: &[NewMessage]) -> Vec<String> {
        let now = Instant::now();
        let mut notified = self.notified.lock().unwrap_or_else(PoisonError::into_inner);
        let mut wake = Vec::new();
        for message in messages.iter().filter(|m| m.delivery_time() == Delivery::Immediate) {
            let queue = message.destination();
            let due =
                notified.get(queue).is_none_or(|last| now.duration_since(*last) >= self.notify_interval);
            if due && !wake.iter().any(|q| q == queue) {
                notified.insert(queue.to_owned(), now);
                wake.push(queue.to_owned());
            }
        }
        wake
    }
}
