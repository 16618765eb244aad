//! The circuit breakers of one send path (DSP-6): a bounded [`CircuitBreakers`] behind a
//! lock, on this process's monotonic clock.

use std::num::NonZeroUsize;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use relayer_core::{CircuitBreaker, CircuitBreakers, Timestamp};

/// A (transport, destination) pair: what a circuit breaker guards.
pub type Destination = (String, String);

/// What one recorded send did to its destination's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerTurn {
    /// Nothing worth acting on.
    Unchanged,
    /// This failure opened it (closed or half-open before): hold the destination's rows
    /// back (DSP-6).
    Tripped,
    /// This success closed it (open or half-open before): release the rows its hold parked
    /// (DSP-6d).
    Closed,
}

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

    /// Records a send's result; returns whether it tripped or closed the breaker.
    pub fn record(&self, destination: &Destination, succeeded: bool) -> BreakerTurn {
        let now = self.now();
        self.with(|all| {
            if succeeded {
                if all.record_success(destination) { BreakerTurn::Closed } else { BreakerTurn::Unchanged }
            } else if all.record_failure(destination, now) {
                BreakerTurn::Tripped
            } else {
                BreakerTurn::Unchanged
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
