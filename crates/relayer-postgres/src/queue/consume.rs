//! The queue table, consumer side (QUE-1, QUE-2, QUE-5): receive, settle, heartbeat.
//!
//! A receive takes up to n visible messages of one queue (`visible_at <= now()`, oldest
//! first, `FOR UPDATE SKIP LOCKED` so receivers never wait on each other), moves their
//! `visible_at` to `now() + visibility` and stamps them with one fresh receipt token, in one
//! statement. Every later statement about a received message — ack (delete), requeue,
//! dead-letter, heartbeat — matches its `(seq, receipt)`: once its visibility lapsed and
//! another reader received it, the first reader's statements match nothing (QUE-5). All of
//! them take arrays, so a batch of settlements is one round trip. Deadlines are on the
//! database clock (NS-4).

use std::time::{Duration, SystemTime};

use relayer_core::postgres::JsonbHeaders;
use relayer_core::time::database_micros;
use relayer_core::{BoundedText, Namespace, Timestamp, Uuid};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::Executor;
use crate::row_codec::malformed;

pub use relayer_core::queue_message::{QueueMessage, Receipt, Received, Undecodable};
use relayer_core::receive_cursor::ScanReach;
use relayer_core::store::ReceivedPage;
pub use relayer_core::store::{DeadLetter, Requeue};

/// The consumer statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct ConsumeStatements {
    table: String,
    receive: String,
    ack: String,
    requeue: String,
    dead_letter: String,
    extend: String,
    release: String,
}

