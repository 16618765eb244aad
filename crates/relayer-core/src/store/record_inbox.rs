//! Recording a message in a consumer's inbox (QUE-3).

use async_trait::async_trait;

use super::Store;
use crate::message::MessageId;

/// Recording messages in the inbox: the consumer's inbox boundary, inside the session's
/// transaction that carries the handler's effects and the ack.
#[async_trait]
pub trait RecordInbox: Store {
    /// Records `message_id` for `consumer`, before any effect. It waits while another open
    /// transaction holds the same record, so two deliveries of one message never both find
    /// it new.
    async fn record(&self, consumer: &str, message_id: MessageId) -> Result<InboxEntry, Self::Error>;
}

/// Whether a message was new to a consumer's inbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InboxEntry {
    /// Recorded now: run the effects.
    First,
    /// Recorded before (committed by an earlier delivery): skip the effects, ack.
    Duplicate,
}

impl InboxEntry {
    /// Whether the effects should run.
    pub fn is_first(self) -> bool {
        self == InboxEntry::First
    }

    /// The entry of a record statement that inserted `rows` rows.
    pub fn from_inserted(rows: u64) -> Self {
        if rows == 1 { InboxEntry::First } else { InboxEntry::Duplicate }
    }
}
