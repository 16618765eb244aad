//! The dispatcher as a host runs it (LIF-1).

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::dispatcher::Dispatcher;
use crate::session::DispatchSession;

#[async_trait]
impl<S> HostedWorker for Dispatcher<S>
where
    S: StoreSource,
    S::Session: DispatchSession,
{
    fn kind(&self) -> WorkerKind {
        WorkerKind::Dispatcher
    }

    /// Fails only when it cannot start: a missing or old schema (OPT-5).
    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run(shutdown).await
    }
}
