//! Circuit breakers (DSP-6): one per destination, and the bounded set of them a sender
//! keeps.
//!
//! A [`CircuitBreaker`] is the state machine of one destination: closed while sends work,
//! open for a cool-down after `threshold` consecutive failures, then half-open with a
//! single probe. [`CircuitBreakers`] keeps one per destination that failed, and stays
//! bounded however many destinations ever fail: a destination that succeeds is forgotten
//! (a fresh breaker is closed), and once the map is full the entries that carry the least
//! — closed ones, then open ones whose cool-down has passed, then the least recently
//! touched — are evicted first. Forgetting a breaker only ever lets a send through that a
//! breaker would have held back a while longer; it never holds one back. All instants are
//! the caller's (`now` is an argument), so the whole module is pure.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use crate::options::error::{Field, OptionsError};
use crate::options::validate::{check_nonzero, check_positive};
use crate::time::Timestamp;

/// How many destinations a [`CircuitBreakers`] tracks by default.
pub const DEFAULT_TRACKED_DESTINATIONS: NonZeroUsize = NonZeroUsize::new(10_000).expect("not zero");

/// A per-destination circuit breaker (DSP-6): after `threshold` consecutive failed sends
/// the destination is skipped for `cool_down`, then one attempt is let through; its
/// success closes the breaker, its failure opens it again.
///
/// Keep one breaker per (transport, destination), cloned from the options' template, e.g.
/// in a [`CircuitBreakers`]. All instants come from one clock of the caller's choosing.
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

/// One [`CircuitBreaker`] per destination, bounded to `capacity` entries (DSP-6).
///
/// Only destinations that failed have an entry: a success removes it, since a closed
/// breaker with no failures is what an absent entry means. When a failure would add an
/// entry to a full map, the map first drops every closed entry and every open entry whose
/// cool-down has passed (both would let the next send through anyway); if that frees
/// nothing, it drops the least recently touched quarter. So a flood of distinct failing
/// destinations costs at most `capacity` entries, and [`tripped`](Self::tripped) never
/// scans more.
///
/// ```
/// use std::num::NonZeroUsize;
/// use std::time::Duration;
/// use relayer_core::{CircuitBreaker, CircuitBreakers, Timestamp};
///
/// let template = CircuitBreaker::new(1, Duration::from_secs(30)).unwrap();
/// let mut breakers = CircuitBreakers::new(template, NonZeroUsize::new(2).unwrap());
/// let now = Timestamp::EPOCH;
/// assert!(breakers.record_failure(&"a", now), "a tripped");
/// assert_eq!(breakers.tripped(now), vec!["a"]);
/// assert!(!breakers.allows(&"a", now));
/// for destination in ["b", "c", "d"] {
///     breakers.record_failure(&destination, now);
/// }
/// assert!(breakers.len() <= 2, "bounded");
/// breakers.record_success(&"d");
/// assert!(breakers.allows(&"d", now));
/// ```
#[derive(Clone, Debug)]
pub struct CircuitBreakers<K> {
    template: CircuitBreaker,
    capacity: NonZeroUsize,
    entries: HashMap<K, Tracked>,
}

#[derive(Clone, Copy, Debug)]
struct Tracked {
    breaker: CircuitBreaker,
    /// The last failure or probe: what eviction falls back on.
    touched: Timestamp,
}

impl<K: Clone + Eq + Hash> CircuitBreakers<K> {
    /// An empty set of breakers cloned from `template`, tracking at most `capacity`
    /// destinations.
    pub fn new(template: CircuitBreaker, capacity: NonZeroUsize) -> Self {
        CircuitBreakers { template, capacity, entries: HashMap::new() }
    }

    /// The breaker every destination starts from.
    pub const fn template(&self) -> CircuitBreaker {
        self.template
    }

    /// Destinations tracked now (at most the capacity).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no destination is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a send to `destination` may go at `now`; an open breaker past its
    /// cool-down lets this one call through as its probe. Call it once per send.
    pub fn allows(&mut self, destination: &K, now: Timestamp) -> bool {
        match self.entries.get_mut(destination) {
            Some(tracked) => {
                let allowed = tracked.breaker.allows(now);
                if allowed {
                    tracked.touched = now;
                }
                allowed
            }
            None => true,
        }
    }

    /// Whether `destination` is held back at `now`: open, or half-open with its probe in
    /// flight. Asking does not let a probe through.
    pub fn is_tripped(&self, destination: &K, now: Timestamp) -> bool {
        self.entries.get(destination).is_some_and(|tracked| held_back(tracked.breaker, now))
    }

    /// Every destination held back at `now`, for claims to leave out.
    pub fn tripped(&self, now: Timestamp) -> Vec<K> {
        self.entries
            .iter()
            .filter(|(_, tracked)| held_back(tracked.breaker, now))
            .map(|(destination, _)| destination.clone())
            .collect()
    }

