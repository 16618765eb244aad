//! The receive loop's pass: fill the receive-ahead buffer from the queue.
//!
//! A pass takes as many messages as the buffer has room for (at most `batch_size`) in one
//! statement and buffers them. It starts where the last one got to (the pump's
//! [`ReceiveCursor`](relayer_core::receive_cursor::ReceiveCursor)), so it does not walk the
//! dead row versions behind it again — while a held snapshot keeps them, tens of thousands
//! a minute — with a full scan once per poll interval as the safety net (less often when
//! full scans are slow: see `Receiving`); the dispatcher hands each to a handler as a slot frees, so a
//! handler that returns finds its next message without waiting for a receive round trip. A
//! pass that got every message it asked for wakes its loop at once: more may be waiting,
//! and a pump that keeps up under load never waits for a notification. A pass with no
//! room does nothing; the dispatcher wakes the loop once the buffer is half empty, if the
//! last receive found messages (so reads follow each other while messages flow, and stop
//! at the first empty one).

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::ReceiveQueue;
use relayer_worker::{Pass, PassOutcome, WorkerError};
use tokio_util::sync::CancellationToken;

use crate::pump::{ConsumeSession, Pump};
use crate::retry::retrying_conflicts;
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
        // The receive loop is the buffer's only sender: the room cannot shrink meanwhile.
        let room = u32::try_from(pump.buffer.capacity()).unwrap_or(u32::MAX).min(options.batch_size());
        if room == 0 || shutdown.is_cancelled() {
            return Ok(PassOutcome::Led(ReceiveReport::default()));
        }
        let sent = tokio::time::Instant::now();
        let from = pump.cursor().plan(sent);
        let page = {
            let session = pump
                .source
                .open()
                .await
                .map_err(|e| WorkerError::store("opening a session to receive", e))?;
            let (queue, visibility) = (pump.subscription.queue(), options.visibility_timeout());
            retrying_conflicts(&pump.stats, queue, "a receive", || {
                session.receive_from(queue, room, visibility, from)
            })
            .await
            .map_err(|e| WorkerError::store("receiving from the queue", e))?
        };
        pump.cursor().record(from, page.reach, sent, tokio::time::Instant::now());
        if from.is_none() {
            pump.stats.add(Counter::FullScans, 1);
        }
        let received = page.received;
        pump.stats.add(Counter::Received, received.len() as u64);
        let report = ReceiveReport { asked: room, received: received.len() };
        // Messages found: more may be committing behind them (writers notify at most once
        // per interval), so the dispatcher asks for another read once these are under way.
        // Stored before they are buffered: the dispatcher reads it as it takes them.
        pump.more_waiting.store(report.received > 0, std::sync::atomic::Ordering::Release);
        // A buffered message waits for a slot at most `receive_ahead_rounds` handler
        // deadlines (see `ConsumerOptions::receive_ahead`); a visibility timeout more for
        // the dispatcher. Past that it is no longer renewed, and the dispatcher drops it
        // rather than start it (`InFlight::startable`).
        let wait = options.handler_deadline() * options.receive_ahead_rounds() + options.visibility_timeout();
        let (until, invisible_until) = (sent + wait, sent + options.visibility_timeout());
        for row in received {
            pump.in_flight.received(row.receipt, until, invisible_until);
            if let Err(full) = pump.buffer.try_send(row) {
                // Unreachable with one sender; left to reappear rather than lost.
                let row = full.into_inner();
                pump.in_flight.forget(row.receipt);
                pump.stats.add(Counter::Abandoned, 1);
            }
        }
        if report.received == room as usize {
            pump.receive_wake.notify_one();
        }
        Ok(PassOutcome::Led(report))
    }
}