impl ConsumeStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let queue = namespace.table("queue");
        ConsumeStatements {
            // Index: queue_receive_idx (queue, visible_at, seq) for the locked page, from `$5`
            // (µs since the epoch; NULL: from the oldest), so a receive from a position does
            // not walk the dead versions behind it (relayer_core::receive_cursor); then the
            // pkey. The `seq = ANY(ARRAY(… LIMIT n …))` shape stays bounded under a generic
            // plan (DRV-1b, docs/performance.md ("Raw limits")). Always one row more than
            // the messages, or one row of NULLs when there are none: the statement's clock
            // and the highest old `visible_at` taken, for the cursor.
            receive: format!(
                "WITH picked AS MATERIALIZED ( \
                   SELECT seq, visible_at FROM {queue} \
                   WHERE queue = $1 AND visible_at <= now() \
                     AND visible_at >= coalesce(timestamptz 'epoch' + $5::int8 * interval '1 microsecond', \
                                                '-infinity') \
                   ORDER BY visible_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED), \
                 moved AS ( \
                   UPDATE {queue} AS q \
                   SET visible_at = now() + $3::int8 * interval '1 microsecond', receipt = $4 \
                   WHERE q.seq = ANY(ARRAY(SELECT seq FROM picked)) \
                   RETURNING q.seq, q.message_id, q.queue, q.body, q.headers, q.trace_context, q.created_at, \
                             q.handled_count) \
                 SELECT m.seq, m.message_id, m.queue, m.body, m.headers, m.trace_context, m.created_at, \
                        m.handled_count, \
                        (extract(epoch FROM now()) * 1000000)::int8, \
                        (SELECT (extract(epoch FROM max(visible_at)) * 1000000)::int8 FROM picked) \
                 FROM (SELECT 1) AS one LEFT JOIN moved AS m ON true \
                 ORDER BY m.seq"
            ),
            // Every statement about received rows locks them first, in seq order (the
            // `locked` CTE: ORDER BY is applied before FOR UPDATE), so a heartbeat, an ack,
            // a requeue and a dead-letter on overlapping rows wait for each other in one
            // order and never deadlock (QUE-5). A row changed meanwhile is re-checked
            // against its receipt under the lock; one deleted meanwhile is skipped.
            // Index: queue_pkey per element; the receipt is checked on the row.
            ack: format!(
                "WITH locked AS (SELECT q.seq FROM {queue} AS q \
                   JOIN unnest($1::int8[], $2::uuid[]) AS a(seq, receipt) \
                     ON q.seq = a.seq AND q.receipt = a.receipt \
                   ORDER BY q.seq FOR UPDATE OF q) \
                 DELETE FROM {queue} AS q USING locked WHERE q.seq = locked.seq RETURNING q.seq"
            ),
            requeue: format!(
                "WITH locked AS (SELECT q.seq, a.delay_us FROM {queue} AS q \
                   JOIN unnest($1::int8[], $2::uuid[], $3::int8[]) AS a(seq, receipt, delay_us) \
                     ON q.seq = a.seq AND q.receipt = a.receipt \
                   ORDER BY q.seq FOR UPDATE OF q) \
                 UPDATE {queue} AS q SET visible_at = now() + locked.delay_us * interval '1 microsecond', \
                        handled_count = q.handled_count + 1, receipt = NULL \
                 FROM locked WHERE q.seq = locked.seq RETURNING q.seq"
            ),
            // The move is an update in place: the dead-letter queue is rows of the same
            // table, stamped with where they came from (QUE-2, DLP-4) — the first queue, when
            // a message is dead-lettered again from a dead-letter queue a subscription consumes.
            dead_letter: format!(
                "WITH locked AS (SELECT q.seq, a.target, a.reason, a.message, a.handled FROM {queue} AS q \
                   JOIN unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int4[]) \
                        AS a(seq, receipt, target, reason, message, handled) \
                     ON q.seq = a.seq AND q.receipt = a.receipt \
                   ORDER BY q.seq FOR UPDATE OF q) \
                 UPDATE {queue} AS q SET queue = locked.target, \
                        original_topic = coalesce(q.original_topic, q.queue), \
                        rejection_reason = locked.reason, rejection_message = locked.message, \
                        dead_lettered_at = now(), visible_at = now(), receipt = NULL, \
                        handled_count = q.handled_count + locked.handled \
                 FROM locked WHERE q.seq = locked.seq RETURNING q.seq"
            ),
            // The heartbeat (QUE-5): counted from the statement's clock, not its transaction's.
            extend: format!(
                "WITH locked AS (SELECT q.seq FROM {queue} AS q \
                   JOIN unnest($1::int8[], $2::uuid[]) AS a(seq, receipt) \
                     ON q.seq = a.seq AND q.receipt = a.receipt \
                   ORDER BY q.seq FOR UPDATE OF q) \
                 UPDATE {queue} AS q SET visible_at = clock_timestamp() + $3::int8 * interval '1 microsecond' \
                 FROM locked WHERE q.seq = locked.seq"
            ),
            // Giving unstarted messages back at shutdown: visible at once, receipt cleared.
            release: format!(
                "WITH locked AS (SELECT q.seq FROM {queue} AS q \
                   JOIN unnest($1::int8[], $2::uuid[]) AS a(seq, receipt) \
                     ON q.seq = a.seq AND q.receipt = a.receipt \
                   ORDER BY q.seq FOR UPDATE OF q) \
                 UPDATE {queue} AS q SET visible_at = clock_timestamp(), receipt = NULL \
                 FROM locked WHERE q.seq = locked.seq"
            ),
            table: queue,
        }
    }

    /// The qualified queue table, as errors about its rows name it.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Receives up to `limit` visible messages of `queue`, oldest `visible_at` first,
    /// invisible to others for `visibility`, under one new receipt token. Rows that cannot
    /// be decoded are received too, each with the reason, so the caller can move them
    /// aside (§15).
    pub async fn receive(
        &self,
        client: &impl Executor,
        queue: &str,
        limit: u32,
        visibility: Duration,
    ) -> Result<Vec<Received>, StorageError> {
        Ok(self.receive_from(client, queue, limit, visibility, None).await?.received)
    }

    /// [`receive`](Self::receive) of the rows whose `visible_at` is at or after `from` (µs
    /// since the Unix epoch; `None`: all), reporting how far it reached
    /// ([`relayer_core::receive_cursor`]).
    pub async fn receive_from(
        &self,
        client: &impl Executor,
        queue: &str,
        limit: u32,
        visibility: Duration,
        from: Option<i64>,
    ) -> Result<ReceivedPage, StorageError> {
        let token = Uuid::new_v4();
        let asked = limit;
        let limit = i64::from(limit);
        let visibility = database_micros(visibility);
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&queue, Type::TEXT),
            (&limit, Type::INT8),
            (&visibility, Type::INT8),
            (&token, Type::UUID),
            (&from, Type::INT8),
        ];
        let rows =
            crate::exec::rows(client, &self.receive, &params, format!("receiving from queue {queue:?}"))
                .await?;
        // The statement always returns a row; its clock is never NULL.
        let (clock_us, last_visible_at_us) =
            rows.first().map_or((0, None), |row| (row.get::<_, i64>(8), row.get::<_, Option<i64>>(9)));
        let received: Vec<Received> = rows
            .iter()
            .filter(|row| row.get::<_, Option<i64>>(0).is_some())
            .map(|row| self.decode(row, token))
            .collect();
        let reach = ScanReach { asked, received: received.len(), clock_us, last_visible_at_us };
        Ok(ReceivedPage { received, reach })
    }

    fn decode(&self, row: &Row, token: Uuid) -> Received {
        // `seq` is an identity column and the receipt was just written: both always decode.
        let seq: i64 = row.get(0);
        let receipt = Receipt { seq, token };
        let undecodable = |column: &'static str, problem: String| Undecodable {
            table: self.table.clone(),
            seq,
            column,
            problem,
        };
        let message = decode_message(row, seq).map_err(|(column, problem)| undecodable(column, problem));
        Received { receipt, message }
    }

    /// Deletes the acknowledged messages whose receipt still holds; returns their seqs.
    pub async fn ack(&self, client: &impl Executor, receipts: &[Receipt]) -> Result<Vec<i64>, StorageError> {
        let (seqs, tokens) = split(receipts.iter().copied());
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&seqs, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY)];
        settled(client.rows(&self.ack, &params).await, || {
            format!("acknowledging {}", crate::error::messages(seqs.len()))
        })
    }

    /// Makes messages visible again after their delay, one more handled each; returns the
    /// seqs whose receipt still held.
    pub async fn requeue(
        &self,
        client: &impl Executor,
        requeues: &[Requeue],
    ) -> Result<Vec<i64>, StorageError> {
        let (seqs, tokens) = split(requeues.iter().map(|r| r.receipt));
        let delays: Vec<i64> = requeues.iter().map(|r| database_micros(r.delay)).collect();
        let params: [(&(dyn ToSql + Sync), Type); 3] =
            [(&seqs, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY), (&delays, Type::INT8_ARRAY)];
        settled(client.rows(&self.requeue, &params).await, || {
            format!("requeueing {}", crate::error::messages(seqs.len()))
        })
    }

    /// Moves messages to their dead-letter queues with the QUE-2 stamps; returns the seqs
    /// whose receipt still held.
    pub async fn dead_letter(
        &self,
        client: &impl Executor,
        dead_letters: &[DeadLetter],
    ) -> Result<Vec<i64>, StorageError> {
        let (seqs, tokens) = split(dead_letters.iter().map(|d| d.receipt));
        let targets: Vec<&str> = dead_letters.iter().map(|d| d.queue.as_str()).collect();
        let reasons: Vec<&str> = dead_letters.iter().map(|d| d.reason.as_str()).collect();
        // A handler's message is external text: bounded, and without NUL (SPEC §15).
        let messages: Vec<BoundedText> =
            dead_letters.iter().map(|d| BoundedText::error(&d.message)).collect();
        let handled: Vec<i32> = dead_letters.iter().map(|d| i32::from(d.handled)).collect();
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&seqs, Type::INT8_ARRAY),
            (&tokens, Type::UUID_ARRAY),
            (&targets, Type::TEXT_ARRAY),
            (&reasons, Type::TEXT_ARRAY),
            (&messages, Type::TEXT_ARRAY),
            (&handled, Type::INT4_ARRAY),
        ];
        settled(client.rows(&self.dead_letter, &params).await, || {
            format!("dead-lettering {}", crate::error::messages(seqs.len()))
        })
    }

    /// The heartbeat: keeps messages invisible for `visibility` more, counted from now;
    /// returns how many receipts still held.
    pub async fn extend(
        &self,
        client: &impl Executor,
        receipts: &[Receipt],
        visibility: Duration,
    ) -> Result<u64, StorageError> {
        let (seqs, tokens) = split(receipts.iter().copied());
        let visibility = database_micros(visibility);
        let params: [(&(dyn ToSql + Sync), Type); 3] =
            [(&seqs, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY), (&visibility, Type::INT8)];
        client.affected(&self.extend, &params).await.map_err(|e| {
            StorageError::database(
                format!("extending the visibility of {}", crate::error::messages(seqs.len())),
                e,
            )
        })
    }

    /// Gives received messages back unhandled: visible at once, receipt cleared, handled
    /// count unchanged; returns how many receipts still held.
    pub async fn release(&self, client: &impl Executor, receipts: &[Receipt]) -> Result<u64, StorageError> {
        let (seqs, tokens) = split(receipts.iter().copied());
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&seqs, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY)];
        client.affected(&self.release, &params).await.map_err(|e| {
            StorageError::database(format!("releasing {}", crate::error::messages(seqs.len())), e)
        })
    }
}

