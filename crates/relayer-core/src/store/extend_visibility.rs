//! The consumer's heartbeat, and giving unstarted messages back (QUE-5).

use std::time::Duration;

use async_trait::async_trait;

use super::Store;
use crate::queue_message::Receipt;

/// Keeping received messages invisible while their handlers run: the consumer's heartbeat.
#[async_trait]
pub trait ExtendVisibility: Store {
    /// Keeps the messages of `receipts` invisible for `visibility` more, counted from the
    /// statement's clock; returns how many receipts still held.
    async fn extend(&self, receipts: &[Receipt], visibility: Duration) -> Result<u64, Self::Error>;

    /// Gives received messages back unhandled: visible again at once, their receipt
    /// cleared (so nothing sent under it matches them any more), their handled count
    /// unchanged; returns how many receipts still held. A pump calls it at shutdown for the
    /// messages it received ahead and never started.
    async fn release_received(&self, receipts: &[Receipt]) -> Result<u64, Self::Error>;
}
