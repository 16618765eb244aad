//! The demo's own transports: one that refuses a destination for good (poison), and a
//! slow, flaky wrapper around the queue for the process that gets killed.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use relayer::queue::PgQueueTransport;
use relayer::{Envelope, SendOutcome, Transport, TransportError, async_trait};

/// The name of [`Strict`].
pub(crate) const STRICT: &str = "strict";

/// A transport whose broker refuses destination `refused` permanently: with `max_attempts`
/// set, each message sent there is poison at once and moves to the dead table (DSP-5).
pub(crate) struct Strict {
    pub(crate) refused: &'static str,
}

#[async_trait]
impl Transport for Strict {
    fn name(&self) -> &str {
        STRICT
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::MIN.saturating_add(99)
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let outcome = if destination == self.refused {
            SendOutcome::Failed(TransportError::permanent(format!("no such topic {destination:?}")))
        } else {
            SendOutcome::Accepted
        };
        Ok(vec![outcome; batch.len()])
    }
}

/// relayer's queue behind a slow, flaky broker: every `fail_every`-th send fails before
/// inserting (a broker that is briefly down), and every successful insert is acknowledged
/// only after `ack_delay`. A process killed during that delay has sent messages whose
/// outbox rows were never completed: they are sent again after recovery (at least once).
pub(crate) struct SlowFlakyQueue {
    pub(crate) inner: PgQueueTransport,
    pub(crate) ack_delay: Duration,
    pub(crate) fail_every: u64,
    pub(crate) sends: AtomicU64,
}

#[async_trait]
impl Transport for SlowFlakyQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.inner.batch_limit()
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let send = self.sends.fetch_add(1, Ordering::Relaxed) + 1;
        if send.is_multiple_of(self.fail_every) {
            return Err(TransportError::transient("the broker is briefly unavailable (simulated)"));
        }
        let outcomes = self.inner.send(destination, batch).await?;
        tokio::time::sleep(self.ack_delay).await;
        Ok(outcomes)
    }
}
