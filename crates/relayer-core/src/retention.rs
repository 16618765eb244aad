//! Retention cut-offs (RET-1..3): which dead and inbox rows cleanup deletes. Rows strictly
//! older than their table's retention expire; pending outbox rows never do. Pure decisions
//! on the database's `now` (NS-4), mirrored by the cleanup statements and checked against
//! them by property tests.

use crate::duration::Retention;
use crate::time::Timestamp;

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    use crate::test_clock::{at, secs};

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
}
