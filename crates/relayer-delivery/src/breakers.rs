//! The circuit breakers of one send path (DSP-6): a bounded [`CircuitBreakers`] behind a
//! lock, on this process's monotonic clock.

use std::num::NonZeroUsize;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use relayer_core::{CircuitBreaker, CircuitBreakers, Timestamp};

/// A (transport, destination) pair: what a circuit breaker guards.
pub type Destination = (String, String);

/// One circuit breaker per destination, shared by every send of one [`SendPath`](crate::SendPath).
///
/// Instants come from this process's monotonic clock, as a [`Timestamp`] since the set was
/// made: a breaker compares only instants of its own, never a database timestamp, so no
/// clock skew can matter (NS-4). The set is bounded (see [`CircuitBreakers`]).
#[derive(Debug)]
pub struct Breakers {
    started: Instant,
    cool_down: Duration,
    by_destination: Mutex<CircuitBreakers<Destination>>,
}

impl Breakers {
    /// Breakers cloned from `template`, tracking at most `capacity` destinations.
    pub fn new(template: CircuitBreaker, capacity: NonZeroUsize) -> Self {
        Breakers {
            started: Instant::now(),
            cool_down: template.cool_down(),
            by_destination: Mutex::new(CircuitBreakers::new(template, capacity)),
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::EPOCH.saturating_add(self.started.elapsed())
    }

    fn with<T>(&self, f: impl FnOnce(&mut CircuitBreakers<Destination>) -> T) -> T {
        // A panic while holding this lock cannot leave a breaker half-updated in a way
        // that matters: keep going with the data as it is.
        f(&mut self.by_destination.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Destinations to leave out of claims now: open, or half-open with a probe in flight.
    pub fn tripped(&self) -> Vec<Destination> {
        let now = self.now();
        self.with(|all| all.tripped(now))
    }

    /// Whether `destination` is held back now (asking lets no probe through).
    pub fn is_tripped(&self, destination: &Destination) -> bool {
        let now = self.now();
        self.with(|all| all.is_tripped(destination, now))
    }

    /// Whether a send to `destination` may go now (an open breaker past its cool-down lets
    /// this one through as its probe).
    pub fn allows(&self, destination: &Destination) -> bool {
        let now = self.now();
        self.with(|all| all.allows(destination, now))
    }

    /// Records a send's result; returns whether this failure tripped the breaker.
    pub fn record(&self, destination: &Destination, succeeded: bool) -> bool {
        let now = self.now();
        self.with(|all| {
            if succeeded {
                all.record_success(destination);
                false
            } else {
                all.record_failure(destination, now)
            }
        })
    }

    /// Destinations tracked now (bounded by the capacity).
    pub fn len(&self) -> usize {
        self.with(|all| all.len())
    }

    /// Whether no destination is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long a tripped destination is skipped.
    pub fn cool_down(&self) -> Duration {
        self.cool_down
    }
}
