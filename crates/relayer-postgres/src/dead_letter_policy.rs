//! The statements of the dead-letter policy pass (DLP-1..DLP-5).
//!
//! Each move is **one statement** (DLP-3): it picks a batch of at most `n` rows with
//! `seq = ANY(ARRAY(SELECT … LIMIT n FOR UPDATE SKIP LOCKED))` and changes them in the same
//! statement. A row locked by another replica's statement is skipped, and once that
//! statement commits the row is no longer a dead letter of the type, so however many
//! replicas run, each dead letter moves exactly once. The `ARRAY(…)` shape keeps a batch
//! bounded under a generic plan made on an empty table (docs/performance.md ("Raw limits"), DRV-1b).
//!
//! Every statement on the queue table matches **both** the dead-letter queue and the
//! original topic (DLP-4), so types may share a dead-letter queue, and a dead letter without
//! an original topic is never touched (`original_topic = $2` is never true for NULL). The
//! invalid-message queue is never named by a policy (the core crate's DLP-6 check refuses
//! it). Undecodable dead letters (`unacceptable`) are never redriven: they would fail again.
//!
//! A redrive moves the row back to `queue = original_topic`, visible now, with a fresh
//! `handled_count` and without its rejection stamps or receipt; a dead letter a consumer of
//! the dead-letter queue holds right now (received, visibility not lapsed) is skipped; the same
//! statement notifies the queue's channel with the original topic when it moved any, so
//! listening consumers take the messages at once. The outbox's dead rows are redriven
//! by moving them back into the outbox (a new `seq`; same id, body, headers, creation
//! context and `created_at`; no attempts; visible now), waking dispatchers with a NOTIFY.
//! Policies leave the outbox's lane rows alone: back in the outbox they would queue behind
//! later rows of their lane (LAN-5); operators redrive them by hand.
//!
//! Windows are computed on the database clock (NS-4): `after` from `dead_lettered_at`
//! (`failed_at` for the outbox), `give_up_after` from `created_at`.

use std::time::Duration;

use relayer_core::Namespace;
use relayer_core::dead_letter::{DeadLetterType, UNACCEPTABLE};
use relayer_core::time::database_micros;
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::{Executor, one_row};
use crate::outbox::notify_channel;
use crate::queue::queue_channel;

/// The most stuck dead letters one count reads (DLP-5): the policy worker counts them
/// every pass and the console on every view, so a pile of millions costs a bounded read; a
/// count equal to the cap means "at least that many".
pub const STUCK_COUNT_CAP: u64 = 10_000;

/// The dead-letter policy statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct DeadLetterPolicyStatements {
    queue_redrive: String,
    queue_expire: String,
    queue_stuck: String,
    outbox_redrive: String,
    outbox_expire: String,
    outbox_stuck: String,
    /// The outbox's channel: an outbox redrive wakes dispatchers.
    channel: String,
    /// The queue's channel: a queue redrive wakes the original topic's consumers.
    queue_channel: String,
}

