//! What the dispatcher may do to its store, as one bound: [`DispatchSession`].

use relayer_core::store::{ClaimOutbox, CompleteOutbox, HoldBackDestination, VerifySchema, WorkLanes};

/// The capabilities a dispatch pass uses, named once: check the schema ([`VerifySchema`]),
/// claim and complete unordered rows ([`ClaimOutbox`], [`CompleteOutbox`]), hold back a
/// tripped destination ([`HoldBackDestination`]) and work ordered lanes ([`WorkLanes`]).
///
/// A pass may have up to three of these calls in flight at once on one `&Session` (a
/// claim, a send's completion and a hold-back, DSP-1b): each must be one statement that
/// commits on its own, never a transaction spread over several calls.
///
/// Implemented for every session that has them all; relayer's is
/// `relayer_postgres::PgSession`. A wrapper session (faults, metrics, logging) forwards
/// these five and is a dispatch session too.
pub trait DispatchSession:
    VerifySchema + ClaimOutbox + CompleteOutbox + HoldBackDestination + WorkLanes
{
}

impl<T> DispatchSession for T where
    T: VerifySchema + ClaimOutbox + CompleteOutbox + HoldBackDestination + WorkLanes
{
}
