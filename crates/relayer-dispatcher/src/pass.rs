//! One dispatch pass loop's work, run by relayer-worker's
//! [`PassLoop`](relayer_worker::PassLoop): unordered rows or ordered lanes.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_worker::{Pass, PassOutcome, WorkerError};
use tokio_util::sync::CancellationToken;

use crate::error::store;
use crate::report::PassReport;
use crate::session::DispatchSession;
use crate::shared::Shared;

/// Which kind of work a pass loop does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Due unordered rows, a batch at a time (DSP-1..6).
    Unordered,
    /// Ordered lanes, one head per lane at a time (LAN-1..5).
    Lanes,
}

/// A pass of one kind of work on one store session (LIF-2).
pub(crate) struct DispatchPass<S> {
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) work: Work,
}

#[async_trait]
impl<S> Pass for DispatchPass<S>
where
    S: StoreSource,
    S::Session: DispatchSession,
{
    type Report = PassReport;
    type Error = WorkerError;

    async fn run_pass(&self, shutdown: &CancellationToken) -> Result<PassOutcome<PassReport>, WorkerError> {
        let shared = &self.shared;
        if self.work == Work::Lanes && !shared.lanes_in_use().await {
            return Ok(PassOutcome::Led(PassReport::default()));
        }
        let session = shared.source.open().await.map_err(store("opening a store session"))?;
        let report = match self.work {
            Work::Unordered => shared.unordered_pass(&session, shutdown).await?,
            Work::Lanes => shared.lane_pass(&session).await?,
        };
        Ok(PassOutcome::Led(report))
    }

    /// A pass that ended on a full batch (of rows, or of lanes) and moved something: more
    /// may be due. An unordered pass that drained the backlog ended on a partial batch,
    /// however many rows its batches add up to (DSP-1b). A pass that only released rows or
    /// lanes unsent — heads not due after all, a breaker that tripped — never restarts its
    /// loop at once (a tight claim/release cycle otherwise).
    fn again_at_once(&self, report: &PassReport) -> bool {
        let ended_full = match self.work {
            Work::Unordered => report.more_due,
            Work::Lanes => report.lanes >= u64::from(self.shared.options.batch_size()),
        };
        ended_full && report.moved_anything()
    }
}
