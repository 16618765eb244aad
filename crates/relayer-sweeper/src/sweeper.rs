//! The sweeper worker: options → [`Sweeper::new`] → [`Sweeper::run`] → one pass per
//! `sweep_interval`, each [`Sweeper::run_once`] on one store session.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use relayer_core::session::StoreSource;
use relayer_core::store::{HoldBackDestination, HoldLease, LockOutbox, ScanRecovery, VerifySchema};
use relayer_core::{KeysetCursor, Namespace, SweeperOptions};
use relayer_delivery::SendPath;
use relayer_worker::{Leadership, Pass, PassLoop, PassOutcome, WorkerError, WorkerEvent, WorkerKind};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::pass::{SweepPass, SweepSession};
use crate::report::SweepReport;

/// The lease job of the recovery sweeper: one sweeper per namespace, independent of the
/// cleanup lease (SWP-1).
pub const LEASE_JOB: &str = "sweeper";

/// The sweeper's default leadership: the lease [`LEASE_JOB`] for
/// `options.lease_duration()`, held as an owner identity unique to this call (process id
/// and a random suffix).
pub fn lease_leadership(options: &SweeperOptions) -> Leadership {
    let suffix = Uuid::new_v4().simple().to_string();
    let owner = format!("sweeper/{}/{}", std::process::id(), &suffix[..12]);
    Leadership::lease(LEASE_JOB, owner, options.lease_duration())
}

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

/// The recovery sweeper of one namespace (§6). See the [crate docs](crate) for the model.
///
/// It reaches its store only through `S`, a [`StoreSource`] whose sessions have the
/// capabilities a pass uses: read and lock a recovery page ([`ScanRecovery`]), complete
/// the rows it locked ([`LockOutbox`]), hold back a tripped destination
/// ([`HoldBackDestination`]), take and renew its lease ([`HoldLease`]), all in one
/// transaction ([`Session`](relayer_core::session::Session)); and check the schema first
/// ([`VerifySchema`]). relayer's is `relayer_postgres::PgSource`.
pub struct Sweeper<S> {
    pass: Arc<SweepPass<S>>,
    events: broadcast::Sender<WorkerEvent<SweepReport>>,
}

