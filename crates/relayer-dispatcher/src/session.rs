//! What the dispatcher may do to its store, as one bound: [`DispatchSession`].

use relayer_core::store::{ClaimOutbox, CompleteOutbox, HoldBackDestination, VerifySchema, WorkLanes};

/// The capabilities a dispatch pass uses, named once: check the schema ([`VerifySchema`]),
/// claim and complete unordered rows ([`ClaimOutbox`], [`CompleteOutbox`]), hold back a
/// tripped destination ([`HoldBackDestination`]) and work ordered lanes ([`WorkLanes`]).
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
