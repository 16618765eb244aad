//! Exponential backoff: between failed background passes (RES-2) and between retries of
//! one outbox row (DSP-3).
//!
//! Both schedules double a starting wait per consecutive failure and stop at a cap. A
//! [`PassBackoff`] waits `interval` after a success and
//! `min(interval · 2^(n-1), max(max_backoff, interval))` after the n-th consecutive failed
//! pass, so a pass never runs more often than its interval and a long outage is polled
//! every `max_backoff` at worst. A [`RetryBackoff`] delays a row's next attempt by
//! `min(base · 2^(attempts-1), max)`. The arithmetic saturates: any failure count, up to
//! `u32::MAX`, gives the cap rather than an overflow or a panic.

use std::time::Duration;

use crate::duration::duration_from_nanos;
use crate::options::error::{Field, OptionsError};
use crate::options::validate::{check_not_above, check_positive};
use crate::time::Timestamp;

/// The wait between passes of a background worker (RES-2).
///
/// ```
/// use std::time::Duration;
/// use relayer_core::PassBackoff;
/// let backoff = PassBackoff::new(Duration::from_secs(10), Duration::from_secs(60)).unwrap();
/// let waits: Vec<u64> = (0..=5).map(|n| backoff.wait_after(n).as_secs()).collect();
/// assert_eq!(waits, [10, 10, 20, 40, 60, 60]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassBackoff {
    interval: Duration,
    max_backoff: Duration,
}

impl PassBackoff {
    /// A pass schedule. `interval` must be positive. A `max_backoff` below `interval` is
    /// allowed (a worker with a 15-minute interval and the default 60 s backoff): failed
    /// passes then simply wait `interval`.
    pub fn new(interval: Duration, max_backoff: Duration) -> Result<Self, OptionsError> {
        check_positive(Field::bare("interval"), interval)?;
        Ok(PassBackoff { interval, max_backoff })
    }

    /// For options whose fields were validated already.
    pub(crate) const fn from_validated(interval: Duration, max_backoff: Duration) -> Self {
        PassBackoff { interval, max_backoff }
    }

    /// The wait after a successful pass.
    pub const fn interval(&self) -> Duration {
        self.interval
    }

    /// The configured cap for failed passes.
    pub const fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// The longest wait this schedule ever gives: `max(max_backoff, interval)`.
    pub fn ceiling(&self) -> Duration {
        self.max_backoff.max(self.interval)
    }

    /// The wait before the next pass after `consecutive_failures` failed passes in a row
    /// (0 after a success).
    pub fn wait_after(&self, consecutive_failures: u32) -> Duration {
        match consecutive_failures.checked_sub(1) {
            None => self.interval,
            Some(doublings) => doubled(self.interval, doublings, self.ceiling()),
        }
    }
}

/// The delay before retrying one outbox row after a failed send (DSP-3).
///
/// ```
/// use std::time::Duration;
/// use relayer_core::{RetryBackoff, Timestamp};
/// let backoff = RetryBackoff::new(Duration::from_secs(1), Duration::from_secs(300)).unwrap();
/// assert_eq!(backoff.delay_after(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay_after(4), Duration::from_secs(8));
/// assert_eq!(backoff.delay_after(100), Duration::from_secs(300));
/// let now = Timestamp::from_micros(0);
/// assert_eq!(backoff.next_attempt_at(now, 2), Timestamp::from_micros(2_000_000));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBackoff {
    base: Duration,
    max: Duration,
}

impl RetryBackoff {
    /// A retry schedule: `base` must be positive and `max` at least `base`.
    pub fn new(base: Duration, max: Duration) -> Result<Self, OptionsError> {
        let (base_field, max_field) = (Field::bare("base"), Field::bare("max"));
        check_positive(base_field, base)?;
        check_not_above(base_field, base, max_field, max)?;
        Ok(RetryBackoff { base, max })
    }

    /// For options whose fields were validated already.
    pub(crate) const fn from_validated(base: Duration, max: Duration) -> Self {
        RetryBackoff { base, max }
    }

    /// The delay after the first failed attempt.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The longest delay.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The delay after a row's `attempts`-th failed attempt (its attempt count after the
    /// failure). `0` is read as `1`: a row that has failed waits at least `base`.
    pub fn delay_after(&self, attempts: u32) -> Duration {
        doubled(self.base, attempts.saturating_sub(1), self.max)
    }

    /// When a row whose `attempts`-th attempt failed at `now` (database clock) becomes
    /// visible again.
    pub fn next_attempt_at(&self, now: Timestamp, attempts: u32) -> Timestamp {
        now.saturating_add(self.delay_after(attempts))
    }
}

/// How many times in a row a statement that lost a conflict with a concurrent transaction
/// (a deadlock, a serialization failure, a lock not available) is retried after a
/// [`conflict_pause`] before its caller falls back to the pass backoff an outage earns.
/// The pauses add up to at most a quarter of a second.
pub const CONFLICT_RETRIES: u32 = 5;

/// The longest pause before a conflict is retried.
pub const MAX_CONFLICT_PAUSE: Duration = Duration::from_millis(100);

