//! Which rows a worker may touch, and what it does with them: pure decisions that the
//! storage crate's SQL mirrors, checked against each other by property tests.
//!
//! Every decision takes the database's `now` (NS-4) and a plain row value, and returns a
//! boolean or an enum; the workers do the reads and the writes. An outbox row has a single
//! `visible_at`, the later of its delivery time, its next retry time and its live claim's
//! deadline, so "free to claim" is just `visible_at <= now` — an expired claim frees the
//! row whatever its claim token says. Recovery adds the unordered and old-enough tests
//! (SWP-2, LAN-4). Retention deletes dead and inbox rows strictly older than their
//! retention and never touches pending outbox rows (RET-1..3). Dead-letter policies
//! redrive or expire dead letters of their own type (DLP-1..5). A row reaching
//! `max_attempts`, or failing permanently, is poison (DSP-5); a destination that keeps
//! failing is skipped for a while by its [`CircuitBreaker`](crate::CircuitBreaker) (DSP-6).

use std::num::NonZeroU32;
use std::time::Duration;

use uuid::Uuid;

use crate::duration::Retention;
use crate::options::{Field, OptionsError, check_greater};
use crate::time::Timestamp;
use crate::transport::ErrorClass;

// ---------------------------------------------------------------------------------------
// Outbox rows: direct dispatch and recovery
// ---------------------------------------------------------------------------------------

/// The columns of an outbox row that decisions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRow {
    /// Insert order (ascending, unique): the keyset of the recovery cursor.
    pub seq: i64,
    /// When the writing transaction inserted the row (database clock).
    pub created_at: Timestamp,
    /// When the row may next be claimed: the latest of its delivery time, its next retry
    /// time and its live claim's deadline.
    pub visible_at: Timestamp,
    /// The ordered-delivery lane, or `None` for an unordered row.
    pub lane: Option<String>,
    /// The token of the latest claim; meaningless once `visible_at` has passed.
    pub claim_token: Option<Uuid>,
    /// Failed send attempts so far.
    pub attempts: i32,
}

impl OutboxRow {
    /// An unordered, unclaimed row inserted at `created_at` for immediate delivery.
    pub fn new(seq: i64, created_at: Timestamp) -> Self {
        OutboxRow { seq, created_at, visible_at: created_at, lane: None, claim_token: None, attempts: 0 }
    }

    /// Whether a claim still holds the row at `now`.
    pub fn has_live_claim(&self, now: Timestamp) -> bool {
        self.claim_token.is_some() && self.visible_at > now
    }
}

/// Whether the row is free to claim at `now`: due, not backing off, and not held by a
/// live claim (DSP-1). Lane-agnostic: the lane dispatcher applies it to lane heads.
pub fn is_visible(row: &OutboxRow, now: Timestamp) -> bool {
    row.visible_at <= now
}

/// Whether direct dispatch may claim the row at `now`: unordered and visible (DSP-1).
/// Lane rows belong to the lane dispatcher alone (LAN-1).
pub fn dispatch_claimable(row: &OutboxRow, now: Timestamp) -> bool {
    row.lane.is_none() && is_visible(row, now)
}

/// Whether the recovery sweeper may pick the row at `now` (SWP-2): claimable by direct
/// dispatch and at least `recovery_delay` old, so younger rows are left to
/// commit-triggered dispatch. A lane row is never eligible (LAN-4).
pub fn recovery_eligible(row: &OutboxRow, now: Timestamp, recovery_delay: Duration) -> bool {
    dispatch_claimable(row, now) && row.created_at <= now.saturating_sub(recovery_delay)
}

/// Whether a failed send makes the row poison, i.e. moves it to the dead table (DSP-5).
///
/// `attempts_after_failure` counts the failure just seen. Without `max_attempts` nothing
/// is poison: a failing row stays pending, and durable, forever. With it, a row is poison
/// once it reaches `max_attempts`, or at once when the error is permanent (TRN-2), since
/// retrying cannot help.
pub fn is_poison(attempts_after_failure: u32, max_attempts: Option<NonZeroU32>, class: ErrorClass) -> bool {
    match max_attempts {
        None => false,
        Some(max) => class == ErrorClass::Permanent || attempts_after_failure >= max.get(),
    }
}

// ---------------------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------------------

