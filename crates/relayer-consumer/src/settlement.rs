//! A handled message's outcome, queued by its handler task for the settle loop to write.

use relayer_core::Receipt;
use relayer_core::store::{DeadLetter, Requeue};
use tokio::sync::OwnedSemaphorePermit;

/// What to write for one handled message.
#[derive(Debug)]
pub(crate) struct Settlement {
    pub(crate) receipt: Receipt,
    pub(crate) kind: SettlementKind,
    /// The message's handler slot, freed once this is written.
    pub(crate) slot: OwnedSemaphorePermit,
}

#[derive(Debug)]
pub(crate) enum SettlementKind {
    Ack,
    Requeue(Requeue),
    DeadLetter(DeadLetter),
}
