//! The dead-letter policy worker as a host runs it (LIF-1).

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::{HoldLease, MoveDeadLetters, VerifySchema};
use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::worker::DeadLetterWorker;

#[async_trait]
impl<S> HostedWorker for DeadLetterWorker<S>
where
    S: StoreSource,
    S::Session: VerifySchema + MoveDeadLetters + HoldLease,
{
    fn kind(&self) -> WorkerKind {
        WorkerKind::DeadLetter
    }

    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run(shutdown).await;
        Ok(())
    }
}
