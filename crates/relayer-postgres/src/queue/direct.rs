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
//! share it): under load almost no transaction pays for a NOTIFY — except a write that
//! comes [`NOTIFY_AFTER_QUIET`] or more after the writer's previous write to that queue
//! ended ([`QueueWriter::enqueue`]; began, for a driver that only takes the
//! [`batch`](QueueWriter::batch)), which notifies anyway: a steady, moderate load (a batch every 25 ms) is then picked up
//! at once, and only a writer committing faster than that is throttled. The pump makes up for
//! the notifications left out: a pump that received a full batch reads again at once, and
//! a notified pump reads once more `notify_interval` later, catching what committed in the
//! silent window; polling covers the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use relayer_core::{Delivery, MessageError, Namespace, NewMessage};
use tokio::time::Instant;

use crate::exec::Executor;
use crate::outbox::{DEFAULT_MAX_BODY_BYTES, EnqueueError, EnqueueParam, Enqueued, WrittenColumns};

/// How often, at most, a [`QueueWriter`] notifies one queue unless told otherwise.
pub use relayer_core::notifications::{DEFAULT_NOTIFY_INTERVAL, NOTIFY_AFTER_QUIET};

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
    /// The insert of one message: `INSERT … VALUES`, cheap to plan.
    one: Inserts,
    /// The insert of several messages: one multi-row statement over arrays.
    rows: Inserts,
    channel: String,
    transport: String,
    max_body_bytes: usize,
    /// The most bytes of rows one insert binds ([`crate::split`]); lowered only by tests.
    max_statement_bytes: usize,
    notify_interval: Duration,
    /// When each queue was last notified, and last written, by this writer (or its clones).
    notified: Arc<Mutex<HashMap<String, (Instant, Instant)>>>,
}

/// One insert, rendered with and without the NOTIFY: a write notifies only when due, and
/// then the statement without it is the one that runs (and is planned) almost every time.
#[derive(Clone, Debug)]
struct Inserts {
    notifying: String,
    silent: String,
}

impl QueueWriter {
    /// A writer for `namespace`'s queue table accepting messages whose transport is
    /// `queue_transport` (the name the queue transport is registered under, `"queue"` by
    /// default), with bodies up to [`DEFAULT_MAX_BODY_BYTES`].
    pub fn new(namespace: &Namespace, queue_transport: impl Into<String>) -> Self {
        let queue = namespace.table("queue");
        // Index: none read; each maintains queue_pkey and queue_receive_idx.
        // One message, the commonest write: the plain one-row insert. Sent unnamed it is
        // planned on every call, and costs a fraction of the multi-row statement's planning
        // (docs/performance.md, "Enqueue"). When due, the NOTIFY of its queue ($2) on $8.
        let one = format!(
            "INSERT INTO {queue} (message_id, queue, body, headers, trace_context, visible_at) \
             VALUES ($1::uuid, $2::text, $3::bytea, $4::jsonb, $5::text, \
                     coalesce($6::timestamptz, now() + $7::int8 * interval '1 microsecond', now())) \
             RETURNING seq, message_id"
        );
        // Several: one multi-row insert over arrays; when due, the NOTIFY of the queues in
        // $8 on $9, once, after it.
        let rows = format!(
            "INSERT INTO {queue} (message_id, queue, body, headers, trace_context, visible_at) \
             SELECT m.id, m.queue, m.body, m.headers, m.trace_context, \
                    coalesce(m.deliver_at, now() + m.delay_us * interval '1 microsecond', now()) \
             FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::jsonb[], $5::text[], \
                         $6::timestamptz[], $7::int8[]) WITH ORDINALITY \
                  AS m(id, queue, body, headers, trace_context, deliver_at, delay_us, ord) \
             ORDER BY m.ord RETURNING seq, message_id"
        );
        QueueWriter {
            one: Inserts {
                notifying: format!(
                    "WITH inserted AS ({one}), notified AS (SELECT pg_notify($8::text, $2::text) AS done) \
                     SELECT inserted.seq, inserted.message_id FROM inserted, notified"
                ),
                silent: one,
            },
            rows: Inserts {
                notifying: format!(
                    "WITH inserted AS ({rows}), \
                     notified AS (SELECT count(pg_notify($9::text, q)) AS n FROM unnest($8::text[]) AS q \
                                  WHERE EXISTS (SELECT FROM inserted)) \
                     SELECT inserted.seq, inserted.message_id FROM inserted, notified ORDER BY inserted.seq"
                ),
                silent: format!(
                    "WITH inserted AS ({rows}) SELECT seq, message_id FROM inserted ORDER BY seq"
                ),
            },
            channel: super::queue_channel(namespace),
            transport: queue_transport.into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_statement_bytes: crate::split::MAX_STATEMENT_BYTES,
            notify_interval: DEFAULT_NOTIFY_INTERVAL,
            notified: Arc::default(),
        }
    }

