//! Where the consumer's next receive starts (QUE-1), as a pure state machine.
//!
//! A receive takes the visible rows of a queue oldest first: `visible_at <= now()` in
//! `(visible_at, seq)` order, on the queue's receive index. Every row it takes gets a new
//! `visible_at` in the future, and every ack deletes one; the versions they replace stay
//! in the index, at their old `visible_at`, until vacuum removes them — and while a
//! session holds an old snapshot (a *held horizon*) nothing can, not even the index scan
//! that would otherwise mark them dead. A receive that starts from the oldest `visible_at`
//! walks all of them, on every call: tens of thousands a minute at a steady load.
//!
//! So a pump remembers how far its last receive got, and the next one starts there
//! (`visible_at >= from`), skipping the dead versions behind it:
//!
//! - a receive that got fewer rows than it asked for took every visible row up to the
//!   statement's clock (or found it locked by a reader that takes it), so the next one
//!   may start from that clock;
//! - one that got all it asked for took every visible row up to the last `visible_at` it
//!   took, so the next one starts there;
//! - either way the start is moved back by [`ReceiveCursor::LAG`]: a row whose
//!   `visible_at` lies behind the clock when it commits — written by a transaction that
//!   began earlier (`visible_at` defaults to the transaction's start), requeued or
//!   dead-lettered by a statement that waited on a lock — is still found if it commits
//!   within that lag.
//!
//! Everything that becomes visible later lies ahead of the position: a requeued message
//! (`visible_at` = its requeue plus the delay), a message whose reader's visibility lapsed
//! (its receive or last heartbeat plus the visibility timeout), a scheduled one, a
//! released one. What is left — a row committed later than the lag after its `visible_at`,
//! like a transaction that enqueued and then ran for a minute — is found by a **full
//! scan** (from the oldest `visible_at`), which a pump makes at least once per
//! `full_scan_every` (its poll interval) and whenever it has no position. A full scan that
//! fills its batch is followed by scans from where it got to, so a long run of old rows is
//! read a batch at a time, not a batch per period.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use relayer_core::receive_cursor::{ReceiveCursor, ScanReach};
//!
//! let start = Instant::now();
//! let mut cursor = ReceiveCursor::new(Duration::from_secs(1));
//! assert_eq!(cursor.plan(start), None); // no position yet: a full scan
//! // Asked for 10, got 3, at 12:00:00.000000 on the database clock (µs since the epoch).
//! cursor.record(None, ScanReach { asked: 10, received: 3, clock_us: 5_000_000, last_visible_at_us: Some(4_900_000) }, start);
//! assert_eq!(cursor.plan(start), Some(5_000_000 - ReceiveCursor::LAG_US));
//! // A second later the safety net is due again.
//! assert_eq!(cursor.plan(start + Duration::from_secs(1)), None);
//! ```

use std::time::{Duration, Instant};

/// What one receive reached, as its statement reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanReach {
    /// How many rows it asked for.
    pub asked: u32,
    /// How many it took.
    pub received: usize,
    /// The statement's clock, µs since the Unix epoch (database clock).
    pub clock_us: i64,
    /// The highest `visible_at` (before the receive moved it) among the rows it took, µs
    /// since the Unix epoch; `None` when it took none.
    pub last_visible_at_us: Option<i64>,
}

/// A pump's receive position. See the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveCursor {
    /// The next receive's lower bound on `visible_at`, µs; `None`: a full scan.
    from: Option<i64>,
    /// When the next full scan is due; `None`: now.
    full_scan_due: Option<Instant>,
    full_scan_every: Duration,
}

impl ReceiveCursor {
    /// How far behind the reached point the next receive starts: a row committed this
    /// long after its `visible_at` is still found without a full scan.
    pub const LAG: Duration = Duration::from_secs(1);
    /// [`LAG`](Self::LAG) in microseconds.
    pub const LAG_US: i64 = 1_000_000;

    /// A cursor with no position (its first receive is a full scan), making a full scan
    /// at least once per `full_scan_every`.
    pub const fn new(full_scan_every: Duration) -> Self {
        ReceiveCursor { from: None, full_scan_due: None, full_scan_every }
    }

    /// The next receive's lower bound on `visible_at` (µs since the epoch, database
    /// clock), or `None` for a full scan: there is no position yet, or one is due at `now`.
    pub fn plan(&self, now: Instant) -> Option<i64> {
        match self.full_scan_due {
            Some(due) if now < due => self.from,
            _ => None,
        }
    }

    /// Records what the receive planned with `from` (what [`plan`](Self::plan) returned)
    /// reached, at `now`.
    pub fn record(&mut self, from: Option<i64>, reach: ScanReach, now: Instant) {
        if from.is_none() {
            self.full_scan_due = now.checked_add(self.full_scan_every);
        }
        let reached = match reach.last_visible_at_us {
            // A full batch: rows past the last one taken may still be waiting.
            Some(last) if reach.received >= reach.asked as usize => last,
            _ => reach.clock_us,
        };
        let next = reached.saturating_sub(Self::LAG_US);
        // A scan from a position never reaches below it; keep the higher bound.
        self.from = Some(match (from, self.from) {
            (Some(_), Some(current)) => current.max(next),
            _ => next,
        });
    }