    /// A send to `destination` succeeded: its breaker closes, i.e. is forgotten. Returns
    /// whether it was open or half-open (tripped): the moment to release the rows its hold
    /// parked (DSP-6d).
    pub fn record_success(&mut self, destination: &K) -> bool {
        self.entries
            .remove(destination)
            .is_some_and(|tracked| !matches!(tracked.breaker.state(), BreakerState::Closed { .. }))
    }

    /// A send to `destination` failed at `now`. Returns whether this failure opened its
    /// breaker (closed or half-open before, open now): the moment to hold its rows back.
    pub fn record_failure(&mut self, destination: &K, now: Timestamp) -> bool {
        if !self.entries.contains_key(destination) && self.entries.len() >= self.capacity.get() {
            self.evict(now);
        }
        let tracked = self
            .entries
            .entry(destination.clone())
            .or_insert(Tracked { breaker: self.template, touched: now });
        let was_open = matches!(tracked.breaker.state(), BreakerState::Open { .. });
        tracked.breaker.record_failure(now);
        tracked.touched = now;
        !was_open && matches!(tracked.breaker.state(), BreakerState::Open { .. })
    }

    /// Makes room in a full map: first what carries nothing (closed entries, cool-downs
    /// that passed), then the least recently touched quarter.
    fn evict(&mut self, now: Timestamp) {
        self.entries.retain(|_, tracked| held_back(tracked.breaker, now));
        if self.entries.len() < self.capacity.get() {
            return;
        }
        let mut touched: Vec<Timestamp> = self.entries.values().map(|tracked| tracked.touched).collect();
        let keep = self.capacity.get() - self.capacity.get().div_ceil(4);
        let cut_index = touched.len() - keep - 1;
        let (_, cut, _) = touched.select_nth_unstable(cut_index);
        let cut = *cut;
        let mut over = self.entries.len() - keep;
        self.entries.retain(|_, tracked| {
            if over > 0 && tracked.touched <= cut {
                over -= 1;
                false
            } else {
                true
            }
        });
    }
}

/// Open, or half-open with its probe in flight, at `now` (asked on a copy, so asking
/// never turns a breaker half-open).
fn held_back(mut breaker: CircuitBreaker, now: Timestamp) -> bool {
    !matches!(breaker.state(), BreakerState::Closed { .. }) && !breaker.allows(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_clock::{at, secs};

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

    fn breakers(threshold: u32, capacity: usize) -> CircuitBreakers<u32> {
        let template = CircuitBreaker::new(threshold, secs(30)).unwrap();
        CircuitBreakers::new(template, NonZeroUsize::new(capacity).unwrap())
    }

    #[test]
    fn a_success_forgets_the_destination_dsp_6() {
        let mut map = breakers(3, 10);
        map.record_failure(&1, at(0));
        assert_eq!(map.len(), 1);
        map.record_success(&1);
        assert!(map.is_empty());
    }

    #[test]
    fn record_failure_reports_the_moment_a_breaker_opens_dsp_6() {
        let mut map = breakers(2, 10);
        assert!(!map.record_failure(&1, at(0)));
        assert!(map.record_failure(&1, at(0)), "the threshold opens it");
        assert!(!map.record_failure(&1, at(1)), "already open");
        assert!(map.allows(&1, at(30)), "the probe");
        assert!(map.record_failure(&1, at(31)), "a failed probe opens it again");
    }

    /// DSP-6d: a success says it closed a breaker only when that breaker was tripped (open
    /// or half-open): the moment to release the rows its hold parked.
    #[test]
    fn record_success_reports_closing_a_tripped_breaker_only_dsp_6() {
        let mut map = breakers(2, 10);
        assert!(!map.record_success(&1), "never failed");
        map.record_failure(&1, at(0));
        assert!(!map.record_success(&1), "failing, not tripped");
        map.record_failure(&1, at(0));
        map.record_failure(&1, at(0));
        assert!(map.record_success(&1), "open: a send in flight when it tripped");
        map.record_failure(&1, at(40));
        map.record_failure(&1, at(40));
        assert!(map.allows(&1, at(70)), "the probe, a cool-down (30 s) later");
        assert!(map.record_success(&1), "half-open: the probe succeeded");
        assert!(map.is_empty());
    }

    #[test]
    fn tripped_lists_open_breakers_and_probes_in_flight_without_probing_dsp_6() {
        let mut map = breakers(1, 10);
        map.record_failure(&1, at(0));
        map.record_failure(&2, at(0));
        let mut tripped = map.tripped(at(1));
        tripped.sort_unstable();
        assert_eq!(tripped, vec![1, 2]);
        assert!(map.tripped(at(30)).is_empty(), "cool-down passed: a probe may go");
        assert!(map.allows(&1, at(30)), "asking did not spend the probe");
        assert_eq!(map.tripped(at(31)), vec![1], "probe in flight");
        assert!(map.is_tripped(&1, at(31)) && !map.is_tripped(&3, at(31)));
    }
}
