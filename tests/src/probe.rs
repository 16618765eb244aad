//! [`QueueProbe`]: relayer's PostgreSQL queue transport, watched.

use std::io::Write;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use relayer::queue::PgQueueTransport;
use relayer::{Envelope, Namespace, SendOutcome, Transport, TransportError, async_trait};

use crate::host_process::held_line;

/// relayer's PostgreSQL queue transport (registered as `"queue"`), counting the messages it
/// accepted, and optionally holding one send of lane rows forever after the queue accepted
/// it (a lane owner stuck between its send and its head's delete, to be killed there).
///
/// The queue's insert commits before `send` returns, durably on a server that commits
/// synchronously, so an accepted message is in the queue whatever happens to the sender.
pub struct QueueProbe {
    inner: PgQueueTransport,
    accepted: Arc<AtomicU64>,
    hold_armed: AtomicBool,
}

impl std::fmt::Debug for QueueProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueProbe").field("accepted", &self.accepted).finish_non_exhaustive()
    }
}

impl QueueProbe {
    /// The queue transport of `namespace` on `pool` (a pool of its own: LIF-2b).
    pub fn new(pool: relayer::postgres::PgPool, namespace: &Namespace) -> QueueProbe {
        QueueProbe {
            inner: PgQueueTransport::new(pool, namespace),
            accepted: Arc::new(AtomicU64::new(0)),
            hold_armed: AtomicBool::new(false),
        }
    }

    /// The count of messages accepted so far, shared with the caller.
    pub fn accepted(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.accepted)
    }

    /// Holds the first accepted send that carries lane rows: prints a
    /// [`held_line`] on stdout and never returns.
    pub fn hold_first_lane_send(self) -> QueueProbe {
        self.hold_armed.store(true, Ordering::SeqCst);
        self
    }
}

#[async_trait]
impl Transport for QueueProbe {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.inner.batch_limit()
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let outcomes = self.inner.send(destination, batch).await?;
        let accepted = outcomes.iter().filter(|o| matches!(o, SendOutcome::Accepted)).count();
        self.accepted.fetch_add(u64::try_from(accepted).unwrap_or(u64::MAX), Ordering::Relaxed);
        let lane_rows: Vec<_> = batch.iter().filter(|e| e.lane.is_some()).map(|e| *e.id.as_uuid()).collect();
        if !lane_rows.is_empty() && self.hold_armed.swap(false, Ordering::SeqCst) {
            announce_held(&held_line(&lane_rows));
            std::future::pending::<()>().await;
        }
        Ok(outcomes)
    }
}

/// Prints the held line and flushes it. If the parent is gone there is nobody to kill this
/// process: holding is still right, so an error is ignored.
fn announce_held(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}
