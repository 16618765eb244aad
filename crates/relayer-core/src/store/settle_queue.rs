//! Settling received queue messages, fenced by their receipts (QUE-2, QUE-5).

use std::time::Duration;

use async_trait::async_trait;

use super::Store;
use crate::consumer::RejectionReason;
use crate::queue_message::Receipt;

/// Settling received messages: the consumer's settle loop, and its inbox boundary's ack.
///
/// Every method settles a batch in one statement and returns the `seq`s whose receipt
/// still held: a reader whose visibility lapsed, and whose message another reader
/// received, changes nothing (QUE-5).
#[async_trait]
pub trait SettleQueue: Store {
    /// Deletes the acknowledged messages.
    async fn ack(&self, receipts: &[Receipt]) -> Result<Vec<i64>, Self::Error>;

    /// Makes messages visible again after their delay, one more handled each.
    async fn requeue(&self, requeues: &[Requeue]) -> Result<Vec<i64>, Self::Error>;

    /// Moves messages to their dead-letter queues with the QUE-2 stamps.
    async fn dead_letter(&self, dead_letters: &[DeadLetter]) -> Result<Vec<i64>, Self::Error>;
}

/// A received message to move to a dead-letter queue (QUE-2).
#[derive(Clone, Debug)]
pub struct DeadLetter {
    /// The message, fenced by its receive.
    pub receipt: Receipt,
    /// The dead-letter (or invalid-message) queue it moves to.
    pub queue: String,
    /// The `rejection_reason` stamp.
    pub reason: RejectionReason,
    /// The `rejection_message` stamp: the handler's reason, its last error, or what could
    /// not be decoded.
    pub message: String,
    /// Whether this delivery counts as handled (a handler ran): raises `handled_count`.
    pub handled: bool,
}

/// A received message to make visible again later (QUE-2).
#[derive(Clone, Copy, Debug)]
pub struct Requeue {
    /// The message, fenced by its receive.
    pub receipt: Receipt,
    /// How long it stays invisible, from the statement's clock.
    pub delay: Duration,
}