    /// Sets the largest body accepted, in bytes, at most
    /// [`MAX_BODY_BYTES_LIMIT`](relayer_core::options::MAX_BODY_BYTES_LIMIT) (1 GiB less
    /// 1 MiB, what one PostgreSQL insert can carry with its row): a larger value means that
    /// limit, so a body PostgreSQL would refuse inside the caller's transaction is refused
    /// before it (OUT-3).
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes.min(relayer_core::options::MAX_BODY_BYTES_LIMIT);
        self
    }

    /// The largest total of row bytes one insert binds, lowered by tests to split small
    /// batches (the default is [`MAX_STATEMENT_BYTES`](crate::split::MAX_STATEMENT_BYTES)).
    #[cfg(test)]
    pub(crate) fn with_max_statement_bytes(mut self, bytes: usize) -> Self {
        self.max_statement_bytes = bytes;
        self
    }

    /// Notifies each queue at most once per `interval` ([`Duration::ZERO`]: in every
    /// writing transaction), and after a quiet gap of [`NOTIFY_AFTER_QUIET`] in this
    /// writer's writes to it. The `queue::direct` module docs weigh the trade.
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
    ///
    /// One message runs a one-row `INSERT … VALUES`, cheap to plan even sent unnamed (a
    /// plain client or transaction plans every statement it sends); a batch runs one
    /// multi-row statement. To skip the planning as well, run the writer through
    /// [`Prepared`](crate::Prepared) over a [`StatementCache`](crate::StatementCache) that
    /// lives with your connection ([`PgClient::split`](crate::PgClient::split)):
    ///
    /// ```no_run
    /// # async fn example(client: tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use relayer_core::{Namespace, NewMessage};
    /// use relayer_postgres::{PgClient, Prepared, QueueWriter};
    ///
    /// let writer = QueueWriter::new(&Namespace::default(), "queue");
    /// let mut client = PgClient::new(client); // keeps the statements prepared on it
    /// let (connection, statements) = client.split();
    /// let tx = connection.transaction().await?;
    /// writer.enqueue(&Prepared::new(&tx, statements), &[NewMessage::new("queue", "orders", b"{}".to_vec())]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(
        &self,
        client: &impl Executor,
        messages: &[NewMessage],
    ) -> Result<Vec<Enqueued>, EnqueueError> {
        let batch = self.batch(messages)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let what = || format!("enqueueing {} into the queue table", crate::error::messages(batch.len()));
        let sizes: Vec<usize> = messages.iter().map(crate::split::message_bytes).collect();
        let runs = crate::split::split_by_bytes(&sizes, self.max_statement_bytes);
        if runs.len() <= 1 {
            let enqueued =
                crate::outbox::insert_and_read_back(client, batch.statement(), &batch.params(), what())
                    .await?;
            // The quiet gap counts from here: a writer whose writes follow each other back
            // to back is never quiet, however long each write takes.
            self.mark_written(messages);
            return Ok(enqueued);
        }
        // Over PostgreSQL's limits as one statement (SPEC §15): one insert per run, in
        // order; the first run's NOTIFY wakes the batch's queues on commit.
        let mut wake = batch.wake.clone();
        let mut written = Vec::with_capacity(messages.len());
        for run in runs {
            let part = self.encode(&messages[run], std::mem::take(&mut wake));
            written.extend(
                crate::outbox::insert_and_read_back(client, part.statement(), &part.params(), what()).await?,
            );
        }
        self.mark_written(messages);
        Ok(written)
    }

    /// Records that this writer has just written to the queues of `messages`.
    fn mark_written(&self, messages: &[NewMessage]) {
        let now = Instant::now();
        let mut notified = self.notified.lock().unwrap_or_else(PoisonError::into_inner);
        for message in messages.iter().filter(|m| m.delivery_time() == Delivery::Immediate) {
            if let Some((_, written)) = notified.get_mut(message.destination()) {
                *written = now;
            }
        }
    }

    /// Validates `messages` and encodes them as the parameters of the one insert this
    /// writer runs for them: the single source of its statement text and parameters for
    /// every driver (the tokio-postgres [`enqueue`](Self::enqueue) and the sqlx adapter
    /// run exactly this). It counts as this writer's notification of the batch's queues
    /// (see [`with_notify_interval`](Self::with_notify_interval)).
    ///
    /// Every message is validated first (OUT-3, and no lane); on any refusal there is no
    /// batch.
    pub fn batch<'a>(&'a self, messages: &'a [NewMessage]) -> Result<QueueBatch<'a>, MessageError> {
        for (index, message) in messages.iter().enumerate() {
            message.validate_direct(index, self.max_body_bytes, &self.transport)?;
        }
        let wake = if messages.is_empty() { Vec::new() } else { self.queues_to_notify(messages) };
        Ok(self.encode(messages, wake))
    }

    /// `messages` (already validated) encoded for the statement that fits them: the one-row
    /// insert for one message, the multi-row one for more; with the NOTIFY of `wake` only
    /// when it names a queue.
    fn encode<'a>(&'a self, messages: &'a [NewMessage], wake: Vec<&'a str>) -> QueueBatch<'a> {
        // One message notifies its own queue or none; a part of a split batch may carry the
        // whole batch's queues to wake, which only the multi-row statement can name.
        let single =
            matches!(messages, [message] if wake.iter().all(|queue| *queue == message.destination()));
        let inserts = if single { &self.one } else { &self.rows };
        let statement = if wake.is_empty() { &inserts.silent } else { &inserts.notifying };
        QueueBatch { statement, single, columns: WrittenColumns::of(messages), wake, channel: &self.channel }
    }

    /// The queues of immediately deliverable messages not notified within the interval, or
    /// written after a quiet gap of [`NOTIFY_AFTER_QUIET`]; marks them notified. Scheduled
    /// messages wake nobody: the pump's polling finds them.
    fn queues_to_notify<'a>(&self, messages: &'a [NewMessage]) -> Vec<&'a str> {
        let now = Instant::now();
        let mut notified = self.notified.lock().unwrap_or_else(PoisonError::into_inner);
        let mut wake = Vec::new();
        for message in messages.iter().filter(|m| m.delivery_time() == Delivery::Immediate) {
            let queue = message.destination();
            let last = notified.get(queue).copied();
            let due = last.is_none_or(|(notified, written)| {
                now.duration_since(notified) >= self.notify_interval
                    || now.duration_since(written) >= NOTIFY_AFTER_QUIET
            });
            if due && !wake.contains(&queue) {
                notified.insert(queue.to_owned(), (now, now));
                wake.push(queue);
            } else if let Some((notified_at, _)) = last {
                notified.insert(queue.to_owned(), (notified_at, now));
            }
        }
        wake
    }
}