/// The pause before the `attempt`-th retry (1-based) of a statement that lost a conflict:
/// jittered by `random` (any bits) between half and all of `min(10 ms · 2^(attempt-1),
/// 100 ms)`, so the two losers of a deadlock do not meet again in step. Never zero, never
/// above [`MAX_CONFLICT_PAUSE`].
///
/// ```
/// use std::time::Duration;
/// use relayer_core::backoff::conflict_pause;
/// assert!((Duration::from_millis(5)..=Duration::from_millis(10)).contains(&conflict_pause(1, 7)));
/// assert!(conflict_pause(u32::MAX, u64::MAX) <= Duration::from_millis(100));
/// ```
pub fn conflict_pause(attempt: u32, random: u64) -> Duration {
    let ceiling = doubled(Duration::from_millis(10), attempt.saturating_sub(1), MAX_CONFLICT_PAUSE);
    let half = u64::try_from(ceiling.as_micros() / 2).unwrap_or(u64::MAX);
    Duration::from_micros(half + random % (half + 1))
}

/// `min(start · 2^doublings, cap)`, computed without overflow for every input.
fn doubled(start: Duration, doublings: u32, cap: Duration) -> Duration {
    let grown = 2u128.checked_pow(doublings).and_then(|factor| start.as_nanos().checked_mul(factor));
    match grown {
        // Below the cap, so within Duration's range.
        Some(nanos) if nanos < cap.as_nanos() => duration_from_nanos(nanos).unwrap_or(cap),
        _ => cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn pass_backoff_follows_res_2() {
        let backoff = PassBackoff::new(secs(10), secs(60)).unwrap();
        let waits: Vec<Duration> = (0..=6).map(|n| backoff.wait_after(n)).collect();
        assert_eq!(waits, [10, 10, 20, 40, 60, 60, 60].map(secs));
        assert_eq!(backoff.wait_after(u32::MAX), secs(60));
    }

    #[test]
    fn pass_backoff_below_interval_waits_the_interval() {
        // RES-2: the cap is max(max_backoff, interval).
        let backoff = PassBackoff::new(secs(900), secs(60)).unwrap();
        for failures in [0, 1, 2, 30, u32::MAX] {
            assert_eq!(backoff.wait_after(failures), secs(900));
        }
    }

    #[test]
    fn pass_backoff_saturates_with_huge_durations() {
        let backoff = PassBackoff::new(Duration::MAX, Duration::MAX).unwrap();
        assert_eq!(backoff.wait_after(u32::MAX), Duration::MAX);
        let backoff = PassBackoff::new(Duration::from_nanos(1), Duration::MAX).unwrap();
        assert_eq!(backoff.wait_after(64), Duration::from_nanos(1 << 63));
        assert_eq!(backoff.wait_after(u32::MAX), Duration::MAX);
    }

    #[test]
    fn pass_backoff_refuses_a_zero_interval() {
        let error = PassBackoff::new(Duration::ZERO, secs(60)).unwrap_err();
        assert_eq!(error.to_string(), "interval: 0s must be positive");
    }

    #[test]
    fn retry_backoff_doubles_from_base_to_max() {
        let backoff = RetryBackoff::new(secs(1), secs(300)).unwrap();
        let delays: Vec<Duration> = (0..=10).map(|n| backoff.delay_after(n)).collect();
        assert_eq!(delays, [1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300].map(secs));
        assert_eq!(backoff.delay_after(u32::MAX), secs(300));
        assert_eq!(backoff.next_attempt_at(Timestamp::MAX, 3), Timestamp::MAX);
    }

    #[test]
    fn conflict_pauses_grow_and_stay_short() {
        let ms = Duration::from_millis;
        let ranges = [(1, ms(5), ms(10)), (2, ms(10), ms(20)), (3, ms(20), ms(40)), (4, ms(40), ms(80))];
        for (attempt, low, high) in ranges {
            assert_eq!(conflict_pause(attempt, 0), low, "attempt {attempt}");
            let half = u64::try_from(high.as_micros() / 2).unwrap();
            assert_eq!(conflict_pause(attempt, half), high, "attempt {attempt}");
        }
        assert_eq!(conflict_pause(0, 0), ms(5));
        assert_eq!(conflict_pause(CONFLICT_RETRIES, 0), ms(50));
    }

    proptest::proptest! {
        #[test]
        fn a_conflict_pause_is_positive_and_at_most_a_tenth_of_a_second(attempt: u32, random: u64) {
            let pause = conflict_pause(attempt, random);
            proptest::prop_assert!(pause >= Duration::from_millis(5));
            proptest::prop_assert!(pause <= MAX_CONFLICT_PAUSE);
        }
    }

    #[test]
    fn retry_backoff_is_validated() {
        let error = RetryBackoff::new(Duration::ZERO, secs(1)).unwrap_err();
        assert_eq!(error.to_string(), "base: 0s must be positive");
        let error = RetryBackoff::new(secs(10), secs(5)).unwrap_err();
        assert_eq!(error.to_string(), "base: 10s must not exceed max (5s)");
        RetryBackoff::new(secs(5), secs(5)).unwrap();
    }
}