/// A table retention cleanup knows about, and whether its rows expire by age (RET-1, RET-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetentionTable {
    /// Pending, scheduled and parked messages. They never expire by age: accepted rows
    /// are deleted at once by dispatch, and anything else is still owed to a transport.
    Outbox,
    /// Poison rows, aged from `failed_at` against the dead retention.
    Dead,
    /// Processed message ids, aged from `processed_at` against the inbox retention.
    Inbox,
}

impl RetentionTable {
    /// Every table, in the order cleanup visits them.
    pub const ALL: [RetentionTable; 3] =
        [RetentionTable::Outbox, RetentionTable::Dead, RetentionTable::Inbox];

    /// Whether rows of this table may be deleted by age at all.
    pub const fn expires_by_age(self) -> bool {
        !matches!(self, RetentionTable::Outbox)
    }

    /// The cutoff for this table under `retention`: rows aged from before it are deleted.
    /// Always `None` for the outbox, whatever `retention` says (RET-1).
    pub fn cutoff(self, now: Timestamp, retention: Retention) -> Option<Timestamp> {
        if self.expires_by_age() { retention_cutoff(now, retention) } else { None }
    }
}

/// Rows whose age column is strictly before this instant are expired; `None` keeps every
/// row (RET-3). Saturates instead of overflowing.
pub fn retention_cutoff(now: Timestamp, retention: Retention) -> Option<Timestamp> {
    retention.duration().map(|keep| now.saturating_sub(keep))
}

/// Whether a dead row that failed at `failed_at` is expired at `now` (RET-2): strictly
/// older than the retention. [`Retention::Keep`] never expires anything.
pub fn dead_row_expired(failed_at: Timestamp, now: Timestamp, retention: Retention) -> bool {
    RetentionTable::Dead.cutoff(now, retention).is_some_and(|cutoff| failed_at < cutoff)
}

/// Whether an inbox row processed at `processed_at` is expired at `now` (RET-2), by the
/// same rule as [`dead_row_expired`].
///
/// The inbox retention bounds deduplication (RET-5): it must exceed the broker's
/// redelivery window, or a late redelivery runs its handler a second time.
pub fn inbox_row_expired(processed_at: Timestamp, now: Timestamp, retention: Retention) -> bool {
    RetentionTable::Inbox.cutoff(now, retention).is_some_and(|cutoff| processed_at < cutoff)
}

// ---------------------------------------------------------------------------------------
// Dead-letter policies
// ---------------------------------------------------------------------------------------

/// The columns of a dead letter that a policy reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetterRow {
    /// The topic the message was dead-lettered from; `None` for a dead letter relayer did
    /// not produce, which no policy ever touches (DLP-4).
    pub original_topic: Option<String>,
    /// When the message was dead-lettered (database clock).
    pub dead_lettered_at: Timestamp,
    /// When the message was first created (database clock).
    pub created_at: Timestamp,
}

/// What a policy does with its message type's dead letters (DLP-1, DLP-2).
///
/// `after` counts from dead-lettering, `give_up_after` from the message's creation.
/// Construction checks `give_up_after > after`, naming the field and the value.
///
/// ```
/// use std::time::Duration;
/// use relayer_core::eligibility::{DeadLetterDecision, DeadLetterPolicy, DeadLetterRow};
/// use relayer_core::Timestamp;
/// let hour = Duration::from_secs(3_600);
/// let policy = DeadLetterPolicy::redrive(hour, 24 * hour).unwrap();
/// let row = DeadLetterRow {
///     original_topic: Some("orders".into()),
///     dead_lettered_at: Timestamp::EPOCH,
///     created_at: Timestamp::EPOCH,
/// };
/// assert_eq!(policy.decide(&row, Timestamp::EPOCH.saturating_add(hour)), DeadLetterDecision::Redrive);
/// assert_eq!(policy.decide(&row, Timestamp::EPOCH.saturating_add(24 * hour)), DeadLetterDecision::GaveUp);
/// assert!(DeadLetterPolicy::redrive(hour, hour).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeadLetterPolicy {
    action: DeadLetterAction,
}

/// The action of a [`DeadLetterPolicy`], as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadLetterAction {
    /// Move dead letters back to their original topic `after` dead-lettering, until
    /// `give_up_after` creation.
    Redrive {
        /// Wait after dead-lettering.
        after: Duration,
        /// Age since creation past which a message is no longer redriven.
        give_up_after: Duration,
    },
    /// Delete dead letters `after` dead-lettering.
    Expire {
        /// Wait after dead-lettering.
        after: Duration,
    },
}

