//! The inbox boundary (QUE-3): record first, then effects, then ack, in one transaction.
//!
//! A consumer that writes to the same database processes each message effectively once by
//! doing three things in one transaction: insert the inbox row `(consumer, message id)`
//! with `ON CONFLICT DO NOTHING` *before* any side effect, run its effects only if that
//! insert took, then acknowledge the message and commit. Two concurrent deliveries of one
//! message cannot both run the effects: the second insert waits for the first transaction
//! and then finds the row (or, if the first rolled back, takes it). A message whose id is
//! already recorded is acknowledged without running the effects.
//!
//! [`Inbox`] is usable on its own for messages from any broker: record on the transaction
//! that carries the effects, commit, then ack to the broker. Retention cleanup deletes
//! inbox rows after `inbox_retention` (RET-5), which must exceed the broker's redelivery
//! window.
//!
//! ```no_run
//! # async fn example(client: &mut tokio_postgres::Client, id: relayer_core::MessageId)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use relayer_core::Namespace;
//! use relayer_postgres::Inbox;
//!
//! let inbox = Inbox::new(&Namespace::default());
//! let tx = client.transaction().await?;
//! if inbox.record(&tx, "billing", id).await?.is_first() {
//!     // … the handler's effects on `tx` …
//! }
//! tx.commit().await?;
//! // … then acknowledge the message to its broker.
//! # Ok(()) }
//! ```

use relayer_core::{MessageId, Namespace};
use tokio_postgres::types::{ToSql, Type};

use crate::error::{StorageError, StorageErrorKind};
use crate::exec::Executor;

pub use relayer_core::store::InboxEntry;

/// The inbox statement rendered for one namespace.
#[derive(Clone, Debug)]
pub struct Inbox {
    record: String,
}

impl Inbox {
    /// Renders the statement for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let inbox = namespace.table("inbox");
        Inbox {
            // Index: inbox_pkey (consumer, message_id) takes the conflict.
            record: format!(
                "INSERT INTO {inbox} (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING"
            ),
        }
    }

    /// Records `message_id` for `consumer` on `client` — the transaction that will carry the
    /// effects. Call it before any effect; it waits while another open transaction holds
    /// the same record.
    pub async fn record(
        &self,
        client: &impl Executor,
        consumer: &str,
        message_id: MessageId,
    ) -> Result<InboxEntry, StorageError> {
        let statement = self.record_statement(consumer, message_id)?;
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&consumer, Type::TEXT), (message_id.as_uuid(), Type::UUID)];
        let inserted = client.affected(statement, &params).await.map_err(|e| {
            StorageError::database(format!("recording message {message_id} in the inbox of {consumer:?}"), e)
        })?;
        Ok(InboxEntry::from_inserted(inserted))
    }

    /// The record statement for `consumer` and `message_id`, once both are checked: the
    /// single source of its text for every driver. It takes `$1` the consumer (`text`) and
    /// `$2` the message id (`uuid`), and inserts one row iff the message is new to the
    /// consumer ([`InboxEntry::from_inserted`]).
    pub fn record_statement(&self, consumer: &str, message_id: MessageId) -> Result<&str, StorageError> {
        if consumer.is_empty() || consumer.contains('\0') {
            return Err(StorageError::new(
                format!(
                    "recording message {message_id} in the inbox: consumer name {consumer:?} is empty or has a NUL"
                ),
                StorageErrorKind::MalformedRow,
            ));
        }
        Ok(&self.record)
    }
}
