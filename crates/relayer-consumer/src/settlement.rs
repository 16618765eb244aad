//! A handled message's outcome, queued by its handler task for the settle loop to write.

use relayer_core::Receipt;
use relayer_core::store::{DeadLetter, Requeue};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

/// What to write for one handled message.
#[derive(Debug)]
pub(crate) struct Settlement {
    pub(crate) receipt: Receipt,
    pub(crate) kind: SettlementKind,
    /// Its place among the pending settlements, freed once this is written or given up.
    pub(crate) room: OwnedSemaphorePermit,
    /// Given up then if still unwritten: a visibility timeout after the message stopped
    /// being renewed (`InFlight::settling`), so it reappears; the place is freed for others.
    pub(crate) until: Instant,
    /// Failed writes so far; each pushes `next_try` back by the subscription's backoff.
    pub(crate) failures: u32,
    /// Not written again before then.
    pub(crate) next_try: Instant,
}

#[derive(Debug)]
pub(crate) enum SettlementKind {
    Ack,
    Requeue(Requeue),
    DeadLetter(DeadLetter),
}
