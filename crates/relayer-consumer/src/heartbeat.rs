//! The heartbeat's pass: renew the visibility of every message the pump holds (QUE-5):
//! buffered, running, or settled and not yet written.
//!
//! Every `visibility_timeout / 3` one statement pushes each held message's `visible_at`
//! to the database's clock plus the visibility timeout, matched by receipt. Two heartbeats
//! in a row may fail before a message could reappear. A handler past its deadline is not
//! renewed (see `in_flight.rs`), so the heartbeat is bounded by the deadline.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::ExtendVisibility;
use relayer_worker::{Pass, PassOutcome, WorkerError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::pump::{ConsumeSession, Pump};
use crate::retry::retrying_conflicts;

/// What one heartbeat did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeartbeatReport {
    held: usize,
    renewed: u64,
}

impl std::fmt::Display for HeartbeatReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "held={} renewed={}", self.held, self.renewed)
    }
}

pub(crate) struct HeartbeatPass<S: StoreSource> {
    pub(crate) pump: Arc<Pump<S>>,
}

#[async_trait]
impl<S> Pass for HeartbeatPass<S>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    type Report = HeartbeatReport;
    type Error = WorkerError;

    async fn run_pass(
        &self,
        _shutdown: &CancellationToken,
    ) -> Result<PassOutcome<HeartbeatReport>, WorkerError> {
        let pump = &self.pump;
        let receipts = pump.in_flight.to_renew(Instant::now());
        if receipts.is_empty() {
            return Ok(PassOutcome::Led(HeartbeatReport::default()));
        }
        let session = pump
            .source
            .open()
            .await
            .map_err(|e| WorkerError::store("opening a session for the heartbeat", e))?;
        let visibility = pump.subscription.options().visibility_timeout();
        let queue = pump.subscription.queue();
        let sent = Instant::now();
        let renewed =
            retrying_conflicts(&pump.stats, queue, "a heartbeat", || session.extend(&receipts, visibility))
                .await
                .map_err(|e| WorkerError::store("extending the visibility of messages in flight", e))?;
        pump.in_flight.renewed(&receipts, renewed, sent, Instant::now(), visibility);
        Ok(PassOutcome::Led(HeartbeatReport { held: receipts.len(), renewed }))
    }
}
