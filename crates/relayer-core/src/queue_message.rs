//! A message received from relayer's queue (QUE-1, QUE-5): what fences it, and what a
//! handler gets — or, for a row that cannot be decoded, why not (§15).

use crate::message::{Headers, MessageId};
use crate::time::Timestamp;
use uuid::Uuid;

/// What fences a received message: its row and the token of the receive that took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The queue row's `seq`.
    pub seq: i64,
    /// The receive's token; ack, requeue, dead-letter and heartbeat match it.
    pub token: Uuid,
}

/// A message received from relayer's queue, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    /// The queue row's `seq`.
    pub seq: i64,
    /// The message id (the inbox deduplicates on it).
    pub id: MessageId,
    /// The queue it was received from.
    pub queue: String,
    /// The body, as written.
    pub body: Vec<u8>,
    /// The headers, as written.
    pub headers: Headers,
    /// The creation context recorded at enqueue, if any.
    pub trace_context: Option<String>,
    /// When the message was written, on the database clock.
    pub created_at: Timestamp,
    /// How many times a handler failed, requeued or overran on it before this delivery.
    pub handled_count: u32,
}

/// A row that could not be decoded: it names the table, the row and the column (§15).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("row seq {seq} of {table}, column {column}: {problem}")]
pub struct Undecodable {
    /// The queue table, qualified.
    pub table: String,
    /// The row's `seq`.
    pub seq: i64,
    /// The column that could not be decoded.
    pub column: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// One message a receive took: its receipt, and the message or why it cannot be decoded.
#[derive(Clone, Debug)]
pub struct Received {
    /// What fences every later statement about it.
    pub receipt: Receipt,
    /// The decoded message, or why its row could not be decoded.
    pub message: Result<QueueMessage, Undecodable>,
}