/// One validated batch of messages encoded for the direct insert (see
/// [`QueueWriter::batch`]): the statement text and its parameters in order.
///
/// A driver runs [`statement`](Self::statement) with [`params`](Self::params) bound as
/// `$1, $2, …` in the order given, each with the PostgreSQL type its [`EnqueueParam`]
/// variant names, and reads back `(seq int8, message_id uuid)` per message, in enqueue
/// order.
pub struct QueueBatch<'a> {
    statement: &'a str,
    /// Whether `statement` is the one-message insert.
    single: bool,
    columns: WrittenColumns<'a>,
    /// The queues this batch notifies.
    wake: Vec<&'a str>,
    channel: &'a str,
}

impl std::fmt::Debug for QueueBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueBatch").field("messages", &self.len()).field("wake", &self.wake).finish()
    }
}

impl<'a> QueueBatch<'a> {
    /// Whether the batch has no message (then nothing needs to run).
    pub fn is_empty(&self) -> bool {
        self.columns.ids.is_empty()
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.columns.ids.len()
    }

    /// The statement to run.
    pub fn statement(&self) -> &'a str {
        self.statement
    }

    /// The statement's parameters, `$1` first: one value per column for one message, one
    /// array per column for more; then, when the batch notifies, what it notifies.
    pub fn params(&self) -> Vec<EnqueueParam<'_>> {
        let c = &self.columns;
        let mut params = if self.single {
            vec![
                EnqueueParam::Id(&c.ids[0]),
                EnqueueParam::Text(c.destinations[0]),
                EnqueueParam::Body(c.bodies[0]),
                EnqueueParam::HeaderObject(&c.headers[0]),
                EnqueueParam::OptionalText(c.trace_contexts[0]),
                EnqueueParam::OptionalTimestamp(c.deliver_at[0]),
                EnqueueParam::OptionalInt8(c.delays[0]),
            ]
        } else {
            vec![
                EnqueueParam::MessageIds(&c.ids),
                EnqueueParam::Texts(&c.destinations),
                EnqueueParam::Bytes(&c.bodies),
                EnqueueParam::Headers(&c.headers),
                EnqueueParam::OptionalTexts(&c.trace_contexts),
                EnqueueParam::OptionalTimestamps(&c.deliver_at),
                EnqueueParam::OptionalInt8s(&c.delays),
            ]
        };
        if !self.wake.is_empty() {
            // One message's queue is its own `$2`; a batch's queues to wake are an array.
            if !self.single {
                params.push(EnqueueParam::Texts(&self.wake));
            }
            params.push(EnqueueParam::Text(self.channel));
        }
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::placeholders;

    /// QUE-4: every statement shape binds exactly the parameters it names — one message
    /// (silent, notifying), several (silent, notifying), and one message of a split batch
    /// carrying other queues to wake, which only the multi-row statement can notify.
    #[test]
    fn each_direct_statement_shape_binds_what_it_names_que_4() {
        let writer = QueueWriter::new(&Namespace::default(), "queue");
        let one = [NewMessage::new("queue", "orders", b"a".to_vec())];
        let two = [
            NewMessage::new("queue", "orders", b"a".to_vec()),
            NewMessage::new("queue", "bills", b"b".to_vec()),
        ];
        let shapes = [
            (writer.encode(&one, vec![]), true, false),
            (writer.encode(&one, vec!["orders"]), true, true),
            (writer.encode(&two, vec![]), false, false),
            (writer.encode(&two, vec!["orders", "bills"]), false, true),
            (writer.encode(&one, vec!["orders", "bills"]), false, true),
        ];
        for (batch, single, notifies) in shapes {
            assert_eq!(placeholders(batch.statement()), batch.params().len(), "{batch:?}");
            assert_eq!(batch.statement().contains("unnest"), !single, "{batch:?}");
            assert_eq!(batch.statement().contains("pg_notify"), notifies, "{batch:?}");
        }
    }

    /// QUE-4: a writer's first write to a queue notifies it; a scheduled message wakes
    /// nobody (the pump's polling finds it when due), so its statement has no NOTIFY.
    #[test]
    fn a_first_write_notifies_and_a_scheduled_one_never_que_4() {
        let writer =
            QueueWriter::new(&Namespace::default(), "queue").with_notify_interval(Duration::from_secs(3_600));
        let later = [NewMessage::new("queue", "orders", b"a".to_vec())
            .delivery(Delivery::After(Duration::from_secs(60)))];
        assert!(!writer.batch(&later).unwrap().statement().contains("pg_notify"));
        let now = [NewMessage::new("queue", "orders", b"b".to_vec())];
        let batch = writer.batch(&now).unwrap();
        assert!(batch.statement().contains("pg_notify"));
        assert!(
            matches!(batch.params().last(), Some(EnqueueParam::Text(channel)) if *channel == writer.channel())
        );
    }

    /// OUT-3: no body limit lets through a body one PostgreSQL insert cannot carry.
    #[test]
    fn the_body_limit_never_exceeds_what_postgresql_stores_out_3() {
        let writer = QueueWriter::new(&Namespace::default(), "queue").with_max_body_bytes(usize::MAX);
        assert_eq!(writer.max_body_bytes, relayer_core::options::MAX_BODY_BYTES_LIMIT);
        assert_eq!(writer.with_max_body_bytes(64).max_body_bytes, 64);
    }
}
