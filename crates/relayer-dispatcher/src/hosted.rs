//! The dispatcher as a host runs it (LIF-1).

use async_trait::async_trait;
use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::dispatcher::Dispatcher;

#[async_trait]
impl HostedWorker for Dispatcher {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Dispatcher
    }

    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run(shutdown).await.map_err(|error| {
            let doing = "starting the dispatcher";
            if error.is_transient() {
                WorkerError::transient(doing, error)
            } else {
                WorkerError::permanent(doing, error)
            }
        })
    }
}
