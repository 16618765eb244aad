//! The policy worker: options → [`DeadLetterWorker::new`] → [`DeadLetterWorker::run`] → one
//! pass per interval, each [`DeadLetterWorker::run_once`] on one store session.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{HoldLease, Lease, MoveDeadLetters, VerifySchema};
use relayer_core::{DeadLetterAction, DeadLetterOptions, DeadLetterPolicies, DeadLetterRule, Namespace};
use relayer_worker::{
    Leadership, Pass, PassLoop, PassOutcome, WorkerError, WorkerEvent, WorkerKind, release_lease_at_shutdown,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::report::{DeadLetterReport, TypeReport};

/// The lease job of the policy pass, when it is led by a lease instead of an advisory lock.
pub const LEASE_JOB: &str = "dead_letters";

const TARGET: &str = "relayer::dead_letter";

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

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
    /// [`LEASE_JOB`] for `options.lease_duration()`. Every statement is safe for replicas
    /// running side by side (DLP-3); leadership only spares them the work.
    pub fn new(
        source: S,
        namespace: Namespace,
        policies: DeadLetterPolicies,
        options: DeadLetterOptions,
        leadership: Leadership,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let pass = PolicyPass { source, namespace, policies, options, leadership };
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

    /// Checks the schema, then runs a pass at once and one every `interval` until
    /// `shutdown` is cancelled; failed passes are logged and retried with backoff (RES-1,
    /// RES-2). On shutdown the lease or lock is released.
    ///
    /// Returns an error only when it cannot start: the schema is missing or too old, or no
    /// session can be opened to check it.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let pass = self.pass;
        {
            let session = pass
                .source
                .open()
                .await
                .map_err(|e| WorkerError::store("opening a store session to check the schema", e))?;
            session.verify_schema().await.map_err(|e| {
                WorkerError::store("dead-letter policies cannot start: checking the schema", e)
            })?;
        }
        let backoff = pass.options.pass_backoff();
        let leadership = pass.leadership.clone();
        PassLoop::with_shared_pass(WorkerKind::DeadLetter, pass, backoff, leadership)
            .events_to(self.events)
            .run(shutdown)
            .await;
        Ok(())
    }

    /// Runs one pass on `session`: takes or renews the lease in a short transaction of its
    /// own (lease leadership), applies every policy until its type's due dead letters are
    /// moved, counts the stuck ones, and renews the lease. With [`Leadership::Advisory`] the
    /// caller must hold the lock (as [`run`](Self::run) does).
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
        // Each statement commits on its own: a move is one statement (DLP-3).
        for rule in self.policies.rules() {
            if shutdown.is_cancelled() {
                report.stopped_early = true;
                break;
            }
            let applied = self.apply_rule(&*session, rule, shutdown, &mut report.batches).await?;
            if applied.stuck > 0 {
                tracing::error!(target: TARGET, namespace = %self.namespace, message_type = %applied.message_type,
                    stuck = applied.stuck, policy = %rule.policy(),
                    "dead letters past their redrive window are left in place (DLP-5)");
            }
            report.stopped_early |= shutdown.is_cancelled();
            report.add(applied);
        }
        if let Some(lease) = &lease {
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
    /// short, then counts the stuck ones.
    async fn apply_rule(
        &self,
        store: &S::Session,
        rule: &DeadLetterRule,
        shutdown: &CancellationToken,
        batches: &mut u32,
    ) -> Result<TypeReport, WorkerError> {
        let mut report = TypeReport::new(rule.message_type().clone());
        let limit = self.options.batch_size();
        let message_type = rule.message_type();
        loop {
            let moved = match rule.policy().action() {
                DeadLetterAction::Redrive { after, give_up_after } => store
                    .redrive_dead_letters(message_type, after, give_up_after, limit)
                    .await
                    .map_err(|e| WorkerError::store("redriving dead letters", e))?,
                DeadLetterAction::Expire { after } => store
                    .expire_dead_letters(message_type, after, limit)
                    .await
                    .map_err(|e| WorkerError::store("expiring dead letters", e))?,
            };
            *batches = batches.saturating_add(1);
            match rule.policy().action() {
                DeadLetterAction::Redrive { .. } => report.redriven += moved,
                DeadLetterAction::Expire { .. } => report.expired += moved,
            }
            if moved < u64::from(limit) || shutdown.is_cancelled() {
                break;
            }
        }
        if let DeadLetterAction::Redrive { after, give_up_after } = rule.policy().action() {
            report.stuck = store
                .count_stuck_dead_letters(message_type, after, give_up_after)
                .await
                .map_err(|e| WorkerError::store("counting stuck dead letters", e))?;
        }
        Ok(report)
    }

    /// Expiry restarts when the pass completes (LDR-2). A renewal that finds the lease
    /// taken only means another instance leads from now on: the moves made are sound.
    async fn renew(&self, store: &S::Session, lease: &Lease) -> Result<(), WorkerError> {
        let duration = self.options.lease_duration();
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
        let report = self.apply(&mut session, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        release_lease_at_shutdown(&self.source, &self.namespace, job, owner).await;
    }
}
