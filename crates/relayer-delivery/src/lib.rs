//! relayer's send path: what every worker that claims outbox rows does between its claim
//! and its completion, with no database and no scheduling of its own.
//!
//! # The model
//!
//! A worker claims rows (the dispatcher by a claim token, the recovery sweeper by row locks
//! in its pass transaction) and hands them to a [`SendPath`]. The send path:
//!
//! 1. groups the rows by (transport, destination), keeping `seq` order in each group
//!    (DSP-2), and sends the groups side by side, each split by its transport's batch limit;
//! 2. bounds every batch by a deadline (TRN-5): the options' `send_timeout`, cut short by
//!    the deadline of the whole send step. A batch still running then is abandoned and
//!    fails each of its messages transiently; a batch not started by then is released
//!    unsent, without counting an attempt. A hung transport therefore never holds a claim,
//!    a lease or a pass transaction past its time;
//! 3. catches a transport's panic and a wrong number of outcomes as a failure of the whole
//!    batch (TRN-2);
//! 4. decides each failed message's fate with [`retry_or_bury`](relayer_core::retry_or_bury):
//!    retried after the backoff, or buried once poison (DSP-3, DSP-5);
//! 5. keeps one circuit breaker per destination ([`Breakers`], bounded, DSP-6): a tripped
//!    destination's rows are released unsent for the cool-down, and the destinations that
//!    tripped during the call are reported, so the caller can hold back their other due
//!    rows in one statement instead of meeting them in every claim;
//! 6. releases a row naming a transport this process lacks unsent, without an attempt
//!    (TRN-6): it waits for an instance that has the transport. relayer's store never
//!    hands such a row over (its claims bind the registry); this holds for any store.
//!
//! The caller writes the resulting [`Completion`](relayer_core::Completion) in one
//! statement under its claim. The path is generic over transports and stores: the sweeper
//! uses it without LISTEN, lanes or the dispatcher's loops.
#![deny(missing_docs)]

mod batch;
mod breakers;
mod send_path;

pub use batch::capabilities;
pub use breakers::{BreakerTurn, Breakers, Destination};
pub use send_path::{HeadOutcome, SendPath, SendTally};
