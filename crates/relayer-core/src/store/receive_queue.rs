//! Receiving messages from relayer's queue (QUE-1).

use std::time::Duration;

use async_trait::async_trait;

use super::Store;
use crate::queue_message::Received;
use crate::receive_cursor::ScanReach;

/// What one receive from a position took, and how far it reached.
#[derive(Clone, Debug)]
pub struct ReceivedPage {
    /// The messages taken, oldest `visible_at` first.
    pub received: Vec<Received>,
    /// How far the receive reached, for the pump's [`ReceiveCursor`](crate::receive_cursor::ReceiveCursor).
    pub reach: ScanReach,
}

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

    /// [`receive`](Self::receive) from a position: only rows whose `visible_at` is at or
    /// after `from` (µs since the Unix epoch, database clock; `None`: from the oldest),
    /// so the versions that earlier receives and acks left behind it are not walked again
    /// (see [`receive_cursor`](crate::receive_cursor)). Also reports how far it reached.
    async fn receive_from(
        &self,
        queue: &str,
        limit: u32,
        visibility: Duration,
        from: Option<i64>,
    ) -> Result<ReceivedPage, Self::Error>;
}
