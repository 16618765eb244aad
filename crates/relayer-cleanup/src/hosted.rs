//! Retention cleanup as a host runs it (LIF-1).

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::{CheckLease, DeleteExpired, HoldLease, VerifySchema};
use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::cleanup::Cleanup;

#[async_trait]
impl<S> HostedWorker for Cleanup<S>
where
    S: StoreSource,
    S::Session: VerifySchema + DeleteExpired + HoldLease + CheckLease,
{
    fn kind(&self) -> WorkerKind {
        WorkerKind::Cleanup
    }

    /// Never fails: a database that is down or lost its schema fails passes, retried with
    /// backoff (RES-1).
    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run(shutdown).await;
        Ok(())
    }
}
