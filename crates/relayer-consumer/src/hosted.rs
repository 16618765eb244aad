//! A queue consumer's pump as a host runs it (LIF-1): one per subscription.

use async_trait::async_trait;
use relayer_core::session::StoreSource;
use relayer_core::store::{ExtendVisibility, ReceiveQueue, RecordInbox, SettleQueue, VerifySchema};
use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
use tokio_util::sync::CancellationToken;

use crate::consumer::Consumer;

#[async_trait]
impl<S> HostedWorker for Consumer<S>
where
    S: StoreSource,
    S::Session: VerifySchema + ReceiveQueue + SettleQueue + ExtendVisibility + RecordInbox,
{
    fn kind(&self) -> WorkerKind {
        WorkerKind::Consumer
    }

    fn describe(&self) -> String {
        format!("consumer of queue {:?}", self.subscription().queue())
    }

    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run(shutdown).await
    }
}
