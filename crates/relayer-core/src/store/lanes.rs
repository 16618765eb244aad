//! Working ordered lanes (LAN-1..5): [`WorkLanes`] for the dispatcher's lane passes,
//! [`AdministerLanes`] for an operator's release and skip.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{ClaimedMessage, Store, UndecodableRow};

/// Owning lanes and moving their heads (LAN-1..5): the dispatcher's lane loop.
///
/// A lane is every outbox row sharing a lane key; its head is the row with the lowest
/// `seq`, and only the head is ever sent. A lane has one owner at a time: a claim stamps a
/// token and a deadline, reading the head renews it, and every change to the head is fenced
/// by the token, so an owner whose claim expired and was taken over changes nothing. Each
/// method is one statement committed on its own.
#[async_trait]
pub trait WorkLanes: Store {
    /// Whether the outbox holds any lane row: a namespace that never had one has no lane
    /// to claim, and its dispatcher need not ask for lanes on every pass.
    async fn any_lane_row(&self) -> Result<bool, Self::Error>;

    /// Claims lanes under `token` as `request` says: lanes whose head is due, neither
    /// parked nor held by a live claim, and going to no tripped destination (DSP-6).
    async fn claim_lanes(
        &self,
        token: Uuid,
        request: &LaneClaimRequest<'_>,
    ) -> Result<LaneClaim, Self::Error>;

    /// Renews the claim on `lane` for `claim` and reads its head.
    async fn lane_head(&self, lane: &str, token: Uuid, claim: Duration) -> Result<LaneHead, Self::Error>;

    /// Deletes the accepted head `seq` of `lane`, fenced by the claim, durably even where
    /// the session's other commits are not: a lost head delete would replay the head
    /// after later heads were sent (LAN-1). `false`: the lane is no longer ours.
    async fn accept_head(&self, lane: &str, token: Uuid, seq: i64) -> Result<bool, Self::Error>;

    /// Records a failed send of head `seq` of `lane`, fenced by the claim: one more
    /// attempt and the error; then the head is retried later, or the lane is parked behind
    /// it (LAN-2). `false`: the lane is no longer ours.
    async fn fail_head(
        &self,
        lane: &str,
        token: Uuid,
        seq: i64,
        failure: HeadFailure<'_>,
    ) -> Result<bool, Self::Error>;

    /// Gives up the claim on `lane` (forgetting the lane when it is empty and not parked).
    async fn release_lane_claim(&self, lane: &str, token: Uuid) -> Result<(), Self::Error>;
}

/// An operator's actions on a parked lane (LAN-2, LAN-5). Each is one statement, audited
/// with its actor and committed durably before it returns, so an operator can trust an
/// action that returned.
#[async_trait]
pub trait AdministerLanes: Store {
    /// Un-parks `lane`; its head is tried again at once *in full*: its attempt count starts
    /// over, so it gets every one of `max_attempts` again instead of parking the lane on its
    /// next failure (its last error stays for the record). Un-parking, the reset and the
    /// audit record are one statement. `false`: it was not parked, and nothing changed.
    async fn release_lane(&self, lane: &str, actor: &str) -> Result<bool, Self::Error>;

    /// Moves the head of the parked `lane` to the dead table and un-parks it, so the rows
    /// behind it flow. The moved head's `seq`, or `None` when the lane was not parked.
    async fn skip_lane_head(&self, lane: &str, actor: &str) -> Result<Option<i64>, Self::Error>;
}

/// What [`WorkLanes::claim_lanes`] looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneClaimRequest<'a> {
    /// How long the lanes stay owned unless renewed.
    pub claim: Duration,
    /// The most lanes to claim.
    pub limit: u32,
    /// Start after this lane key (`""`: from the first lane), so lanes late in key order
    /// get their turn when more lanes are due than a claim takes.
    pub after: &'a str,
    /// Visit at most this many lanes: lanes that cannot be claimed (parked, scheduled,
    /// backing off, tripped) must not make a claim cost O(lanes).
    pub visit_cap: u32,
    /// (transport, destination) pairs whose breaker is open: lanes whose head goes there
    /// are left alone.
    pub tripped: &'a [(String, String)],
}

/// The outcome of a lane claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneClaim {
    /// The lanes now owned, in key order.
    pub lanes: Vec<String>,
    /// The lane key after which the next claim starts (`""`: from the first lane again).
    pub resume_after: String,
}

/// What a lane owner finds when it looks at its lane ([`WorkLanes::lane_head`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaneHead {
    /// The lane is no longer ours (the claim expired and was taken, or it was parked).
    Lost,
    /// The lane has no rows left.
    Empty,
    /// The head waits for its delivery or retry time.
    NotDue,
    /// The head, due now; the lane claim was renewed.
    Due(ClaimedMessage),
    /// The head is due but cannot be decoded; the lane claim was renewed. Park the lane
    /// with its description as the reason (LAN-5): nothing behind it may overtake it.
    Undecodable(UndecodableRow),
    /// The head names a transport this process lacks (TRN-6): the lane waits, whole, for
    /// an instance that has it. This process neither sends it nor judges it — even a head
    /// it could not decode is the other instance's to park.
    Elsewhere,
}

/// What to do with a lane head whose send failed ([`WorkLanes::fail_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadFailure<'a> {
    /// Retry the head `after` this delay; the lane waits behind it.
    Retry {
        /// The error chain, stored as `last_error`.
        error: &'a str,
        /// The retry delay.
        after: Duration,
    },
    /// The head is poison: park the lane behind it.
    Park {
        /// The error chain, stored as `last_error` and `parked_reason`.
        error: &'a str,
    },
}
