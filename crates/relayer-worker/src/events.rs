//! What a pass loop tells its subscribers: River's test signals, and the facts metrics are
//! made of.
//!
//! Several loops may share one channel (the dispatcher's unordered loops and its lane
//! loop do), so their events interleave: an event never relies on the one before it. A
//! finished pass carries the duration its own loop measured, never one a subscriber would
//! have to pair with a `PassStarted` it cannot tell apart from another loop's.

use std::time::Duration;

use crate::outcome::PassOutcome;

/// What a [`PassLoop`](crate::PassLoop) reports to its subscribers, in its own order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerEvent<R> {
    /// Pass `number` (1, 2, …) of this loop is starting.
    PassStarted {
        /// The pass's number in this loop.
        number: u64,
    },
    /// The pass ended without error or panic.
    PassSucceeded {
        /// Whether it led, and its report.
        outcome: PassOutcome<R>,
        /// Its wall time, measured by its loop (leadership check included).
        duration: Duration,
    },
    /// The pass failed; the loop waits `next_wait` before the next one (RES-2).
    PassFailed {
        /// Failed passes in a row, this one included.
        consecutive: u32,
        /// The wait before the next pass.
        next_wait: Duration,
        /// Its wall time, measured by its loop, until it failed.
        duration: Duration,
    },
    /// The loop has stopped and released its leadership; nothing follows from it.
    Stopped,
}