impl DeadLetterPolicyStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let (queue, dead, outbox) =
            (namespace.table("queue"), namespace.table("dead"), namespace.table("outbox"));
        let decodable = format!("rejection_reason IS DISTINCT FROM '{UNACCEPTABLE}'");
        // A dead letter a consumer of the dead-letter queue holds right now is in flight:
        // not redriven (its handler may still ack it); a redriven row loses its receipt, so
        // a lapsed reader's late ack cannot delete it from the queue it returned to.
        let not_in_flight = "(receipt IS NULL OR visible_at <= now())";
        DeadLetterPolicyStatements {
            // Index: queue_dead_letter_idx (queue, original_topic, dead_lettered_at)
            // WHERE original_topic IS NOT NULL: the range between the give-up and the `after`
            // cut-offs. A message is dead-lettered after it was created, so one created within
            // `give_up_after` was dead-lettered within it too: the lower bound is implied by
            // the created_at test, and lets the scan skip the stuck dead letters (DLP-5)
            // instead of reading them in every batch.
            // The NOTIFY wakes the original topic's consumers when messages came back, as a
            // write to that queue would (issue 25): they take them at once, not at their next
            // poll.
            queue_redrive: format!(
                "WITH moved AS ( \
                 UPDATE {queue} q SET queue = q.original_topic, visible_at = now(), handled_count = 0, \
                        original_topic = NULL, rejection_reason = NULL, rejection_message = NULL, \
                        dead_lettered_at = NULL, receipt = NULL \
                 WHERE q.seq = ANY(ARRAY( \
                   SELECT seq FROM {queue} \
                   WHERE queue = $1 AND original_topic = $2 \
                     AND dead_lettered_at <= now() - $3::int8 * interval '1 microsecond' \
                     AND dead_lettered_at > now() - $4::int8 * interval '1 microsecond' \
                     AND created_at > now() - $4::int8 * interval '1 microsecond' AND {decodable} \
                     AND {not_in_flight} \
                   ORDER BY dead_lettered_at LIMIT $5 FOR UPDATE SKIP LOCKED)) \
                   AND q.queue = $1 AND q.original_topic = $2 \
                 RETURNING 1), \
                 counted AS (SELECT count(*) AS moved FROM moved), \
                 notified AS (SELECT pg_notify($6::text, $2) FROM counted WHERE moved > 0) \
                 SELECT moved, (SELECT count(*) FROM notified) FROM counted"
            ),
            // Index: queue_dead_letter_idx.
            queue_expire: format!(
                "DELETE FROM {queue} q \
                 WHERE q.seq = ANY(ARRAY( \
                   SELECT seq FROM {queue} \
                   WHERE queue = $1 AND original_topic = $2 \
                     AND dead_lettered_at <= now() - $3::int8 * interval '1 microsecond' \
                   ORDER BY dead_lettered_at LIMIT $4 FOR UPDATE SKIP LOCKED)) \
                   AND q.queue = $1 AND q.original_topic = $2"
            ),
            // Index: queue_dead_letter_idx; reads the type's dead letters past `after`, at
            // most STUCK_COUNT_CAP of them (every pass and every console view runs it).
            queue_stuck: format!(
                "SELECT count(*) FROM (SELECT 1 FROM {queue} \
                 WHERE queue = $1 AND original_topic = $2 \
                   AND dead_lettered_at <= now() - $3::int8 * interval '1 microsecond' \
                   AND created_at <= now() - $4::int8 * interval '1 microsecond' AND {decodable} \
                 LIMIT {STUCK_COUNT_CAP}) AS capped"
            ),
            // Index: dead_failed_at_idx, the range between the give-up and the `after`
            // cut-offs (a row fails after it was created, as above), filtered by type
            // (the dead table is bounded by cleanup's dead_retention); outbox indexes are
            // maintained by the insert. The NOTIFY wakes dispatchers when rows came back.
            outbox_redrive: format!(
                "WITH gone AS ( \
                   DELETE FROM {dead} d \
                   WHERE d.seq = ANY(ARRAY( \
                     SELECT seq FROM {dead} \
                     WHERE transport = $1 AND destination = $2 AND lane IS NULL \
                       AND failed_at <= now() - $3::int8 * interval '1 microsecond' \
                       AND failed_at > now() - $4::int8 * interval '1 microsecond' \
                       AND created_at > now() - $4::int8 * interval '1 microsecond' \
                     ORDER BY failed_at LIMIT $5 FOR UPDATE SKIP LOCKED)) \
                     AND d.transport = $1 AND d.destination = $2 AND d.lane IS NULL \
                   RETURNING d.seq, d.message_id, d.transport, d.destination, d.body, d.headers, \
                             d.trace_context, d.created_at, d.deliver_at), \
                 back AS ( \
                   INSERT INTO {outbox} (message_id, transport, destination, body, headers, trace_context, \
                                         created_at, deliver_at, visible_at) \
                   SELECT message_id, transport, destination, body, headers, trace_context, created_at, \
                          deliver_at, now() FROM gone ORDER BY seq \
                   RETURNING 1), \
                 counted AS (SELECT count(*) AS moved FROM back), \
                 notified AS (SELECT pg_notify($6::text, '') FROM counted WHERE moved > 0) \
                 SELECT moved, (SELECT count(*) FROM notified) FROM counted"
            ),
            // Index: dead_failed_at_idx.
            outbox_expire: format!(
                "DELETE FROM {dead} d \
                 WHERE d.seq = ANY(ARRAY( \
                   SELECT seq FROM {dead} \
                   WHERE transport = $1 AND destination = $2 AND lane IS NULL \
                     AND failed_at <= now() - $3::int8 * interval '1 microsecond' \
                   ORDER BY failed_at LIMIT $4 FOR UPDATE SKIP LOCKED)) \
                   AND d.transport = $1 AND d.destination = $2 AND d.lane IS NULL"
            ),
            // Index: dead_failed_at_idx; at most STUCK_COUNT_CAP rows read.
            outbox_stuck: format!(
                "SELECT count(*) FROM (SELECT 1 FROM {dead} \
                 WHERE transport = $1 AND destination = $2 AND lane IS NULL \
                   AND failed_at <= now() - $3::int8 * interval '1 microsecond' \
                   AND created_at <= now() - $4::int8 * interval '1 microsecond' \
                 LIMIT {STUCK_COUNT_CAP}) AS capped"
            ),
            channel: notify_channel(namespace),
            queue_channel: queue_channel(namespace),
        }
    }

    /// Redrives up to `limit` dead letters of `message_type` dead-lettered at least `after`
    /// ago and created less than `give_up_after` ago, in one statement (DLP-3); returns how
    /// many moved. Queue dead letters go back to their original topic; outbox dead rows back
    /// into the outbox, waking dispatchers.
    pub async fn redrive(
        &self,
        client: &impl Executor,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        let (after, give_up, limit) =
            (database_micros(after), database_micros(give_up_after), i64::from(limit));
        let (first, second) = names(message_type);
        let what = format!("redriving the dead letters of {message_type}");
        let (sql, channel) = match message_type {
            DeadLetterType::Queue { .. } => (&self.queue_redrive, &self.queue_channel),
            DeadLetterType::Outbox { .. } => (&self.outbox_redrive, &self.channel),
        };
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&first, Type::TEXT),
            (&second, Type::TEXT),
            (&after, Type::INT8),
            (&give_up, Type::INT8),
            (&limit, Type::INT8),
            (channel, Type::TEXT),
        ];
        let row = one_row(client, sql, &params, &what).await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Deletes up to `limit` dead letters of `message_type` dead-lettered at least `after`
    /// ago; returns how many.
    pub async fn expire(
        &self,
        client: &impl Executor,
        message_type: &DeadLetterType,
        after: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        let (after, limit) = (database_micros(after), i64::from(limit));
        let (first, second) = names(message_type);
        let params: [(&(dyn ToSql + Sync), Type); 4] =
            [(&first, Type::TEXT), (&second, Type::TEXT), (&after, Type::INT8), (&limit, Type::INT8)];
        let sql = match message_type {
            DeadLetterType::Queue { .. } => &self.queue_expire,
            DeadLetterType::Outbox { .. } => &self.outbox_expire,
        };
        crate::exec::affected(client, sql, &params, format!("expiring the dead letters of {message_type}"))
            .await
    }

    /// Counts the dead letters of `message_type` whose redrive gave up: due (`after`) but
    /// created `give_up_after` ago or earlier (DLP-5), up to [`STUCK_COUNT_CAP`]: a count
    /// equal to the cap means "at least that many".
    pub async fn stuck(
        &self,
        client: &impl Executor,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
    ) -> Result<u64, StorageError> {
        let (after, give_up) = (database_micros(after), database_micros(give_up_after));
        let (first, second) = names(message_type);
        let params: [(&(dyn ToSql + Sync), Type); 4] =
            [(&first, Type::TEXT), (&second, Type::TEXT), (&after, Type::INT8), (&give_up, Type::INT8)];
        let sql = match message_type {
            DeadLetterType::Queue { .. } => &self.queue_stuck,
            DeadLetterType::Outbox { .. } => &self.outbox_stuck,
        };
        let what = format!("counting the stuck dead letters of {message_type}");
        let row = one_row(client, sql, &params, &what).await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

/// The two names a statement matches (`$1`, `$2`): the dead-letter queue and the original
/// topic, or the transport and the destination.
fn names(message_type: &DeadLetterType) -> (&str, &str) {
    match message_type {
        DeadLetterType::Queue { original_topic, dead_letter_queue } => (dead_letter_queue, original_topic),
        DeadLetterType::Outbox { transport, destination } => (transport, destination),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_saturate_inside_what_postgresql_can_subtract() {
        let longest = database_micros(relayer_core::time::MAX_DATABASE_DURATION);
        assert_eq!(database_micros(Duration::from_secs(1)), 1_000_000);
        assert_eq!(database_micros(Duration::MAX), longest);
    }

    #[test]
    fn every_queue_statement_matches_the_dead_letter_queue_and_the_original_topic_dlp_4() {
        let statements = DeadLetterPolicyStatements::new(&Namespace::default());
        for sql in [&statements.queue_redrive, &statements.queue_expire, &statements.queue_stuck] {
            assert!(sql.contains("queue = $1 AND original_topic = $2"), "{sql}");
        }
        for sql in [&statements.outbox_redrive, &statements.outbox_expire, &statements.outbox_stuck] {
            assert!(sql.contains("transport = $1 AND destination = $2 AND lane IS NULL"), "{sql}");
        }
    }
}
