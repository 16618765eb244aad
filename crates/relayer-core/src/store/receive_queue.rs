//! Receiving messages from relayer's queue (QUE-1).

use std::time::Duration;

use async_trait::async_trait;

use super::Store;
use crate::queue_message::Received;

/// Receiving from relayer's queue: the consumer's receive loop.
#[async_trait]
pub trait ReceiveQueue: Store {
    /// Receives up to `limit` visible messages of `queue`, oldest first, never waiting for
    /// another receiver, invisible to others for `visibility` and stamped with one new
    /// receipt token. Rows that cannot be decoded are received too, each with the reason,
    /// so the caller moves them aside (§15).
    async fn receive(
        &self,
        queue: &str,
        limit: u32,
        visibility: Duration,
    ) -> Result<Vec<Received>, Self::Error>;
}
