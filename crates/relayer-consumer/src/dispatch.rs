//! The dispatcher: hands buffered messages to handlers as slots free, first in, first out.
//!
//! It takes a free slot, then the oldest buffered message, and starts its handler; so at
//! most `concurrency` handler calls run at once, and a call that returns frees its slot for
//! the next buffered message at once. Once the buffer is half empty it wakes the receive
//! loop, if its last receive found messages (more may be waiting), which refills it while
//! the other half is handled.

use std::sync::Arc;

use relayer_core::Received;
use relayer_core::session::StoreSource;
use relayer_core::store::ExtendVisibility;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::pump::{ConsumeSession, Pump};
use crate::stats::Counter;

const TARGET: &str = "relayer::consumer";

impl<S> Pump<S>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    /// Starts handlers for buffered messages until `stop`; returns the buffer with what
    /// it still holds.
    pub(crate) async fn dispatch(
        self: Arc<Self>,
        mut buffer: mpsc::Receiver<Received>,
        stop: CancellationToken,
    ) -> mpsc::Receiver<Received> {
        let low_water = buffer.max_capacity() / 2;
        loop {
            let slot = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                slot = Arc::clone(&self.slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break, // never closed
                },
            };
            let received = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                received = buffer.recv() => match received {
                    Some(received) => received,
                    None => break, // the pump holds the sender
                },
            };
            if buffer.len() <= low_water && self.more_waiting.load(std::sync::atomic::Ordering::Acquire) {
                self.receive_wake.notify_one();
            }
            // Its visibility may have lapsed while it waited, and another reader may hold it:
            // then it is dropped, not handled a second time (QUE-5).
            if !self.in_flight.startable(received.receipt, Instant::now()) {
                self.stats.add(Counter::Abandoned, 1);
                tracing::warn!(target: TARGET, queue = %self.subscription.queue(), seq = received.receipt.seq,
                    "a message received ahead waited for a slot past its visibility; left to the queue \
                     rather than risk handling it twice");
                continue;
            }
            self.start(received, slot);
        }
        buffer
    }

    /// Gives what the buffer still holds at shutdown back to the queue: visible again at
    /// once, its receipt cleared, unhandled and its handled count unchanged, so another
    /// pump need not wait out the visibility timeout. If that fails, they reappear after it.
    pub(crate) async fn release(&self, mut buffer: mpsc::Receiver<Received>) {
        buffer.close();
        let mut receipts = Vec::new();
        while let Ok(received) = buffer.try_recv() {
            self.in_flight.forget(received.receipt);
            receipts.push(received.receipt);
        }
        if receipts.is_empty() {
            return;
        }
        let queue = self.subscription.queue();
        let released = match self.source.open().await {
            Ok(session) => {
                session.release_received(&receipts).await.map_err(|e| relayer_core::error_chain(&e))
            }
            Err(error) => Err(relayer_core::error_chain(&error)),
        };
        match released {
            Ok(released) => tracing::debug!(target: TARGET, %queue, released,
                "released the messages received ahead and not started"),
            Err(cause) => tracing::warn!(target: TARGET, %queue, count = receipts.len(), %cause,
                "could not release the messages received ahead; they reappear after the visibility timeout"),
        }
    }
}