    /// Forgets the position: the next receive is a full scan (after a failed receive, whose
    /// reach is unknown, nothing needs it; a pump may call it to start over).
    pub fn reset(&mut self) {
        self.from = None;
        self.full_scan_due = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A modelled queue row: visible from `visible_at`, committed (seen by receives) from
    /// `committed`, taken once.
    #[derive(Clone, Debug)]
    struct Row {
        visible_at: i64,
        committed: i64,
        taken: bool,
    }

    /// One receive at `clock` as the SQL does it: the committed, untaken rows with
    /// `from <= visible_at <= clock`, oldest first, at most `asked`.
    fn receive(rows: &mut [Row], from: Option<i64>, clock: i64, asked: u32) -> ScanReach {
        let mut order: Vec<usize> = (0..rows.len())
            .filter(|&i| {
                let row = &rows[i];
                !row.taken
                    && row.committed <= clock
                    && row.visible_at <= clock
                    && from.is_none_or(|f| row.visible_at >= f)
            })
            .collect();
        order.sort_by_key(|&i| (rows[i].visible_at, i));
        order.truncate(asked as usize);
        let last = order.iter().map(|&i| rows[i].visible_at).max();
        for &i in &order {
            rows[i].taken = true;
        }
        ScanReach { asked, received: order.len(), clock_us: clock, last_visible_at_us: last }
    }

    /// Rows as (visible_at, commit delay) in ms, over a 10 s run; the delay up to 3 lags.
    fn rows() -> impl Strategy<Value = Vec<Row>> {
        proptest::collection::vec((0i64..10_000, 0i64..3_000), 0..60).prop_map(|rows| {
            rows.into_iter()
                .map(|(visible_ms, delay_ms)| Row {
                    visible_at: visible_ms * 1_000,
                    committed: (visible_ms + delay_ms) * 1_000,
                    taken: false,
                })
                .collect()
        })
    }

    /// Runs receives every `step_ms` from 0 to `end_ms` on the database clock, the local
    /// clock moving with it; returns the rows.
    fn run(mut rows: Vec<Row>, every: Duration, step_ms: i64, end_ms: i64, asked: &[u32]) -> Vec<Row> {
        let start = Instant::now();
        let mut cursor = ReceiveCursor::new(every);
        let mut t = 0;
        let mut n = 0;
        while t <= end_ms {
            let now = start + Duration::from_millis(t.cast_unsigned());
            let from = cursor.plan(now);
            let reach = receive(&mut rows, from, t * 1_000, asked[n % asked.len()]);
            cursor.record(from, reach, now);
            t += step_ms;
            n += 1;
        }
        rows
    }

    proptest! {
        /// QUE-1: with the full scan never due again after the first, the cursor alone takes
        /// every row committed within the lag of its `visible_at`, whatever the batch
        /// sizes: it never moves past a row that was due and not taken.
        #[test]
        fn the_cursor_alone_takes_every_row_committed_within_the_lag_que_1(
            rows in rows(),
            step_ms in 1i64..400,
            asked in proptest::collection::vec(1u32..6, 1..5),
        ) {
            let never = Duration::from_secs(1_000_000);
            let taken = run(rows, never, step_ms, 40_000, &asked);
            for row in taken {
                if row.committed - row.visible_at <= ReceiveCursor::LAG_US {
                    prop_assert!(row.taken, "{row:?} was skipped by the cursor");
                }
            }
        }

        /// QUE-1: with the full scan as the safety net, every row is taken, however late
        /// it commits after its `visible_at`.
        #[test]
        fn with_the_full_scan_every_row_is_taken_however_late_it_commits_que_1(
            rows in rows(),
            step_ms in 1i64..400,
            every_ms in 1u64..3_000,
            asked in proptest::collection::vec(1u32..6, 1..5),
        ) {
            let taken = run(rows, Duration::from_millis(every_ms), step_ms, 40_000, &asked);
            for row in taken {
                prop_assert!(row.taken, "{row:?} was never taken");
            }
        }

        /// The position never moves backwards between full scans, and a full scan is
        /// planned at least once per period.
        #[test]
        fn the_position_only_advances_and_the_full_scan_comes_each_period(
            reaches in proptest::collection::vec((1u32..10, 0usize..12, 0i64..1_000_000, 0i64..1_000_000), 1..40),
            every_ms in 1u64..500,
        ) {
            let start = Instant::now();
            let every = Duration::from_millis(every_ms);
            let mut cursor = ReceiveCursor::new(every);
            let mut last_full = None;
            let mut clock = 0i64;
            for (n, (asked, received, advance, back)) in reaches.into_iter().enumerate() {
                let now = start + Duration::from_millis(n as u64 * 10);
                let from = cursor.plan(now);
                match from {
                    None => last_full = Some(now),
                    Some(_) => prop_assert!(now < last_full.unwrap() + every),
                }
                clock += advance;
                let received = received.min(asked as usize);
                let last = (received > 0).then(|| clock - back.min(clock));
                let before = cursor.from;
                cursor.record(from, ScanReach { asked, received, clock_us: clock, last_visible_at_us: last }, now);
                if from.is_some() {
                    prop_assert!(cursor.from >= before);
                }
            }
        }
    }

    #[test]
    fn a_full_batch_moves_the_position_to_its_last_row_not_the_clock() {
        let now = Instant::now();
        let mut cursor = ReceiveCursor::new(Duration::from_secs(1));
        let reach =
            ScanReach { asked: 2, received: 2, clock_us: 9_000_000, last_visible_at_us: Some(3_000_000) };
        cursor.record(None, reach, now);
        assert_eq!(cursor.plan(now), Some(3_000_000 - ReceiveCursor::LAG_US));
        cursor.reset();
        assert_eq!(cursor.plan(now), None);
    }
}
