//! The dispatcher as a host runs it (LIF-1).

use async_trait::async_trait;
use relayer_worker::{HostedError, HostedWorker, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::dispatcher::Dispatcher;

#[async_trait]
impl HostedWorker for Dispatcher {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Dispatcher
    }

    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), HostedError> {
        Ok(self.run(shutdown).await?)
    }
}