impl<S> Sweeper<S>
where
    S: StoreSource,
    S::Session: VerifySchema + ScanRecovery + LockOutbox + HoldLease + HoldBackDestination,
{
    /// A sweeper for `namespace`, opening one session of `source` per pass and sending
    /// through `send` — build it with the same transports and
    /// [`DispatcherOptions`](relayer_core::DispatcherOptions) as the dispatchers, so retries
    /// and poison are judged alike. With [`Leadership::Lease`], use the job [`LEASE_JOB`]
    /// and the options' `lease_duration` ([`lease_leadership`] does both).
    ///
    /// `source` must work on `namespace` (which the worker's logs name), and should page
    /// only rows of the transports `send` has (TRN-6), so rows of another transport wait
    /// for an instance that has it, unread: with relayer's source,
    /// `PgSource::new(pool, &namespace).with_transports(send.transports().names())`.
    pub fn new(
        source: S,
        namespace: Namespace,
        options: SweeperOptions,
        send: SendPath,
        leadership: Leadership,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let pass = SweepPass {
            cursor: Mutex::new(KeysetCursor::new()),
            source,
            namespace,
            options,
            leadership,
            send,
        };
        Sweeper { pass: Arc::new(pass), events }
    }

    /// The options this sweeper runs with (immutable, OPT-4).
    pub fn options(&self) -> &SweeperOptions {
        &self.pass.options
    }

    /// The source the sweeper opens its sessions from (for [`run_once`](Self::run_once)).
    pub fn source(&self) -> &S {
        &self.pass.source
    }

    /// A subscription to the worker's events (pass started, succeeded with its report,
    /// failed with the next wait, stopped), for tests and health checks.
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent<SweepReport>> {
        self.events.subscribe()
    }

    /// Runs a pass at once and then one every `sweep_interval` until `shutdown` is
    /// cancelled; a pass that found a full page is followed at once by the next, so a
    /// backlog drains at the database's pace (SWP-6). Failed passes are logged and retried
    /// with backoff (RES-1..3). On shutdown the pass in flight finishes and the lease is
    /// released, so another instance takes over at once (LIF-1).
    ///
    /// The first pass begins by checking the namespace's schema; a missing or old schema
    /// and an unreachable database are failed passes like any other, retried with backoff
    /// until they are fixed, so a database that is down or being migrated when the worker
    /// starts never ends it (refusing a missing schema up front is the host's `start`,
    /// OPT-5). Transports cannot be checked up front: a row naming one this sweeper lacks
    /// is a failed send (see the [crate docs](crate)).
    pub async fn run(self, shutdown: CancellationToken) {
        let backoff = self.pass.options.pass_backoff();
        let leadership = self.pass.leadership.clone();
        let looped = LoopPass { pass: self.pass, schema_verified: AtomicBool::new(false) };
        PassLoop::new(WorkerKind::Sweeper, looped, backoff, leadership)
            .events_to(self.events)
            .run(shutdown)
            .await;
    }

    /// Runs one pass on `session`, in one transaction: takes or renews the lease (lease
    /// leadership; [`SweepReport::led`] is `false` when another instance holds it), reads
    /// one page of eligible rows, claims, sends and completes them, renews the lease and
    /// commits. With [`Leadership::Advisory`] the caller must hold the lock (as
    /// [`run`](Self::run) does). The schema is not checked here: a missing table is a
    /// store error.
    ///
    /// On error everything the pass did in the store was rolled back, or is when the
    /// session is dropped (a rollback that failed or did not finish leaves the session in
    /// its transaction: drop it); sends the pass made are replayed by a later pass (at
    /// least once).
    pub async fn run_once(&self, session: &mut S::Session) -> Result<SweepReport, WorkerError> {
        self.pass.sweep(session, &CancellationToken::new()).await
    }
}

/// The pass as the loop runs it: the schema checked before the first pass that reaches the
/// database, and a full page followed at once by the next.
struct LoopPass<S> {
    pass: Arc<SweepPass<S>>,
    /// Set once a check passed; a failed check is a failed pass, retried with backoff.
    schema_verified: AtomicBool,
}

#[async_trait]
impl<S> Pass for LoopPass<S>
where
    S: StoreSource,
    S::Session: SweepSession,
{
    type Report = SweepReport;
    type Error = WorkerError;

    async fn run_pass(&self, shutdown: &CancellationToken) -> Result<PassOutcome<SweepReport>, WorkerError> {
        if !self.schema_verified.load(Ordering::Acquire) {
            // Its own short session: the pass below opens the one it works on (LIF-2).
            let session = self
                .pass
                .source
                .open()
                .await
                .map_err(|e| WorkerError::store("opening a store session to check the schema", e))?;
            session
                .verify_schema()
                .await
                .map_err(|e| WorkerError::store("checking the namespace's schema", e))?;
            drop(session);
            self.schema_verified.store(true, Ordering::Release);
        }
        self.pass.run_pass(shutdown).await
    }

    async fn stopped(&self) {
        self.pass.stopped().await;
    }

    /// SWP-6: a full page means more eligible rows may wait behind it. Rows that failed
    /// are released with a retry delay and are not eligible again before it, so this never
    /// hammers a failing destination.
    fn again_at_once(&self, report: &SweepReport) -> bool {
        report.scanned >= u64::from(self.pass.options.batch_size())
    }
}

impl<S> fmt::Debug for Sweeper<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sweeper")
            .field("namespace", &self.pass.namespace)
            .field("options", &self.pass.options)
            .field("leadership", &self.pass.leadership)
            .finish_non_exhaustive()
    }
}
