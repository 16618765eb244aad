//! The policy worker: options → [`DeadLetterWorker::new`] → [`DeadLetterWorker::run`] → one
//! pass per interval, each [`DeadLetterWorker::run_once`] on one pooled connection.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::store::{HoldLease, Lease};
use relayer_core::{DeadLetterAction, DeadLetterOptions, DeadLetterPolicies, DeadLetterRule, Namespace};
use relayer_postgres::{
    DeadLetterPolicyStatements, LeaseStatements, PgClient, PgPool, PgStore, StorageError, verify_schema,
};
use relayer_worker::{Leadership, Pass, PassLoop, PassOutcome, WorkerEvent, WorkerKind};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::error::DeadLetterError;
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

/// The dead-letter policy worker of one namespace and one policy set (§11).
pub struct DeadLetterWorker {
    pass: Arc<PolicyPass>,
    events: broadcast::Sender<WorkerEvent<DeadLetterReport>>,
}

impl DeadLetterWorker {
    /// A worker applying `policies` to `namespace`, borrowing one connection of `pool` per
    /// pass. Lead it with [`Leadership::Advisory`] on [`lock_resource`] (the default, LDR-5),
    /// or a lease on [`LEASE_JOB`] for `options.lease_duration()`. Every statement is safe
    /// for replicas running side by side (DLP-3); leadership only spares them the work.
    pub fn new(
        pool: PgPool,
        namespace: Namespace,
        policies: DeadLetterPolicies,
        options: DeadLetterOptions,
        leadership: Leadership,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let pass = PolicyPass {
            statements: DeadLetterPolicyStatements::new(&namespace),
            leases: LeaseStatements::new(&namespace),
            pool,
            namespace,
            policies,
            options,
            leadership,
        };
        DeadLetterWorker { pass: Arc::new(pass), events }
    }

    /// The options this worker runs with (immutable, OPT-4).
    pub fn options(&self) -> &DeadLetterOptions {
        &self.pass.options
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
    /// connection can be had to check it.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DeadLetterError> {
        let pass = self.pass;
        {
            let conn = pass.pool.get().await.map_err(DeadLetterError::Pool)?;
            verify_schema(&**conn, &pass.namespace).await.map_err(DeadLetterError::Schema)?;
        }
        let backoff = pass.options.pass_backoff();
        let leadership = pass.leadership.clone();
        PassLoop::with_shared_pass(WorkerKind::DeadLetter, pass, backoff, leadership)
            .events_to(self.events)
            .run(shutdown)
            .await;
        Ok(())
    }

    /// Runs one pass on `client`: takes or renews the lease (lease leadership), applies
    /// every policy until its type's due dead letters are moved, counts the stuck ones, and
    /// renews the lease. With [`Leadership::Advisory`] the caller must hold the lock (as
    /// [`run`](Self::run) does).
    pub async fn run_once(&self, client: &mut PgClient) -> Result<DeadLetterReport, DeadLetterError> {
        self.pass.apply(client, &CancellationToken::new()).await
    }
}

impl fmt::Debug for DeadLetterWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetterWorker")
            .field("namespace", &self.pass.namespace)
            .field("policies", &self.pass.policies)
            .field("options", &self.pass.options)
            .field("leadership", &self.pass.leadership)
            .finish_non_exhaustive()
    }
}

struct PolicyPass {
    pool: PgPool,
    namespace: Namespace,
    policies: DeadLetterPolicies,
    options: DeadLetterOptions,
    leadership: Leadership,
    statements: DeadLetterPolicyStatements,
    leases: LeaseStatements,
}

impl PolicyPass {
    async fn apply(
        &self,
        client: &mut PgClient,
        shutdown: &CancellationToken,
    ) -> Result<DeadLetterReport, DeadLetterError> {
        let mut report = DeadLetterReport::default();
        let lease = match &self.leadership {
            Leadership::Lease { job, owner, lease_duration } => {
                match self.leases.acquire_committed(client, job, owner, *lease_duration).await? {
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
            let applied = self.apply_rule(&*client, rule, shutdown, &mut report.batches).await?;
            if applied.stuck > 0 {
                tracing::error!(target: TARGET, namespace = %self.namespace, message_type = %applied.message_type,
                    stuck = applied.stuck, policy = %rule.policy(),
                    "dead letters past their redrive window are left in place (DLP-5)");
            }
            report.stopped_early |= shutdown.is_cancelled();
            report.add(applied);
        }
        if let Some(lease) = &lease {
            self.renew(client, lease).await?;
        }
        if report.redriven > 0 || report.expired > 0 {
            tracing::info!(target: TARGET, namespace = %self.namespace, redriven = report.redriven,
                expired = report.expired, batches = report.batches, "applied dead-letter policies");
        }
        Ok(report)
    }

    /// Moves or deletes `rule`'s due dead letters a batch at a time until a batch comes back
    /// short, then counts the stuck ones.
    async fn apply_rule(
        &self,
        client: &PgClient,
        rule: &DeadLetterRule,
        shutdown: &CancellationToken,
        batches: &mut u32,
    ) -> Result<TypeReport, StorageError> {
        let mut report = TypeReport::new(rule.message_type().clone());
        let limit = self.options.batch_size();
        let statements = &self.statements;
        let message_type = rule.message_type();
        loop {
            let moved = match rule.policy().action() {
                DeadLetterAction::Redrive { after, give_up_after } => {
                    statements.redrive(client, message_type, after, give_up_after, limit).await?
                }
                DeadLetterAction::Expire { after } => {
                    statements.expire(client, message_type, after, limit).await?
                }
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
            report.stuck = statements.stuck(client, message_type, after, give_up_after).await?;
        }
        Ok(report)
    }

    /// Expiry restarts when the pass completes (LDR-2). A renewal that finds the lease
    /// taken only means another instance leads from now on: the moves made are sound.
    async fn renew(&self, client: &PgClient, lease: &Lease) -> Result<(), DeadLetterError> {
        let duration = self.options.lease_duration();
        if PgStore::new(client, &self.leases).renew(lease, duration).await?.is_none() {
            tracing::debug!(target: TARGET, namespace = %self.namespace, job = %lease.job,
                "the lease was not renewed (busy or taken over); the next pass settles it");
        }
        Ok(())
    }
}

#[async_trait]
impl Pass for PolicyPass {
    type Report = DeadLetterReport;
    type Error = DeadLetterError;

    async fn run_pass(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<PassOutcome<DeadLetterReport>, DeadLetterError> {
        // One connection for the whole pass, and no second one while holding it (LIF-2).
        let mut conn = self.pool.get().await.map_err(DeadLetterError::Pool)?;
        let report = self.apply(&mut conn, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        self.leases.release_at_shutdown(&self.pool, job, owner).await;
    }
}
