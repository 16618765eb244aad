//! The recovery sweeper as a host runs it (LIF-1).

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::{HoldBackDestination, HoldLease, LockOutbox, ScanRecovery, VerifySchema};
use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::sweeper::Sweeper;

#[async_trait]
impl<S> HostedWorker for Sweeper<S>
where
    S: StoreSource,
    S::Session: VerifySchema + ScanRecovery + LockOutbox + HoldLease + HoldBackDestination,
{
    fn kind(&self) -> WorkerKind {
        WorkerKind::Sweeper
    }

    /// Never fails: a database that is down or lost its schema fails passes, retried with
    /// backoff (RES-1).
    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run(shutdown).await;
        Ok(())
    }
}
