//! The cleanup worker: options → [`Cleanup::new`] → [`Cleanup::run`] → one pass per
//! interval, each [`Cleanup::run_once`] on one store session.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{CheckLease, DeleteExpired, HoldLease, Lease, UnderLease, VerifySchema};
use relayer_core::{CleanupOptions, Namespace, RetentionTable};
use relayer_worker::{
    Leadership, Pass, PassLoop, PassOutcome, WorkerError, WorkerEvent, WorkerKind, release_lease_at_shutdown,
    roll_back_failed_pass,
};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::report::CleanupReport;

/// The lease job of retention cleanup: one cleaner per namespace, independent of the
/// sweeper's lease (SWP-1, RET-4).
pub const LEASE_JOB: &str = "cleanup";

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

/// How often a batch is tried again when a contender's probe holds the lease row at that
/// instant (a probe lasts a round trip), and how long it waits before each retry.
const BUSY_RETRIES: u32 = 5;
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// The longest a failed lease transaction waits for its rollback (a round trip) before it
/// leaves it to the session, whose drop discards the connection.
const ROLLBACK_PATIENCE: Duration = Duration::from_secs(5);

/// The retention cleanup worker of one namespace (§8).
///
/// It reaches its store only through `S`, a [`StoreSource`] whose sessions can delete
/// expired rows in leased batches ([`DeleteExpired`]), take and release a lease
/// ([`HoldLease`]), tell a lost lease from a busy one ([`CheckLease`]) and check the
/// schema ([`VerifySchema`]). relayer's is `relayer_postgres::PgSource`.
pub struct Cleanup<S> {
    pass: Arc<CleanupPass<S>>,
    events: broadcast::Sender<WorkerEvent<CleanupReport>>,
}

/// Everything a cleanup pass does to the store: the worker's bounds, named once for the
/// crate's own items.
trait CleanupSession: Session + VerifySchema + DeleteExpired + HoldLease + CheckLease {}

impl<T> CleanupSession for T where T: Session + VerifySchema + DeleteExpired + HoldLease + CheckLease {}

impl<S> Cleanup<S>
where
    S: StoreSource,
    S::Session: VerifySchema + DeleteExpired + HoldLease + CheckLease,
{
    /// A cleaner for `namespace`, opening one session of `source` (which must work on
    /// `namespace`, named in the worker's logs) per pass. With [`Leadership::Lease`], use
    /// the job [`LEASE_JOB`] and the options' `lease_duration`.
    pub fn new(source: S, namespace: Namespace, options: CleanupOptions, leadership: Leadership) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let pass =
            CleanupPass { source, namespace, options, leadership, schema_verified: AtomicBool::new(false) };
        Cleanup { pass: Arc::new(pass), events }
    }

    /// The source the cleaner opens its sessions from (for [`run_once`](Self::run_once)).
    pub fn source(&self) -> &S {
        &self.pass.source
    }

    /// The options this cleaner runs with (immutable, OPT-4).
    pub fn options(&self) -> &CleanupOptions {
        &self.pass.options
    }

    /// A subscription to the worker's events (pass started, succeeded with its report,
    /// failed, stopped), for tests and health checks.
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent<CleanupReport>> {
        self.events.subscribe()
    }

    /// Runs a pass at once and one every `cleanup_interval` until `shutdown` is cancelled;
    /// failed passes are logged and retried with backoff (RES-1, RES-2). On shutdown the
    /// lease is released so another instance takes over at once.
    ///
    /// The first pass begins by checking the namespace's schema; a missing or old schema
    /// and an unreachable database are failed passes like any other, retried with backoff
    /// until they are fixed, so a database that is down or being migrated when the worker
    /// starts never ends it (refusing a missing schema up front is the host's `start`,
    /// OPT-5).
    pub async fn run(self, shutdown: CancellationToken) {
        let pass = self.pass;
        let backoff = pass.options.pass_backoff();
        let leadership = pass.leadership.clone();
        PassLoop::with_shared_pass(WorkerKind::Cleanup, pass, backoff, leadership)
            .events_to(self.events)
            .run(shutdown)
            .await;
    }

    /// Runs one pass on `session`: takes or renews the lease (lease leadership;
    /// [`CleanupReport::led`] is `false` when another instance holds it), then deletes
    /// expired rows in short batches until the backlog is gone or the pass budget is spent,
    /// each batch locking, checking and renewing the lease (see the [crate docs](crate)).
    /// With [`Leadership::Advisory`] the caller must hold the lock (as [`run`](Self::run)
    /// does). The schema is not checked here: a missing table is a store error.
    pub async fn run_once(&self, session: &mut S::Session) -> Result<CleanupReport, WorkerError> {
        self.pass.clean(session, &CancellationToken::new()).await
    }
}

impl<S> fmt::Debug for Cleanup<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cleanup")
            .field("namespace", &self.pass.namespace)
            .field("options", &self.pass.options)
            .field("leadership", &self.pass.leadership)
            .finish_non_exhaustive()
    }
}

struct CleanupPass<S> {
    source: S,
    namespace: Namespace,
    options: CleanupOptions,
    leadership: Leadership,
    /// Set once the loop's schema check passed; a failed check is a failed pass, retried.
    schema_verified: AtomicBool,
}

