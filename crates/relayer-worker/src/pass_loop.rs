//! The resilient pass loop (RES-1..3), its shutdown (LIF-1) and its test signals.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use relayer_core::{LockGuard, PassBackoff};
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::events::WorkerEvent;
use crate::kind::{WorkerKind, with_target};
use crate::leadership::Leadership;
use crate::outcome::PassOutcome;
use crate::panic::catch_panic;

/// Test signals kept for slow subscribers; older ones are dropped (they see `Lagged`).
const EVENT_CAPACITY: usize = 256;

/// The `what` of a pass that panicked.
const PANICKED: &str = "panicked";

/// The work of one background worker, one pass at a time.
#[async_trait]
pub trait Pass: Send + Sync + 'static {
    /// What a pass that led reports (counts): logged in the pass's span and sent to tests.
    type Report: fmt::Display + fmt::Debug + Clone + Send + Sync + 'static;
    /// Why a pass failed. Its `source()` chain is logged.
    type Error: Error + Send + Sync + 'static;

    /// Runs one pass. With [`Leadership::Lease`] the pass takes the lease itself and returns
    /// [`PassOutcome::NotLeader`] when another instance holds it. `shutdown` is cancelled when
    /// the host stops: a long pass may return early at a safe point.
    async fn run_pass(&self, shutdown: &CancellationToken) -> Result<PassOutcome<Self::Report>, Self::Error>;

    /// Whether the pass that reported `report` left work that should be done at once
    /// (e.g. it found a full batch): the next pass then starts without waiting. A pass
    /// that moved nothing must answer `false`, or the loop would spin. Default: never.
    fn again_at_once(&self, report: &Self::Report) -> bool {
        let _ = report;
        false
    }

    /// Called once when the loop stops, after its last pass: release what the pass holds
    /// across passes (a lease). Failures should be logged, not returned: shutdown goes on.
    async fn stopped(&self) {}
}

/// Runs a [`Pass`] over and over, resiliently, until shutdown. See the [crate docs](crate).
///
/// ```no_run
/// # async fn example<P: relayer_worker::Pass>(pass: P) {
/// use std::time::Duration;
/// use relayer_core::PassBackoff;
/// use relayer_worker::{Leadership, PassLoop, WorkerKind};
/// use tokio_util::sync::CancellationToken;
///
/// let backoff = PassBackoff::new(Duration::from_secs(60), Duration::from_secs(60)).unwrap();
/// let leadership = Leadership::lease("cleanup", "host-a/4242/1f3c", Duration::from_secs(30));
/// let shutdown = CancellationToken::new();
/// let mut handle = PassLoop::new(WorkerKind::Cleanup, pass, backoff, leadership).spawn(shutdown);
/// // … on host shutdown:
/// handle.shutdown().await;
/// # }
/// ```
pub struct PassLoop<P: Pass> {
    kind: WorkerKind,
    pass: Arc<P>,
    backoff: PassBackoff,
    leadership: Leadership,
    wake: Option<Arc<Notify>>,
    wake_during_backoff: bool,
    linger: Duration,
    events: broadcast::Sender<WorkerEvent<P::Report>>,
}

impl<P: Pass> fmt::Debug for PassLoop<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassLoop")
            .field("kind", &self.kind)
            .field("backoff", &self.backoff)
            .field("leadership", &self.leadership)
            .finish_non_exhaustive()
    }
}

/// Why one pass did not succeed, with its cause chain flattened for the log.
struct Failure {
    what: &'static str,
    chain: String,
}

impl<P: Pass> PassLoop<P> {
    /// A loop running `pass` on `backoff`'s schedule under `leadership`.
    pub fn new(kind: WorkerKind, pass: P, backoff: PassBackoff, leadership: Leadership) -> Self {
        Self::with_shared_pass(kind, Arc::new(pass), backoff, leadership)
    }

