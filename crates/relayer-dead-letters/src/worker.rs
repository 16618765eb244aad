//! The policy worker: options → [`DeadLetterWorker::new`] → [`DeadLetterWorker::run`] → one
//! pass per interval, each [`DeadLetterWorker::run_once`] on one store session.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{HoldLease, Lease, MoveDeadLetters, VerifySchema};
use relayer_core::{DeadLetterAction, DeadLetterOptions, DeadLetterPolicies, DeadLetterRule, Namespace};
use relayer_worker::{
    Leadership, Pass, PassLoop, PassOutcome, WorkerError, WorkerEvent, WorkerKind, release_lease_at_shutdown,
    roll_back_failed_pass,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::report::{DeadLetterReport, TypeReport};

/// The lease job of the policy pass, when it is led by a lease instead of an advisory lock.
pub const LEASE_JOB: &str = "dead_letters";

const TARGET: &str = "relayer::dead_letter";

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

/// The longest a failed batch transaction waits for its rollback (a round trip) before it
/// leaves it to the session, whose drop discards the connection.
const ROLLBACK_PATIENCE: Duration = Duration::from_secs(5);

/// The advisory-lock resource of the policy pass of `namespace` (LDR-5): one leader per
/// namespace, whatever its policy set.
pub fn lock_resource(namespace: &Namespace) -> String {
    format!("{LEASE_JOB}:{}.{}", namespace.schema(), namespace.prefix())
}

/// Everything a policy pass does to the store: the worker's bounds, named once.
pub(crate) trait PolicySession: Session + VerifySchema + MoveDeadLetters + HoldLease {}

impl<T> PolicySession for T where T: Session + VerifySchema + MoveDeadLetters + HoldLease {}

/// The dead-letter policy worker of one namespace and one policy set (§11).
///
/// It reaches its store only through `S`, a [`StoreSource`] whose sessions redrive,
/// expire and count dead letters ([`MoveDeadLetters`]), take and renew a lease
/// ([`HoldLease`]) and check the schema ([`VerifySchema`]). relayer's is
/// `relayer_postgres::PgSource`.
pub struct DeadLetterWorker<S> {
    pass: Arc<PolicyPass<S>>,
    events: broadcast::Sender<WorkerEvent<DeadLetterReport>>,
}

impl<S> DeadLetterWorker<S>
where
    S: StoreSource,
    S::Session: VerifySchema + MoveDeadLetters + HoldLease,
{
    /// A worker applying `policies` to `namespace`, opening one session of `source` per
    /// pass (`source` must work on `namespace`, which the worker's logs name). Lead it with
    /// [`Leadership::Advisory`] on [`lock_resource`] (the default, LDR-5), or a lease on
    /// [`LEASE_JOB`] for `options.lease_hold()` (it then covers the wait between passes,
    /// LDR-2). Every statement is safe for replicas
    /// running side by side (DLP-3); leadership only spares them the work.
    pub fn new(
        source: S,
        namespace: Namespace,
        policies: DeadLetterPolicies,
        options: DeadLetterOptions,
        leadership: Leadership,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let pass = PolicyPass {
            source,
            namespace,
            policies,
            options,
            leadership,
            schema_verified: AtomicBool::new(false),
        };
        DeadLetterWorker { pass: Arc::new(pass), events }
    }

    /// The options this worker runs with (immutable, OPT-4).
    pub fn options(&self) -> &DeadLetterOptions {
        &self.pass.options
    }

    /// The source the worker opens its sessions from (for [`run_once`](Self::run_once)).
    pub fn source(&self) -> &S {
        &self.pass.source
    }

    /// The policies this worker applies.
    pub fn policies(&self) -> &DeadLetterPolicies {
        &self.pass.policies
    }

    /// A subscription to the worker's events (pass started, succeeded with its report,
    /// failed, stopped), for tests and health checks.
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent<DeadLetterReport>> {
        self.events.subscribe()
    }

    /// Runs a pass at once and one every `interval` until `shutdown` is cancelled; failed
    /// passes are logged and retried with backoff (RES-1, RES-2). On shutdown the lease or
    /// lock is released.
    ///
    /// The first pass begins by checking the namespace's schema; a missing or old schema and
    /// an unreachable database are failed passes like any other, retried with backoff until
    /// they are fixed, so a database that is down or being migrated when the worker starts
    /// never ends it (RES-4), as with the sweeper and cleanup (refusing a missing schema up
    /// front is the host's `start`, OPT-5).
    pub async fn run(self, shutdown: CancellationToken) {
        let pass = self.pass;
        let backoff = pass.options.pass_backoff();
        let leadership = pass.leadership.clone();
        PassLoop::with_shared_pass(WorkerKind::DeadLetter, pass, backoff, leadership)
            .events_to(self.events)
            .run(shutdown)
            .await;
    }

    /// Runs one pass on `session`: takes or renews the lease in a short transaction of its
    /// own (lease leadership), applies every policy until its type's due dead letters are
    /// moved, counts the stuck ones, and renews the lease. Under a lease each batch is a
    /// transaction that first locks the lease row and checks it is still this holder's, at
    /// the same term (LDR-6): a deposed leader's batch moves nothing, and its pass stops
    /// ([`DeadLetterReport::fenced_off`]). With [`Leadership::Advisory`] the caller must hold
    /// the lock (as [`run`](Self::run) does). The schema is not checked here.
    pub async fn run_once(&self, session: &mut S::Session) -> Result<DeadLetterReport, WorkerError> {
        self.pass.apply(session, &CancellationToken::new()).await
    }
}

impl<S> fmt::Debug for DeadLetterWorker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetterWorker")
            .field("namespace", &self.pass.namespace)
            .field("policies", &self.pass.policies)
            .field("options", &self.pass.options)
            .field("leadership", &self.pass.leadership)
            .finish_non_exhaustive()
    }
}