/// Seqs and tokens as two arrays, in the order given, so every array bound beside them
/// (delays, targets …) lines up with them element for element. Not sorted here: the
/// statements lock their rows in seq order themselves (`ORDER BY q.seq FOR UPDATE`),
/// whatever order they are bound in — which `tests/queue_locks.rs` checks by binding in
/// several orders.
fn split(receipts: impl Iterator<Item = Receipt>) -> (Vec<i64>, Vec<Uuid>) {
    receipts.map(|r| (r.seq, r.token)).unzip()
}

fn settled(
    result: Result<Vec<Row>, tokio_postgres::Error>,
    what: impl FnOnce() -> String,
) -> Result<Vec<i64>, StorageError> {
    let rows = result.map_err(|e| StorageError::database(what(), e))?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Decodes the received columns after `seq`; on failure, the column and the problem.
fn decode_message(row: &Row, seq: i64) -> Result<QueueMessage, (&'static str, String)> {
    fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
        row: &'a Row,
        index: usize,
        name: &'static str,
    ) -> Result<T, (&'static str, String)> {
        row.try_get(index).map_err(|e| (name, malformed(&e).unwrap_or_else(|| e.to_string())))
    }
    let headers: JsonbHeaders<'_> = column(row, 4, "headers")?;
    let created_at: SystemTime = column(row, 6, "created_at")?;
    let handled_count: i32 = column(row, 7, "handled_count")?;
    Ok(QueueMessage {
        seq,
        id: column(row, 1, "message_id")?,
        queue: column(row, 2, "queue")?,
        body: column(row, 3, "body")?,
        headers: headers.into_headers(),
        trace_context: column(row, 5, "trace_context")?,
        created_at: Timestamp::from_system_time(created_at),
        handled_count: u32::try_from(handled_count)
            .map_err(|_| ("handled_count", format!("{handled_count} is negative")))?,
    })
}
