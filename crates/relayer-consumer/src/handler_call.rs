//! What a pump tells its subscribers about each handler call as it ends: how it ended and
//! how long it ran. The facade's handler-duration histogram is made of these (OBS-2); the
//! pump's counters are in [`ConsumerStats`](crate::ConsumerStats).

use std::time::Duration;

/// One handler call, as it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerCall {
    /// How it ended.
    pub outcome: CallOutcome,
    /// Its wall time, from the call to its end (deadline and abandonment included).
    pub duration: Duration,
}

/// How a handler call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallOutcome {
    /// It returned [`Outcome::Ack`](crate::Outcome::Ack).
    Ack,
    /// It asked for a requeue.
    Requeue,
    /// It rejected the message.
    Reject,
    /// It panicked (requeued like a failure).
    Panicked,
    /// It overran its deadline and was abandoned (requeued like a failure).
    Overran,
    /// Shutdown's grace ran out while it ran; the message reappears after its visibility.
    Abandoned,
}

impl CallOutcome {
    /// The outcome's name in metrics and logs.
    pub const fn name(self) -> &'static str {
        match self {
            CallOutcome::Ack => "ack",
            CallOutcome::Requeue => "requeue",
            CallOutcome::Reject => "reject",
            CallOutcome::Panicked => "panicked",
            CallOutcome::Overran => "overran",
            CallOutcome::Abandoned => "abandoned",
        }
    }
}
