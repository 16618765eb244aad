//! What users implement: a [`Handler`], or an [`InboxHandler`] that gets the transaction.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::QueueMessage;

/// How a handler settles a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the message is deleted.
    Ack,
    /// Not now: visible again after `delay` (the subscription's doubling requeue delay
    /// when `None`), its handled count one higher; dead-lettered instead once the count
    /// reaches `max_handled_count` (QUE-2).
    Requeue {
        /// How long the message stays invisible: at most the subscription's
        /// `max_requeue_delay`, a longer delay is clamped to it.
        delay: Option<Duration>,
        /// Why: logged, and stamped as the rejection message if it is dead-lettered.
        reason: String,
    },
    /// Never: moved to the dead-letter queue at once, stamped with `reason` (QUE-2).
    Reject {
        /// Why: the rejection message.
        reason: String,
    },
}

impl Outcome {
    /// A failure: requeue after the subscription's delay.
    pub fn failed(error: impl fmt::Display) -> Self {
        Outcome::Requeue { delay: None, reason: error.to_string() }
    }

    /// Requeue after `delay`, clamped to the subscription's `max_requeue_delay`.
    pub fn requeue_after(delay: Duration, reason: impl Into<String>) -> Self {
        Outcome::Requeue { delay: Some(delay), reason: reason.into() }
    }

    /// Reject into the dead-letter queue.
    pub fn reject(reason: impl Into<String>) -> Self {
        Outcome::Reject { reason: reason.into() }
    }
}

/// Handles one message at a time; a pump runs up to `concurrency` calls at once.
///
/// A call that panics or runs past `handler_deadline` is requeued like a failure and never
/// stops the pump (QUE-5). Object-safe: pumps hold `Arc<dyn Handler>`.
///
/// ```
/// use relayer_consumer::{Handler, Outcome};
/// use relayer_core::QueueMessage;
///
/// struct Orders;
///
/// #[async_trait::async_trait]
/// impl Handler for Orders {
///     async fn handle(&self, message: &QueueMessage) -> Outcome {
///         if message.body.is_empty() {
///             return Outcome::reject("an order needs a body");
///         }
///         // … act on the order …
///         Outcome::Ack
///     }
/// }
/// let handler: std::sync::Arc<dyn Handler> = std::sync::Arc::new(Orders);
/// # let _ = handler;
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles `message`.
    async fn handle(&self, message: &QueueMessage) -> Outcome;
}

/// A handler inside the inbox boundary (QUE-3): it gets the store session whose
/// transaction has just recorded the message in the inbox, and its effects, the inbox row
/// and the ack commit together. A message already in the inbox is acked without calling
/// it; any outcome other than [`Outcome::Ack`] rolls its effects back.
///
/// `T` is the pump's session type: on relayer's PostgreSQL store, `relayer_postgres::PgSession`,
/// whose `connection()` runs statements inside that transaction.
#[async_trait]
pub trait InboxHandler<T>: Send + Sync + 'static {
    /// Handles `message`, writing its effects through `tx`, inside its transaction.
    async fn handle(&self, tx: &T, message: &QueueMessage) -> Outcome;
}

/// The handler a pump runs: plain, or inside the inbox boundary on sessions of type `T`.
pub enum Handling<T> {
    /// Acks settle after the call.
    Plain(Arc<dyn Handler>),
    /// Record, effects and ack in one transaction.
    Inbox(Arc<dyn InboxHandler<T>>),
}

impl<T> Clone for Handling<T> {
    fn clone(&self) -> Self {
        match self {
            Handling::Plain(handler) => Handling::Plain(Arc::clone(handler)),
            Handling::Inbox(handler) => Handling::Inbox(Arc::clone(handler)),
        }
    }
}

impl<T> fmt::Debug for Handling<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Handling::Plain(_) => "Handling::Plain",
            Handling::Inbox(_) => "Handling::Inbox",
        })
    }
}

impl<T, H: Handler> From<Arc<H>> for Handling<T> {
    fn from(handler: Arc<H>) -> Self {
        Handling::Plain(handler)
    }
}

impl<T> From<Arc<dyn Handler>> for Handling<T> {
    fn from(handler: Arc<dyn Handler>) -> Self {
        Handling::Plain(handler)
    }
}

impl<T> From<Arc<dyn InboxHandler<T>>> for Handling<T> {
    fn from(handler: Arc<dyn InboxHandler<T>>) -> Self {
        Handling::Inbox(handler)
    }
}