impl<S> CleanupPass<S>
where
    S: StoreSource,
    S::Session: CleanupSession,
{
    /// Takes or renews the lease in a short transaction of its own (or finds another
    /// leader: `None`).
    async fn take_lease(
        &self,
        session: &mut S::Session,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, WorkerError> {
        session.begin().await.map_err(|e| WorkerError::store("beginning the lease transaction", e))?;
        let lease = match session.acquire(job, owner, lease_duration).await {
            Ok(lease) => lease,
            Err(error) => {
                roll_back_failed_pass(session, ROLLBACK_PATIENCE).await;
                return Err(WorkerError::store("taking the cleanup lease", error));
            }
        };
        if let Err(error) = session.commit().await {
            roll_back_failed_pass(session, ROLLBACK_PATIENCE).await;
            return Err(WorkerError::store("committing the cleanup lease", error));
        }
        Ok(lease)
    }

    async fn clean(
        &self,
        session: &mut S::Session,
        shutdown: &CancellationToken,
    ) -> Result<CleanupReport, WorkerError> {
        let mut report = CleanupReport::default();
        let lease = match &self.leadership {
            Leadership::Lease { job, owner, lease_duration } => {
                // A short transaction that takes the lease (or finds another leader); the
                // batches that follow are their own short transactions, each locking,
                // checking and renewing the lease itself (LDR-2, LDR-6).
                match self.take_lease(session, job, owner, *lease_duration).await? {
                    Some(lease) => Some(lease),
                    None => return Ok(report),
                }
            }
            // The loop holds the advisory lock; with every instance cleaning, SKIP LOCKED alone
            // keeps their batches apart.
            Leadership::Advisory(..) | Leadership::EveryInstance => None,
        };
        report.led = true;
        report.term = lease.as_ref().map(|lease| lease.term);

        // The budget is local elapsed time, never compared with a database timestamp (NS-4).
        let deadline = Instant::now().checked_add(self.options.pass_budget());
        let batch_size = self.options.batch_size();
        let under_lease = match (&lease, &self.leadership) {
            (Some(lease), Leadership::Lease { lease_duration, .. }) => {
                Some(UnderLease { lease, lease_duration: *lease_duration })
            }
            _ => None,
        };
        // Outside any transaction: each batch commits on its own; under a lease it locks the
        // lease row, is fenced by the term and renews the lease, so the lease is held while
        // a batch runs and live between batches, and the last batch's renewal ends the pass.
        let store: &S::Session = session;
        let mut busy = 0;
        'tables: for table in RetentionTable::ALL {
            // RET-1, RET-3: the outbox, and any table kept `infinite`, has no retention.
            let Some(retention) = self.options.retention(table).duration() else { continue };
            loop {
                if shutdown.is_cancelled() || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    report.stopped_early = true;
                    break 'tables;
                }
                let batch = store
                    .delete_expired(table, retention, batch_size, under_lease)
                    .await
                    .map_err(|e| WorkerError::store("deleting a batch of expired rows", e))?;
                report.batches = report.batches.saturating_add(1);
                let Some(deleted) = batch else {
                    // Not held: lost, or its row locked by a contender's probe at that instant.
                    let Some(lease) = &lease else { break 'tables };
                    let held = store
                        .holds(lease)
                        .await
                        .map_err(|e| WorkerError::store("checking the cleanup lease", e))?;
                    if !held {
                        report.lease_lost = true;
                        tracing::warn!(target: "relayer::cleanup", namespace = %self.namespace, job = %lease.job,
                            term = lease.term, "the cleanup lease was lost during the pass; another instance leads");
                        break 'tables;
                    }
                    busy += 1;
                    if busy > BUSY_RETRIES {
                        // The lease is still live; the next pass carries on.
                        report.stopped_early = true;
                        break 'tables;
                    }
                    tokio::time::sleep(BUSY_PAUSE).await;
                    continue;
                };
                busy = 0;
                match table {
                    RetentionTable::Dead => report.dead_deleted += deleted,
                    RetentionTable::Inbox => report.inbox_deleted += deleted,
                    RetentionTable::Outbox => {}
                }
                if deleted < u64::from(batch_size) {
                    break;
                }
            }
        }

        if report.dead_deleted > 0 || report.inbox_deleted > 0 {
            tracing::info!(target: "relayer::cleanup", namespace = %self.namespace, dead = report.dead_deleted,
                inbox = report.inbox_deleted, batches = report.batches, "deleted expired rows");
        }
        Ok(report)
    }
}

#[async_trait]
impl<S> Pass for CleanupPass<S>
where
    S: StoreSource,
    S::Session: CleanupSession,
{
    type Report = CleanupReport;
    type Error = WorkerError;

    async fn run_pass(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<PassOutcome<CleanupReport>, WorkerError> {
        // One session for the whole pass, and no second one while holding it (LIF-2).
        let mut session = self
            .source
            .open()
            .await
            .map_err(|e| WorkerError::store("opening the pass's store session", e))?;
        if !self.schema_verified.load(Ordering::Acquire) {
            session
                .verify_schema()
                .await
                .map_err(|e| WorkerError::store("checking the namespace's schema", e))?;
            self.schema_verified.store(true, Ordering::Release);
        }
        let report = self.clean(&mut session, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        release_lease_at_shutdown(&self.source, &self.namespace, job, owner).await;
    }
}
