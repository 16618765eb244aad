//! The heartbeat's pass: renew the visibility of every message in flight (QUE-5).
//!
//! Every `visibility_timeout / 3` one statement pushes each held message's `visible_at`
//! to the database's clock plus the visibility timeout, matched by receipt. Two heartbeats
//! in a row may fail before a message could reappear. A handler past its deadline is not
//! renewed (see `in_flight.rs`), so the heartbeat is bounded by the deadline.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_worker::{Pass, PassOutcome};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ConsumerError;
use crate::pump::Pump;

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

pub(crate) struct HeartbeatPass {
    pub(crate) pump: Arc<Pump>,
}

#[async_trait]
impl Pass for HeartbeatPass {
    type Report = HeartbeatReport;
    type Error = ConsumerError;

    async fn run_pass(
        &self,
        _shutdown: &CancellationToken,
    ) -> Result<PassOutcome<HeartbeatReport>, ConsumerError> {
        let pump = &self.pump;
        let receipts = pump.in_flight.to_renew(Instant::now());
        if receipts.is_empty() {
            return Ok(PassOutcome::Led(HeartbeatReport::default()));
        }
        let connection = pump.pool.get().await.map_err(ConsumerError::Pool)?;
        let visibility = pump.subscription.options().visibility_timeout();
        let renewed = pump.statements.extend(&*connection, &receipts, visibility).await?;
        Ok(PassOutcome::Led(HeartbeatReport { held: receipts.len(), renewed }))
    }
}
