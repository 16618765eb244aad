//! Which outbox rows a worker may claim: pure decisions that the storage crate's SQL
//! mirrors, checked against each other by property tests.
//!
//! Every decision takes the database's `now` (NS-4) and a plain row value, and returns a
//! boolean; the workers do the reads and the writes. An outbox row has a single
//! `visible_at`, the later of its delivery time, its next retry time and its live claim's
//! deadline, so "free to claim" is just `visible_at <= now` — an expired claim frees the
//! row whatever its claim token says. Recovery adds the unordered and old-enough tests
//! (SWP-2, LAN-4).
//!
//! The other decisions have files of their own and are re-exported here, where they used
//! to live: poison in [`crate::poison`] (DSP-5), retention cut-offs in [`crate::retention`]
//! (RET-1..3), dead-letter policies in [`crate::dead_letter`]. A destination that keeps
//! failing is skipped for a while by its [`CircuitBreaker`](crate::CircuitBreaker) (DSP-6).

use std::time::Duration;

use uuid::Uuid;

use crate::time::Timestamp;

pub use crate::dead_letter::{DeadLetterAction, DeadLetterDecision, DeadLetterPolicy, DeadLetterRow};
pub use crate::poison::is_poison;
pub use crate::retention::{RetentionTable, dead_row_expired, inbox_row_expired, retention_cutoff};

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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_clock::{at, secs};

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
}
