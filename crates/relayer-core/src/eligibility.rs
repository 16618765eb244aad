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
//! live in [`crate::dead_letter`] (re-exported here). A row reaching
//! `max_attempts`, or failing permanently, is poison (DSP-5); a destination that keeps
//! failing is skipped for a while by its [`CircuitBreaker`] (DSP-6).

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use uuid::Uuid;

use crate::duration::Retention;
use crate::options::{Field, OptionsError, check_nonzero, check_positive};
use crate::time::Timestamp;
use crate::transport::ErrorClass;

// Dead-letter decisions used to live here; `relayer_core::eligibility::DeadLetterPolicy` keeps working.
pub use crate::dead_letter::{DeadLetterAction, DeadLetterDecision, DeadLetterPolicy, DeadLetterRow};

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
// Circuit breaker
// ---------------------------------------------------------------------------------------

/// A per-destination circuit breaker (DSP-6): after `threshold` consecutive failed sends
/// the destination is skipped for `cool_down`, then one attempt is let through; its
/// success closes the breaker, its failure opens it again.
///
/// Keep one breaker per (transport, destination), cloned from the options' template. All
/// instants are database time.
///
/// ```
/// use std::time::Duration;
/// use relayer_core::{CircuitBreaker, Timestamp};
/// let mut breaker = CircuitBreaker::new(2, Duration::from_secs(30)).unwrap();
/// let t0 = Timestamp::EPOCH;
/// breaker.record_failure(t0);
/// assert!(breaker.allows(t0));
/// breaker.record_failure(t0);
/// assert!(!breaker.allows(t0.saturating_add(Duration::from_secs(29))));
/// assert!(breaker.allows(t0.saturating_add(Duration::from_secs(30))), "one probe");
/// assert!(!breaker.allows(t0.saturating_add(Duration::from_secs(30))), "only one");
/// breaker.record_success();
/// assert!(breaker.allows(t0.saturating_add(Duration::from_secs(31))));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitBreaker {
    threshold: NonZeroU32,
    cool_down: Duration,
    state: BreakerState,
}

/// Where a [`CircuitBreaker`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Sends flow; `consecutive_failures` is below the threshold.
    Closed {
        /// Failed sends since the last success.
        consecutive_failures: u32,
    },
    /// Sends are skipped until `opened_at + cool_down`.
    Open {
        /// When the breaker tripped.
        opened_at: Timestamp,
    },
    /// One probe is in flight since `probe_at`; others are skipped until it reports, or
    /// until another cool-down passes without a report (a lost probe).
    HalfOpen {
        /// When the probe was let through.
        probe_at: Timestamp,
    },
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BreakerState::Closed { .. } => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen { .. } => "half-open",
        })
    }
}

impl CircuitBreaker {
    /// A closed breaker. `threshold` must be at least 1 and `cool_down` positive.
    pub fn new(threshold: u32, cool_down: Duration) -> Result<Self, OptionsError> {
        let threshold = check_nonzero(Field::bare("threshold"), threshold)?;
        check_positive(Field::bare("cool_down"), cool_down)?;
        Ok(Self::from_validated(threshold, cool_down))
    }

    /// For options whose fields were validated already.
    pub(crate) const fn from_validated(threshold: NonZeroU32, cool_down: Duration) -> Self {
        CircuitBreaker { threshold, cool_down, state: BreakerState::Closed { consecutive_failures: 0 } }
    }

    /// Consecutive failures that open the breaker.
    pub const fn threshold(&self) -> u32 {
        self.threshold.get()
    }

    /// How long an open breaker skips its destination.
    pub const fn cool_down(&self) -> Duration {
        self.cool_down
    }

    /// The current state, e.g. for metrics.
    pub const fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a send to the destination may be attempted at `now`. An open breaker whose
    /// cool-down has passed lets exactly one attempt through and turns half-open; call
    /// this once per send you are about to make.
    pub fn allows(&mut self, now: Timestamp) -> bool {
        match self.state {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { opened_at: since } | BreakerState::HalfOpen { probe_at: since } => {
                let due = now >= since.saturating_add(self.cool_down);
                if due {
                    self.state = BreakerState::HalfOpen { probe_at: now };
                }
                due
            }
        }
    }

    /// A send succeeded: the destination works, so the breaker closes.
    pub fn record_success(&mut self) {
        self.state = BreakerState::Closed { consecutive_failures: 0 };
    }

    /// A send failed at `now`: counts toward the threshold while closed, re-opens a
    /// half-open breaker. A failure reported while open (a send that was already in flight)
    /// leaves the cool-down as it is.
    pub fn record_failure(&mut self, now: Timestamp) {
        match self.state {
            BreakerState::Closed { consecutive_failures } => {
                let failures = consecutive_failures.saturating_add(1);
                self.state = if failures >= self.threshold.get() {
                    BreakerState::Open { opened_at: now }
                } else {
                    BreakerState::Closed { consecutive_failures: failures }
                };
            }
            BreakerState::HalfOpen { .. } => self.state = BreakerState::Open { opened_at: now },
            BreakerState::Open { .. } => {}
        }
    }
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
    fn breaker_opens_after_threshold_and_probes_once_dsp_6() {
        let mut breaker = CircuitBreaker::new(3, secs(30)).unwrap();
        for _ in 0..2 {
            breaker.record_failure(at(0));
            assert!(breaker.allows(at(0)));
        }
        breaker.record_success();
        assert_eq!(breaker.state(), BreakerState::Closed { consecutive_failures: 0 });
        for _ in 0..3 {
            breaker.record_failure(at(10));
        }
        assert_eq!(breaker.state(), BreakerState::Open { opened_at: at(10) });
        assert!(!breaker.allows(at(39)));
        breaker.record_failure(at(39)); // a send that was in flight: no new cool-down
        assert!(breaker.allows(at(40)));
        assert_eq!(breaker.state(), BreakerState::HalfOpen { probe_at: at(40) });
        assert!(!breaker.allows(at(41)));
        breaker.record_failure(at(42));
        assert_eq!(breaker.state(), BreakerState::Open { opened_at: at(42) });
        assert!(!breaker.allows(at(71)));
        assert!(breaker.allows(at(72)));
        breaker.record_success();
        assert!(breaker.allows(at(72)));
        assert_eq!(breaker.state().to_string(), "closed");
    }

    #[test]
    fn a_lost_probe_is_replaced_after_another_cool_down() {
        let mut breaker = CircuitBreaker::new(1, secs(30)).unwrap();
        breaker.record_failure(at(0));
        assert!(breaker.allows(at(30)));
        assert!(!breaker.allows(at(59)));
        assert!(breaker.allows(at(60)));
    }

    #[test]
    fn breaker_is_validated() {
        assert_eq!(
            CircuitBreaker::new(0, secs(1)).unwrap_err().to_string(),
            "threshold: 0 must be at least 1"
        );
        assert_eq!(
            CircuitBreaker::new(1, Duration::ZERO).unwrap_err().to_string(),
            "cool_down: 0s must be positive"
        );
    }
}
