//! The cleanup worker: options → [`Cleanup::new`] → [`Cleanup::run`] → one pass per
//! interval, each [`Cleanup::run_once`] on one pooled connection.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::store::{DeleteExpired, HoldLease, UnderLease};
use relayer_core::{CleanupOptions, Namespace, RetentionTable};
use relayer_postgres::retention::RetentionStatements;
use relayer_postgres::{LeaseStatements, PgClient, PgPool, PgStore, Prepared, StorageError, verify_schema};
use relayer_worker::{Leadership, Pass, PassLoop, PassOutcome, WorkerEvent, WorkerKind};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The lease job of retention cleanup: one cleaner per namespace, independent of the
/// sweeper's lease (SWP-1, RET-4).
pub const LEASE_JOB: &str = "cleanup";

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

/// How often a batch is tried again when a contender's probe holds the lease row at that
/// instant (a probe lasts a round trip), and how long it waits before each retry.
const BUSY_RETRIES: u32 = 5;
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// The retention cleanup worker of one namespace (§8).
pub struct Cleanup {
    pass: Arc<CleanupPass>,
    events: broadcast::Sender<WorkerEvent<CleanupReport>>,
}

/// What one cleanup pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CleanupReport {
    /// Whether this instance led the pass; `false`: another instance holds the lease and
    /// nothing was done.
    pub led: bool,
    /// The lease term the pass was fenced by (lease leadership only).
    pub term: Option<i64>,
    /// Dead rows deleted.
    pub dead_deleted: u64,
    /// Inbox rows deleted.
    pub inbox_deleted: u64,
    /// Delete statements run.
    pub batches: u32,
    /// The pass stopped before the backlog was gone: its time budget was spent or the host
    /// is shutting down. The next pass carries on.
    pub stopped_early: bool,
    /// The lease was no longer this instance's at a batch (it lapsed while the process
    /// stalled, and another instance took it over): that batch deleted nothing and the
    /// pass ended there (LDR-6).
    pub lease_lost: bool,
}

impl CleanupReport {
    /// Rows deleted from `table` (always 0 for the outbox).
    pub fn deleted(&self, table: RetentionTable) -> u64 {
        match table {
            RetentionTable::Outbox => 0,
            RetentionTable::Dead => self.dead_deleted,
            RetentionTable::Inbox => self.inbox_deleted,
        }
    }
}

impl fmt::Display for CleanupReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dead_deleted={} inbox_deleted={} batches={}",
            self.dead_deleted, self.inbox_deleted, self.batches
        )?;
        if self.stopped_early {
            f.write_str(" stopped_early")?;
        }
        if self.lease_lost {
            f.write_str(" lease_lost")?;
        }
        Ok(())
    }
}

/// Why a cleanup pass failed. A running cleaner logs it and retries with backoff (RES-1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CleanupError {
    /// The namespace's schema is missing or too old (NS-3): the worker's first pass checks
    /// it, and retries with backoff until it is there (OPT-5 refuses it at the host's start).
    #[error("retention cleanup cannot work on this namespace: {0}")]
    Schema(StorageError),
    /// A statement failed or the connection broke.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No pooled connection could be had.
    #[error("retention cleanup could not get a pooled connection")]
    Pool(#[source] bb8::RunError<tokio_postgres::Error>),
    /// Beginning or committing the lease transaction failed.
    #[error("retention cleanup: {0} failed")]
    Transaction(&'static str, #[source] tokio_postgres::Error),
}

impl Cleanup {
    /// A cleaner for `namespace`, borrowing one connection of `pool` per pass. With
    /// [`Leadership::Lease`], use the job [`LEASE_JOB`] and the options' `lease_duration`.
    pub fn new(pool: PgPool, namespace: Namespace, options: CleanupOptions, leadership: Leadership) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let pass = CleanupPass {
            retention: RetentionStatements::new(&namespace),
            leases: LeaseStatements::new(&namespace),
            pool,
            namespace,
            options,
            leadership,
            schema_verified: AtomicBool::new(false),
        };
        Cleanup { pass: Arc::new(pass), events }
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

    /// Runs one pass on `client`: takes or renews the lease (lease leadership;
    /// [`CleanupReport::led`] is `false` when another instance holds it), then deletes
    /// expired rows in short batches until the backlog is gone or the pass budget is spent,
    /// each batch locking, checking and renewing the lease (see the [crate docs](crate)).
    /// With [`Leadership::Advisory`] the caller must hold the lock (as [`run`](Self::run)
    /// does). The schema is not checked here: a missing table is a storage error.
    pub async fn run_once(&self, client: &mut PgClient) -> Result<CleanupReport, CleanupError> {
        self.pass.clean(client, &CancellationToken::new()).await
    }
}

impl fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cleanup")
            .field("namespace", &self.pass.namespace)
            .field("options", &self.pass.options)
            .field("leadership", &self.pass.leadership)
            .finish_non_exhaustive()
    }
}

struct CleanupPass {
    pool: PgPool,
    namespace: Namespace,
    options: CleanupOptions,
    leadership: Leadership,
    retention: RetentionStatements,
    leases: LeaseStatements,
    /// Set once the loop's schema check passed; a failed check is a failed pass, retried.
    schema_verified: AtomicBool,
}

impl CleanupPass {
    async fn clean(
        &self,
        client: &mut PgClient,
        shutdown: &CancellationToken,
    ) -> Result<CleanupReport, CleanupError> {
        let mut report = CleanupReport::default();
        let lease = match &self.leadership {
            Leadership::Lease { job, owner, lease_duration } => {
                // A short transaction that takes the lease (or finds another leader); the
                // batches that follow are their own short transactions, each locking,
                // checking and renewing the lease itself (LDR-2, LDR-6).
                let (connection, statements) = client.split();
                let tx = connection
                    .transaction()
                    .await
                    .map_err(|e| CleanupError::Transaction("beginning the lease transaction", e))?;
                let lease = PgStore::new(&Prepared::new(&tx, statements), &self.leases)
                    .acquire(job, owner, *lease_duration)
                    .await?;
                tx.commit().await.map_err(|e| CleanupError::Transaction("committing the lease", e))?;
                match lease {
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
        let retention_store = PgStore::new(&*client, &self.retention);
        let mut busy = 0;
        'tables: for table in RetentionTable::ALL {
            // RET-1, RET-3: the outbox, and any table kept `infinite`, has no retention.
            let Some(retention) = self.options.retention(table).duration() else { continue };
            loop {
                if shutdown.is_cancelled() || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    report.stopped_early = true;
                    break 'tables;
                }
                let batch = retention_store.delete_expired(table, retention, batch_size, under_lease).await?;
                report.batches = report.batches.saturating_add(1);
                let Some(deleted) = batch else {
                    // Not held: lost, or its row locked by a contender's probe at that instant.
                    let Some(lease) = &lease else { break 'tables };
                    if !self.leases.holds(&*client, lease).await? {
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
impl Pass for CleanupPass {
    type Report = CleanupReport;
    type Error = CleanupError;

    async fn run_pass(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<PassOutcome<CleanupReport>, CleanupError> {
        // One connection for the whole pass, and no second one while holding it (LIF-2).
        let mut conn = self.pool.get().await.map_err(CleanupError::Pool)?;
        if !self.schema_verified.load(Ordering::Acquire) {
            verify_schema(&**conn, &self.namespace).await.map_err(CleanupError::Schema)?;
            self.schema_verified.store(true, Ordering::Release);
        }
        let report = self.clean(&mut conn, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        self.leases.release_at_shutdown(&self.pool, job, owner).await;
    }
}