struct PolicyPass<S> {
    source: S,
    namespace: Namespace,
    policies: DeadLetterPolicies,
    options: DeadLetterOptions,
    leadership: Leadership,
    /// Set once the loop's schema check passed; a failed check is a failed pass, retried.
    schema_verified: AtomicBool,
}

impl<S> PolicyPass<S>
where
    S: StoreSource,
    S::Session: PolicySession,
{
    async fn apply(
        &self,
        session: &mut S::Session,
        shutdown: &CancellationToken,
    ) -> Result<DeadLetterReport, WorkerError> {
        let mut report = DeadLetterReport::default();
        let lease = match &self.leadership {
            Leadership::Lease { job, owner, lease_duration } => {
                match self.acquire(session, job, owner, *lease_duration).await? {
                    Some(lease) => Some(lease),
                    None => return Ok(report),
                }
            }
            // The loop holds the advisory lock; without a leader the statements alone keep
            // replicas apart (SKIP LOCKED, one-statement moves).
            Leadership::Advisory(..) | Leadership::EveryInstance => None,
        };
        report.led = true;
        // Without a lease each statement commits on its own: a move is one statement
        // (DLP-3). Under a lease each batch is fenced by the lease's owner and term (LDR-6).
        for rule in self.policies.rules() {
            if shutdown.is_cancelled() {
                report.stopped_early = true;
                break;
            }
            let applied = self.apply_rule(session, rule, lease.as_ref(), shutdown, &mut report).await?;
            if applied.stuck > 0 {
                tracing::error!(target: TARGET, namespace = %self.namespace, message_type = %applied.message_type,
                    stuck = applied.stuck, policy = %rule.policy(),
                    "dead letters past their redrive window are left in place (DLP-5)");
            }
            report.stopped_early |= shutdown.is_cancelled();
            report.add(applied);
            if report.fenced_off {
                break;
            }
        }
        if let Some(lease) = lease.as_ref().filter(|_| !report.fenced_off) {
            self.renew(&*session, lease).await?;
        }
        if report.redriven > 0 || report.expired > 0 {
            tracing::info!(target: TARGET, namespace = %self.namespace, redriven = report.redriven,
                expired = report.expired, batches = report.batches, "applied dead-letter policies");
        }
        Ok(report)
    }

    /// Takes or renews the lease in a short transaction of its own, committed before the
    /// moves: each move is its own transaction, made safe by being one statement (DLP-3)
    /// rather than by the lease row's lock. `None`: another owner leads; skip this turn.
    /// A failure leaves the session inside the transaction, and a session dropped there
    /// discards its connection.
    async fn acquire(
        &self,
        session: &mut S::Session,
        job: &str,
        owner: &str,
        lease_duration: std::time::Duration,
    ) -> Result<Option<Lease>, WorkerError> {
        session.begin().await.map_err(|e| WorkerError::store("beginning the lease transaction", e))?;
        let lease = session
            .acquire(job, owner, lease_duration)
            .await
            .map_err(|e| WorkerError::store("taking the dead-letter lease", e))?;
        session.commit().await.map_err(|e| WorkerError::store("committing the lease transaction", e))?;
        Ok(lease)
    }

    /// Moves or deletes `rule`'s due dead letters a batch at a time until a batch comes back
    /// short, then counts the stuck ones. Under `lease`, a batch that finds the lease no
    /// longer this holder's sets [`DeadLetterReport::fenced_off`] and ends the rule.
    async fn apply_rule(
        &self,
        session: &mut S::Session,
        rule: &DeadLetterRule,
        lease: Option<&Lease>,
        shutdown: &CancellationToken,
        pass: &mut DeadLetterReport,
    ) -> Result<TypeReport, WorkerError> {
        let mut report = TypeReport::new(rule.message_type().clone());
        let limit = self.options.batch_size();
        loop {
            let moved = match lease {
                None => self.move_batch(&*session, rule, limit).await?,
                Some(lease) => match self.fenced_batch(session, rule, lease, limit).await? {
                    Some(moved) => moved,
                    None => {
                        pass.fenced_off = true;
                        tracing::warn!(target: TARGET, namespace = %self.namespace, job = %lease.job,
                            term = lease.term, "the dead-letter lease is no longer this pass's (taken over, \
                            lapsed, or busy at that instant): the pass stops, its batch moved nothing");
                        return Ok(report);
                    }
                },
            };
            pass.batches = pass.batches.saturating_add(1);
            match rule.policy().action() {
                DeadLetterAction::Redrive { .. } => report.redriven += moved,
                DeadLetterAction::Expire { .. } => report.expired += moved,
            }
            if moved < u64::from(limit) || shutdown.is_cancelled() {
                break;
            }
        }
        if let DeadLetterAction::Redrive { after, give_up_after } = rule.policy().action() {
            report.stuck = session
                .count_stuck_dead_letters(rule.message_type(), after, give_up_after)
                .await
                .map_err(|e| WorkerError::store("counting stuck dead letters", e))?;
        }
        Ok(report)
    }

    /// One move or delete statement of `rule`, at most `limit` dead letters.
    async fn move_batch(
        &self,
        store: &S::Session,
        rule: &DeadLetterRule,
        limit: u32,
    ) -> Result<u64, WorkerError> {
        let message_type = rule.message_type();
        match rule.policy().action() {
            DeadLetterAction::Redrive { after, give_up_after } => store
                .redrive_dead_letters(message_type, after, give_up_after, limit)
                .await
                .map_err(|e| WorkerError::store("redriving dead letters", e)),
            DeadLetterAction::Expire { after } => store
                .expire_dead_letters(message_type, after, limit)
                .await
                .map_err(|e| WorkerError::store("expiring dead letters", e)),
        }
    }

    /// One batch fenced by `lease` (LDR-6): a transaction that locks the lease row, goes on
    /// only while it is still this holder's at the same term (renewing it), moves the batch
    /// and commits. `None`: the lease is not this holder's any more (or a contender held its
    /// row at that instant); the transaction was rolled back and nothing moved.
    async fn fenced_batch(
        &self,
        session: &mut S::Session,
        rule: &DeadLetterRule,
        lease: &Lease,
        limit: u32,
    ) -> Result<Option<u64>, WorkerError> {
        session.begin().await.map_err(|e| WorkerError::store("beginning a fenced batch", e))?;
        let duration = match &self.leadership {
            Leadership::Lease { lease_duration, .. } => *lease_duration,
            Leadership::Advisory(..) | Leadership::EveryInstance => self.options.lease_duration(),
        };
        let held = match session.acquire(&lease.job, &lease.owner, duration).await {
            Ok(held) => held,
            Err(error) => {
                roll_back_failed_pass(session, ROLLBACK_PATIENCE).await;
                return Err(WorkerError::store("locking the dead-letter lease for a batch", error));
            }
        };
        // A different term means the lease changed hands since this pass took it (even if
        // it came back to this owner): this pass's leadership is over.
        if held.is_none_or(|held| held.term != lease.term) {
            roll_back_failed_pass(session, ROLLBACK_PATIENCE).await;
            return Ok(None);
        }
        let moved = match self.move_batch(&*session, rule, limit).await {
            Ok(moved) => moved,
            Err(error) => {
                roll_back_failed_pass(session, ROLLBACK_PATIENCE).await;
                return Err(error);
            }
        };
        session.commit().await.map_err(|e| WorkerError::store("committing a fenced batch", e))?;
        Ok(Some(moved))
    }

    /// Expiry restarts when the pass completes (LDR-2). A renewal that finds the lease
    /// taken only means another instance leads from now on: the moves made are sound.
    async fn renew(&self, store: &S::Session, lease: &Lease) -> Result<(), WorkerError> {
        let duration = match &self.leadership {
            Leadership::Lease { lease_duration, .. } => *lease_duration,
            Leadership::Advisory(..) | Leadership::EveryInstance => self.options.lease_hold(),
        };
        let renewed = store
            .renew(lease, duration)
            .await
            .map_err(|e| WorkerError::store("renewing the dead-letter lease", e))?;
        if renewed.is_none() {
            tracing::debug!(target: TARGET, namespace = %self.namespace, job = %lease.job,
                "the lease was not renewed (busy or taken over); the next pass settles it");
        }
        Ok(())
    }
}

#[async_trait]
impl<S> Pass for PolicyPass<S>
where
    S: StoreSource,
    S::Session: PolicySession,
{
    type Report = DeadLetterReport;
    type Error = WorkerError;

    async fn run_pass(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<PassOutcome<DeadLetterReport>, WorkerError> {
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
        let report = self.apply(&mut session, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        release_lease_at_shutdown(&self.source, &self.namespace, job, owner).await;
    }
}
