//! The demo's handler: relayer's consumer runs it on the orders and payments queues.
//!
//! It rejects every order whose body asks for a review, but only on its first delivery:
//! the message goes to the shared dead-letter queue, the demo's redrive policy puts it back
//! on its queue, and the consumer hands it over again, this time to be accepted. Which
//! messages it has rejected is kept here, in the one process that runs the consumer; the
//! redriven copy reaches it only through the real queue, pump and inbox.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use relayer::async_trait;
use relayer::consumer::{InboxHandler, Outcome};
use relayer::core::Uuid;
use relayer::postgres::{PgSession, QueueMessage};

/// What marks an order for review in its body.
pub(crate) const REVIEW_MARK: &str = "\"review\":true";

/// The consumer's inbox name for both subscriptions.
pub(crate) const CONSUMER: &str = "billing";

/// Rejects marked messages on their first delivery; accepts everything else.
#[derive(Debug, Default)]
pub(crate) struct Billing {
    /// Ids it has rejected once.
    rejected: Mutex<HashSet<Uuid>>,
    /// Accepted messages that it had rejected before: they came back by redrive.
    redriven: AtomicU64,
    /// Accepted messages (inside the inbox boundary: each id at most once).
    handled: AtomicU64,
}

impl Billing {
    pub(crate) fn rejected(&self) -> usize {
        self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub(crate) fn redriven(&self) -> u64 {
        self.redriven.load(Ordering::Relaxed)
    }

    pub(crate) fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl InboxHandler<PgSession> for Billing {
    async fn handle(&self, _tx: &PgSession, message: &QueueMessage) -> Outcome {
        let id = *message.id.as_uuid();
        let marked = String::from_utf8_lossy(&message.body).contains(REVIEW_MARK);
        // A poisoned lock only means another call panicked: the set itself is intact.
        let first =
            marked && self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id);
        if first {
            return Outcome::reject("needs a review (the demo rejects it on its first delivery)");
        }
        // … a service would write its effects through `_tx.connection()` here: they commit with the
        // inbox row and the ack (QUE-3) …
        if marked {
            self.redriven.fetch_add(1, Ordering::Relaxed);
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
        Outcome::Ack
    }
}
