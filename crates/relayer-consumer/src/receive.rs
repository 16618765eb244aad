//! The receive loop's pass: fill the free handler slots from the queue.
//!
//! A pass takes as many messages as there are free slots (at most `batch_size`) in one
//! statement, hands each decoded one to a handler task and moves undecodable rows aside.
//! A pass that filled every slot it asked for wakes its loop at once: more may be waiting,
//! and a pump that keeps up under load never waits for a notification. A pass with no free
//! slot does nothing; the settle loop wakes the receive loop when slots free up.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::ReceiveQueue;
use relayer_worker::{Pass, PassOutcome, WorkerError};
use tokio_util::sync::CancellationToken;

use crate::pump::{ConsumeSession, Pump};
use crate::stats::Counter;

/// What one receive pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReceiveReport {
    asked: u32,
    received: usize,
}

impl std::fmt::Display for ReceiveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "asked={} received={}", self.asked, self.received)
    }
}

pub(crate) struct ReceivePass<S: StoreSource> {
    pub(crate) pump: Arc<Pump<S>>,
}

#[async_trait]
impl<S> Pass for ReceivePass<S>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    type Report = ReceiveReport;
    type Error = WorkerError;

    async fn run_pass(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<PassOutcome<ReceiveReport>, WorkerError> {
        let pump = &self.pump;
        let options = pump.subscription.options();
        let free =
            u32::try_from(pump.slots.available_permits()).unwrap_or(u32::MAX).min(options.batch_size());
        if free == 0 || shutdown.is_cancelled() {
            return Ok(PassOutcome::Led(ReceiveReport::default()));
        }
        let Ok(mut slots) = Arc::clone(&pump.slots).try_acquire_many_owned(free) else {
            return Ok(PassOutcome::Led(ReceiveReport::default()));
        };
        let received = {
            let session = pump
                .source
                .open()
                .await
                .map_err(|e| WorkerError::store("opening a session to receive", e))?;
            session
                .receive(pump.subscription.queue(), free, options.visibility_timeout())
                .await
                .map_err(|e| WorkerError::store("receiving from the queue", e))?
        };
        pump.stats.add(Counter::Received, received.len() as u64);
        let report = ReceiveReport { asked: free, received: received.len() };
        for row in received {
            // `slots` holds `free` permits and at most `free` rows came back.
            let Some(slot) = slots.split(1) else { break };
            match row.message {
                Ok(message) => pump.spawn_handler(row.receipt, message, slot),
                Err(undecodable) => pump.set_aside(row.receipt, &undecodable, slot),
            }
        }
        drop(slots);
        if report.received == free as usize {
            pump.receive_wake.notify_one();
        }
        Ok(PassOutcome::Led(report))
    }
}