impl DeadLetterPolicy {
    /// Redrive `after` dead-lettering, until `give_up_after` creation. Refuses
    /// `give_up_after <= after`: no message could ever be redriven.
    pub fn redrive(after: Duration, give_up_after: Duration) -> Result<Self, OptionsError> {
        check_greater(Field::bare("give_up_after"), give_up_after, Field::bare("after"), after)?;
        Ok(DeadLetterPolicy { action: DeadLetterAction::Redrive { after, give_up_after } })
    }

    /// Delete `after` dead-lettering. Any duration is valid, zero included.
    pub const fn expire(after: Duration) -> Self {
        DeadLetterPolicy { action: DeadLetterAction::Expire { after } }
    }

    /// The configured action.
    pub const fn action(&self) -> DeadLetterAction {
        self.action
    }

    /// The wait after dead-lettering, for either action.
    pub const fn after(&self) -> Duration {
        match self.action {
            DeadLetterAction::Redrive { after, .. } | DeadLetterAction::Expire { after } => after,
        }
    }

    /// What to do with `row` at `now` (DLP-2, DLP-4, DLP-5).
    ///
    /// A dead letter without an original topic is [`Untouched`](DeadLetterDecision::Untouched).
    /// Otherwise it waits until `after` has passed since dead-lettering (inclusive); then
    /// an expire policy expires it, and a redrive policy redrives it unless it is already
    /// `give_up_after` old or older since creation, in which case it gave up. The worker
    /// only ever looks at rows of its own type's original topic in its dead-letter queue.
    pub fn decide(&self, row: &DeadLetterRow, now: Timestamp) -> DeadLetterDecision {
        if row.original_topic.is_none() {
            return DeadLetterDecision::Untouched;
        }
        if row.dead_lettered_at > now.saturating_sub(self.after()) {
            return DeadLetterDecision::Wait;
        }
        match self.action {
            DeadLetterAction::Expire { .. } => DeadLetterDecision::Expire,
            DeadLetterAction::Redrive { give_up_after, .. } => {
                if row.created_at <= now.saturating_sub(give_up_after) {
                    DeadLetterDecision::GaveUp
                } else {
                    DeadLetterDecision::Redrive
                }
            }
        }
    }
}

