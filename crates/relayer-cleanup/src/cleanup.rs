//! The cleanup worker: options → [`Cleanup::new`] → [`Cleanup::run`] → one pass per
//! interval, each [`Cleanup::run_once`] on one pooled connection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::store::{DeleteExpired, HoldLease, Lease};
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
    /// The lease could not be renewed at the end: another instance took over during the
    /// pass (its later batches were fenced off).
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

/// Why cleanup could not start, or why a pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CleanupError {
    /// The namespace's schema is missing or too old: nothing was started (NS-3, OPT-5).
    #[error("retention cleanup cannot start: {0}")]
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

    /// Checks the schema, then runs a pass at once and one every `cleanup_interval` until
    /// `shutdown` is cancelled; failed passes are logged and retried with backoff (RES-1,
    /// RES-2). On shutdown the lease is released so another instance takes over at once.
    ///
    /// Returns an error only when it cannot start: the schema is missing or too old, or no
    /// connection can be had to check it.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), CleanupError> {
        let pass = self.pass;
        {
            let conn = pass.pool.get().await.map_err(CleanupError::Pool)?;
            verify_schema(&**conn, &pass.namespace).await.map_err(CleanupError::Schema)?;
        }
        let backoff = pass.options.pass_backoff();
        let leadership = pass.leadership.clone();
        PassLoop::with_shared_pass(WorkerKind::Cleanup, pass, backoff, leadership)
            .events_to(self.events)
            .run(shutdown)
            .await;
        Ok(())
    }

    /// Runs one pass on `client`: takes or renews the lease (lease leadership), deletes
    /// expired rows until the backlog is gone or the pass budget is spent, and renews the
    /// lease. With [`Leadership::Advisory`] the caller must hold the lock (as [`run`](Self::run)
    /// does).
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
                // A short transaction: the batches that follow are their own transactions,
                // kept safe by the lease fence rather than by this row lock.
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
        // Outside any transaction: each batch commits on its own, fenced by the lease.
        let retention_store = PgStore::new(&*client, &self.retention);
        'tables: for table in RetentionTable::ALL {
            // RET-1, RET-3: the outbox, and any table kept `infinite`, has no retention.
            let Some(retention) = self.options.retention(table).duration() else { continue };
            loop {
                if shutdown.is_cancelled() || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    report.stopped_early = true;
                    break 'tables;
                }
                let deleted = self.delete_batch(&retention_store, table, retention, lease.as_ref()).await?;
                report.batches = report.batches.saturating_add(1);
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

        if let (Some(lease), Leadership::Lease { lease_duration, .. }) = (&lease, &self.leadership) {
            // Expiry restarts when the pass completes (LDR-2).
            if PgStore::new(&*client, &self.leases).renew(lease, *lease_duration).await?.is_none() {
                // Not renewed: either another instance took the lease, or a contender was
                // probing the row at that instant (the renewal skips a locked row rather than
                // wait). Only a changed owner or term is a loss.
                let current = self.leases.current(&*client, &lease.job).await?;
                if current.is_some_and(|now| now.owner == lease.owner && now.term == lease.term) {
                    tracing::debug!(target: "relayer::cleanup", namespace = %self.namespace, job = %lease.job,
                        "the lease row was busy; its renewal waits for the next pass");
                } else {
                    report.lease_lost = true;
                    tracing::warn!(target: "relayer::cleanup", namespace = %self.namespace, job = %lease.job,
                        term = lease.term, "the cleanup lease was lost during the pass; another instance leads");
                }
            }
        }
        if report.dead_deleted > 0 || report.inbox_deleted > 0 {
            tracing::info!(target: "relayer::cleanup", namespace = %self.namespace, dead = report.dead_deleted,
                inbox = report.inbox_deleted, batches = report.batches, "deleted expired rows");
        }
        Ok(report)
    }

    /// One short transaction deleting at most `batch_size` expired rows of `table`, fenced
    /// by `lease` when leadership is a lease. Cleanup needs nothing else of the store.
    async fn delete_batch<S: DeleteExpired>(
        &self,
        store: &S,
        table: RetentionTable,
        retention: Duration,
        lease: Option<&Lease>,
    ) -> Result<u64, S::Error> {
        store.delete_expired(table, retention, self.options.batch_size(), lease).await
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
        let report = self.clean(&mut conn, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        self.leases.release_at_shutdown(&self.pool, job, owner).await;
    }
}
