//! The clock of the core's unit tests: instants in whole seconds from the epoch, and
//! durations in seconds.

use std::time::Duration;

use crate::time::Timestamp;

/// The instant `seconds` after the epoch (database clock).
pub(crate) fn at(seconds: i64) -> Timestamp {
    Timestamp::from_micros(seconds * 1_000_000)
}

/// `seconds` seconds.
pub(crate) const fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}