    /// Like [`new`](Self::new), for a pass the caller keeps a handle to.
    pub fn with_shared_pass(
        kind: WorkerKind,
        pass: Arc<P>,
        backoff: PassBackoff,
        leadership: Leadership,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        PassLoop {
            kind,
            pass,
            backoff,
            leadership,
            wake: None,
            wake_during_backoff: false,
            linger: Duration::ZERO,
            events,
        }
    }

    /// Starts the next pass early when `wake` is notified after a pass began. Wake-ups
    /// coalesce, and a failure backoff is always waited out (the pass that ends it serves
    /// the wake-ups that came during it).
    pub fn wake_on(mut self, wake: Arc<Notify>) -> Self {
        self.wake = Some(wake);
        self
    }

    /// Lets a wake-up ([`wake_on`](Self::wake_on)) also end a failure backoff early, for a
    /// loop whose wake-ups are few and each means work waits that only it can do (the
    /// consumer's settlements): the wake-ups are then the retries, the backoff their floor.
    pub fn wake_during_backoff(mut self) -> Self {
        self.wake_during_backoff = true;
        self
    }

    /// After a wake-up, waits `linger` before the pass, so the wake-ups of that moment
    /// (commits, say) are served by one pass. A timer-started pass does not linger.
    pub fn linger_after_wake(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Sends the loop's events to `events` instead of a channel of its own, so a worker
    /// can hand out subscriptions before its loop exists.
    pub fn events_to(mut self, events: broadcast::Sender<WorkerEvent<P::Report>>) -> Self {
        self.events = events;
        self
    }

    /// A subscription to the loop's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent<P::Report>> {
        self.events.subscribe()
    }

    /// Runs the loop on a new task; [`WorkerHandle::shutdown`] stops it.
    pub fn spawn(self, shutdown: CancellationToken) -> WorkerHandle {
        let task = tokio::spawn(self.run(shutdown.clone()));
        WorkerHandle { shutdown, task: Some(task) }
    }

