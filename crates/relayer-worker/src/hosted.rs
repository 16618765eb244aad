//! A worker as a host runs it (LIF-1): one task each, started and stopped alike.
//!
//! The trait lives here, not in the facade, because every worker crate depends on this one
//! and none may depend on the facade: each implements it once, in its own `hosted.rs`, and
//! a host holds a list of `Box<dyn HostedWorker>` whatever workers it was built with.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::error::WorkerError;
use crate::kind::WorkerKind;

/// A background worker a host runs on a task of its own until shutdown.
///
/// [`run_hosted`](Self::run_hosted) runs until `shutdown` is cancelled, then lets its
/// passes in flight finish, releases its leadership (lease, lock) and returns — so a host
/// that cancels every worker and awaits each task has stopped them all gracefully. Failed
/// passes are retried inside it (RES-1); it returns an error only when it cannot start, in
/// the one error shape of every worker ([`WorkerError`]: what it was doing,
/// [`is_transient`](WorkerError::is_transient), the cause as its source).
///
/// ```
/// use relayer_worker::{HostedWorker, WorkerError, WorkerKind};
/// use tokio_util::sync::CancellationToken;
///
/// struct Sleeper;
///
/// #[async_trait::async_trait]
/// impl HostedWorker for Sleeper {
///     fn kind(&self) -> WorkerKind {
///         WorkerKind::Cleanup
///     }
///
///     async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError> {
///         shutdown.cancelled().await;
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let workers: Vec<Box<dyn HostedWorker>> = vec![Box::new(Sleeper)];
/// let shutdown = CancellationToken::new();
/// let tasks: Vec<_> = workers.into_iter().map(|w| tokio::spawn(w.run_hosted(shutdown.child_token()))).collect();
/// shutdown.cancel();
/// for task in tasks {
///     task.await.unwrap().unwrap();
/// }
/// # }
/// ```
#[async_trait]
pub trait HostedWorker: Send + 'static {
    /// Which worker this is.
    fn kind(&self) -> WorkerKind;

    /// What the host's logs call this instance of the worker: its kind, plus what tells
    /// several of one kind apart (a consumer's queue).
    fn describe(&self) -> String {
        self.kind().name().to_owned()
    }

    /// Runs until `shutdown` is cancelled and the work in flight has finished.
    async fn run_hosted(self: Box<Self>, shutdown: CancellationToken) -> Result<(), WorkerError>;
}
