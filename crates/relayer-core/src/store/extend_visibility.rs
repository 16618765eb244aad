//! The consumer's heartbeat (QUE-5).

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
}
