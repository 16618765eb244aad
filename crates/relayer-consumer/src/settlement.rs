//! A handled message's outcome, queued by its handler task for the settle loop to write.

use relayer_core::Receipt;
use relayer_core::store::{DeadLetter, Requeue};
use tokio::sync::OwnedSemaphorePermit;

/// What to write for one handled message.
#[derive(Debug)]
pub(crate) struct Settlement {
    pub(crate) receipt: Receipt,
    pub(crate) kind: SettlementKind,
    /// Its place among the pending settlements, freed once this is written.
    pub(crate) room: OwnedSemaphorePermit,
}

#[derive(Debug)]
pub(crate) enum SettlementKind {
    Ack,
    Requeue(Requeue),
    DeadLetter(DeadLetter),
}