    /// Runs passes until `shutdown` is cancelled, then releases leadership and returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let kind = self.kind;
        let leadership = self.leadership.describe();
        with_target!(kind, TARGET => tracing::info!(target: TARGET, worker = %kind, %leadership, "worker started"));
        let mut guard: Option<Box<dyn LockGuard>> = None;
        let mut consecutive_failures: u32 = 0;
        let mut number: u64 = 0;
        while !shutdown.is_cancelled() {
            number += 1;
            if let Some(wake) = &self.wake {
                // A wake-up that arrived before this pass is served by it; one that arrives
                // while it runs is kept and starts the next pass early.
                let _ = wake.notified().now_or_never();
            }
            let _ = self.events.send(WorkerEvent::PassStarted { number });
            let span = with_target!(kind, TARGET => tracing::info_span!(target: TARGET, "pass", worker = %kind,
                number, outcome = tracing::field::Empty, report = tracing::field::Empty,
                duration_ms = tracing::field::Empty));
            let started = Instant::now();
            let result = self.turn(&mut guard, &shutdown).instrument(span.clone()).await;
            let duration = started.elapsed();
            span.record("duration_ms", u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
            let wait = match result {
                Ok(outcome) => {
                    consecutive_failures = 0;
                    match &outcome {
                        PassOutcome::Led(report) => {
                            span.record("outcome", "led");
                            span.record("report", tracing::field::display(report));
                        }
                        PassOutcome::NotLeader => {
                            span.record("outcome", "not leader");
                        }
                    }
                    let again =
                        matches!(&outcome, PassOutcome::Led(report) if self.pass.again_at_once(report));
                    let _ = self.events.send(WorkerEvent::PassSucceeded { outcome, duration });
                    if again {
                        // More work is waiting: go on at once (shutdown still checked first).
                        tokio::task::yield_now().await;
                        continue;
                    }
                    self.backoff.wait_after(0)
                }
                Err(failure) => {
                    consecutive_failures = consecutive_failures.saturating_add(1);
                    let next_wait = self.backoff.wait_after(consecutive_failures);
                    span.record("outcome", failure.what);
                    // Any error may mean the lock's session is gone: never keep leading on doubt.
                    release(kind, guard.take()).await;
                    // One rule for every worker: a failed pass is retried, so WARN (a lost
                    // connection included); a panic is a bug, so ERROR.
                    span.in_scope(|| {
                        if failure.what == PANICKED {
                            with_target!(kind, TARGET => tracing::error!(target: TARGET, worker = %kind,
                                consecutive = consecutive_failures, next_wait = ?next_wait, cause = %failure.chain,
                                "pass {}; retrying after backoff", failure.what));
                        } else {
                            with_target!(kind, TARGET => tracing::warn!(target: TARGET, worker = %kind,
                                consecutive = consecutive_failures, next_wait = ?next_wait, cause = %failure.chain,
                                "pass {}; retrying after backoff", failure.what));
                        }
                    });
                    let _ = self.events.send(WorkerEvent::PassFailed {
                        consecutive: consecutive_failures,
                        next_wait,
                        duration,
                    });
                    next_wait
                }
            };
            let wake = self.wake.as_deref().filter(|_| consecutive_failures == 0 || self.wake_during_backoff);
            let was_woken = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => false,
                () = woken(wake) => true,
            };
            if was_woken && !self.linger.is_zero() {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(self.linger) => {}
                }
            }
        }
        release(kind, guard.take()).await;
        self.pass.stopped().await;
        with_target!(kind, TARGET => tracing::info!(target: TARGET, worker = %kind, passes = number, "worker stopped"));
        let _ = self.events.send(WorkerEvent::Stopped);
    }

    /// One turn: make sure of leadership when the loop holds it, then run the pass with
    /// panics caught.
    async fn turn(
        &self,
        guard: &mut Option<Box<dyn LockGuard>>,
        shutdown: &CancellationToken,
    ) -> Result<PassOutcome<P::Report>, Failure> {
        if let Leadership::Advisory(lock, resource) = &self.leadership {
            if let Some(held) = guard.as_mut() {
                if let Err(error) = held.ensure_held().await {
                    // Leadership is lost or unknown; the caller drops the guard.
                    return Err(Failure {
                        what: "lost its advisory lock",
                        chain: relayer_core::error_chain(&error),
                    });
                }
            } else {
                match lock.try_lock(resource).await {
                    Ok(Some(taken)) => *guard = Some(taken),
                    Ok(None) => return Ok(PassOutcome::NotLeader),
                    Err(error) => {
                        return Err(Failure {
                            what: "could not take its advisory lock",
                            chain: relayer_core::error_chain(&error),
                        });
                    }
                }
            }
        }
        match catch_panic(self.pass.run_pass(shutdown)).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(error)) => Err(Failure { what: "failed", chain: relayer_core::error_chain(&error) }),
            Err(panic) => Err(Failure { what: PANICKED, chain: panic }),
        }
    }
}

/// Stops a spawned [`PassLoop`].
#[derive(Debug)]
pub struct WorkerHandle {
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Cancels the loop's token and waits until it has stopped: a pass in flight finishes
    /// (or stops at its own safe point) and leadership is released. Harmless to call twice.
    pub async fn shutdown(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            tracing::error!(target: "relayer::worker", %error, "worker task ended abnormally");
        }
    }

    /// Whether the loop has stopped.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

async fn release(kind: WorkerKind, guard: Option<Box<dyn LockGuard>>) {
    let Some(guard) = guard else { return };
    let resource = guard.resource().to_owned();
    if let Err(error) = guard.release().await {
        // The lock goes with its session anyway; nothing else to do.
        with_target!(kind, TARGET => tracing::debug!(target: TARGET, worker = %kind, %resource,
            cause = %relayer_core::error_chain(&error), "releasing the advisory lock failed"));
    }
}

async fn woken(wake: Option<&Notify>) {
    match wake {
        Some(notify) => notify.notified().await,
        None => std::future::pending().await,
    }
}