/// The outcome of [`DeadLetterPolicy::decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadLetterDecision {
    /// No original topic: never touched by any policy (DLP-4).
    Untouched,
    /// Not yet `after` since dead-lettering: leave it for a later pass.
    Wait,
    /// Move it back to its original topic with a fresh handled count (DLP-3).
    Redrive,
    /// Delete it.
    Expire,
    /// Redrive was due but the message is past `give_up_after`: left in place, counted
    /// and logged by every pass (DLP-5).
    GaveUp,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_micros(seconds * SECOND)
    }

    const fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn visible_at_alone_decides_claimability_dsp_1() {
        let mut row = OutboxRow::new(1, at(0));
        assert!(dispatch_claimable(&row, at(0)));
        // A live claim hides the row; once its deadline passes the row is free again.
        row.claim_token = Some(Uuid::nil());
        row.visible_at = at(30);
        assert!(row.has_live_claim(at(29)));
        assert!(!dispatch_claimable(&row, at(29)));
        assert!(dispatch_claimable(&row, at(30)));
        assert!(!row.has_live_claim(at(30)));
    }

    #[test]
    fn recovery_takes_old_enough_unordered_visible_rows_swp_2() {
        let delay = secs(30);
        let row = OutboxRow::new(1, at(100));
        assert!(!recovery_eligible(&row, at(129), delay), "younger than the delay");
        assert!(recovery_eligible(&row, at(130), delay), "exactly the delay");
        let scheduled = OutboxRow { visible_at: at(500), ..row.clone() };
        assert!(!recovery_eligible(&scheduled, at(499), delay));
        assert!(recovery_eligible(&scheduled, at(500), delay));
        assert!(recovery_eligible(&row, at(100), Duration::ZERO));
    }

    #[test]
    fn recovery_never_takes_a_lane_row_lan_4() {
        let row = OutboxRow { lane: Some("order-7".into()), ..OutboxRow::new(1, at(0)) };
        assert!(is_visible(&row, at(1_000)));
        assert!(!dispatch_claimable(&row, at(1_000)));
        assert!(!recovery_eligible(&row, at(1_000), Duration::ZERO));
    }

    #[test]
    fn poison_needs_max_attempts_dsp_5() {
        let three = NonZeroU32::new(3);
        assert!(!is_poison(2, three, ErrorClass::Transient));
        assert!(is_poison(3, three, ErrorClass::Transient));
        assert!(is_poison(1, three, ErrorClass::Permanent), "permanent counts at once");
        assert!(!is_poison(u32::MAX, None, ErrorClass::Transient));
        assert!(!is_poison(1, None, ErrorClass::Permanent), "without max_attempts rows stay pending");
    }

    #[test]
    fn retention_deletes_strictly_older_rows_ret_2() {
        let week = Retention::After(secs(7 * 86_400));
        let now = at(10 * 86_400);
        let cutoff = at(3 * 86_400);
        assert_eq!(retention_cutoff(now, week), Some(cutoff));
        assert!(dead_row_expired(at(3 * 86_400 - 1), now, week));
        assert!(!dead_row_expired(cutoff, now, week), "exactly the retention is kept");
        assert!(inbox_row_expired(at(0), now, week));
        assert!(!inbox_row_expired(cutoff, now, week));
    }

    #[test]
    fn infinite_retention_and_the_outbox_never_expire_ret_1_ret_3() {
        assert_eq!(retention_cutoff(Timestamp::MAX, Retention::Keep), None);
        assert!(!dead_row_expired(Timestamp::MIN, Timestamp::MAX, Retention::Keep));
        assert!(!inbox_row_expired(Timestamp::MIN, Timestamp::MAX, Retention::Keep));
        assert_eq!(RetentionTable::Outbox.cutoff(Timestamp::MAX, Retention::After(Duration::ZERO)), None);
        assert!(!RetentionTable::Outbox.expires_by_age());
        assert!(RetentionTable::Dead.expires_by_age() && RetentionTable::Inbox.expires_by_age());
        assert_eq!(retention_cutoff(Timestamp::MIN, Retention::After(secs(1))), Some(Timestamp::MIN));
    }

    #[test]
    fn dead_letter_policies_are_validated_dlp_2() {
        let error = DeadLetterPolicy::redrive(secs(3_600), secs(3_600)).unwrap_err();
        assert_eq!(error.to_string(), "give_up_after: 1h must be greater than after (1h)");
        assert_eq!(error.field(), "give_up_after");
        DeadLetterPolicy::redrive(Duration::ZERO, Duration::from_nanos(1)).unwrap();
        assert_eq!(DeadLetterPolicy::expire(Duration::ZERO).after(), Duration::ZERO);
    }

    #[test]
    fn dead_letter_decisions_follow_dlp_2_and_dlp_5() {
        use DeadLetterDecision::*;
        let redrive = DeadLetterPolicy::redrive(secs(60), secs(600)).unwrap();
        let expire = DeadLetterPolicy::expire(secs(60));
        let row = |created: i64, dead: i64| DeadLetterRow {
            original_topic: Some("orders".into()),
            dead_lettered_at: at(dead),
            created_at: at(created),
        };
        // (created_at, dead_lettered_at, now) → (redrive, expire)
        let table = [
            ((0, 100, 159), (Wait, Wait)),
            ((0, 100, 160), (Redrive, Expire)),
            ((0, 100, 599), (Redrive, Expire)),
            ((0, 100, 600), (GaveUp, Expire)),
            ((0, 590, 620), (Wait, Wait)),
            ((0, 590, 650), (GaveUp, Expire)),
            ((0, 100, 10_000), (GaveUp, Expire)),
        ];
        for ((created, dead, now), (on_redrive, on_expire)) in table {
            let row = row(created, dead);
            assert_eq!(redrive.decide(&row, at(now)), on_redrive, "redrive {created} {dead} {now}");
            assert_eq!(expire.decide(&row, at(now)), on_expire, "expire {created} {dead} {now}");
        }
        let foreign = DeadLetterRow { original_topic: None, ..row(0, 0) };
        assert_eq!(redrive.decide(&foreign, Timestamp::MAX), Untouched);
        assert_eq!(expire.decide(&foreign, Timestamp::MAX), Untouched);
    }
}
