//! The dispatcher worker: options → [`Dispatcher::new`] → [`Dispatcher::run`] →
//! [`Dispatcher::run_once`] → [`PassReport`].

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures_util::FutureExt;
use relayer_core::store::{ClaimOutbox, ClaimedMessage, CompleteOutbox};
use relayer_core::{DispatcherOptions, Namespace, TransportRegistry};
use relayer_postgres::{
    Enqueued, Executor, LaneStatements, OutboxStatements, OutboxWriter, PgPool, PgStore, StatementMode,
    StorageError, connect_pool_with, notify_channel, verify_schema,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::error::DispatchError;
use crate::lanes::{LaneContext, work_lanes};
use crate::listen::listen;
use crate::send::{Breakers, send_claimed};
use relayer_core::error_chain;

const TARGET: &str = "relayer::dispatcher";

/// What one pass (or one [`Dispatcher::dispatch_now`]) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassReport {
    /// Unordered rows claimed.
    pub claimed: u64,
    /// Messages the transports accepted (rows deleted), lanes included.
    pub sent: u64,
    /// Failed sends, lanes included.
    pub failed: u64,
    /// Rows moved to the dead table.
    pub dead: u64,
    /// Claimed rows released unsent (their destination's breaker is open).
    pub deferred: u64,
    /// Rows whose claim was taken over before completion: left to the new owner.
    pub fenced_out: u64,
    /// Transport panics caught (each counted as failed sends).
    pub panics: u64,
    /// Lanes claimed.
    pub lanes: u64,
    /// Lanes parked in this pass.
    pub lanes_parked: u64,
}

impl PassReport {
    /// Adds `other`'s counts to this report.
    fn absorb(&mut self, other: &PassReport) {
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.failed += other.failed;
        self.dead += other.dead;
        self.deferred += other.deferred;
        self.fenced_out += other.fenced_out;
        self.panics += other.panics;
        self.lanes += other.lanes;
        self.lanes_parked += other.lanes_parked;
    }

    /// Whether the pass found a full batch, so another pass should follow at once.
    fn found_full_batch(&self, options: &DispatcherOptions) -> bool {
        let batch = u64::from(options.batch_size());
        self.claimed >= batch || self.lanes >= batch
    }
}

/// Sends committed outbox rows to their transports. Cheap to clone: clones share one
/// pool, one set of circuit breakers and one wake-up.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    options: DispatcherOptions,
    namespace: Namespace,
    transports: Arc<TransportRegistry>,
    pool: PgPool,
    listen_config: tokio_postgres::Config,
    outbox: OutboxStatements,
    lanes: LaneStatements,
    breakers: Breakers,
    wake: Arc<Wake>,
    /// The lane key after which the next lane claim starts, so lanes late in key order
    /// get their turn when there are more due lanes than a pass claims.
    lane_cursor: Mutex<String>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("namespace", &self.inner.namespace)
            .field("transports", &self.inner.transports)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher for `namespace` sending through `transports`. It keeps its own pool of
    /// `pool_size` connections to `database` (1 works, LIF-2) plus one dedicated LISTEN
    /// connection while running. Fails at once when no transport is registered, the
    /// database cannot be reached, or the namespace's schema is missing or old (NS-3).
    pub async fn new(
        options: DispatcherOptions,
        namespace: Namespace,
        transports: Arc<TransportRegistry>,
        database: tokio_postgres::Config,
        pool_size: u32,
    ) -> Result<Self, DispatchError> {
        Dispatcher::with_statement_mode(
            options,
            namespace,
            transports,
            database,
            pool_size,
            StatementMode::Prepared,
        )
        .await
    }

    /// [`new`](Self::new), with the [`StatementMode`] of the dispatcher's pool:
    /// [`StatementMode::Unnamed`] behind a transaction-mode pooler that does not track
    /// prepared statements.
    pub async fn with_statement_mode(
        options: DispatcherOptions,
        namespace: Namespace,
        transports: Arc<TransportRegistry>,
        database: tokio_postgres::Config,
        pool_size: u32,
        statements: StatementMode,
    ) -> Result<Self, DispatchError> {
        if transports.is_empty() {
            return Err(DispatchError::Setup("no transport is registered".to_owned()));
        }
        let pool =
            connect_pool_with(with_asynchronous_commit(database.clone()), pool_size, statements).await?;
        {
            let connection = pool.get().await.map_err(|e| {
                DispatchError::Setup(format!(
                    "no pooled connection to verify the schema: {}",
                    error_chain(&e)
                ))
            })?;
            verify_schema(&**connection, &namespace).await?;
        }
        Ok(Dispatcher {
            inner: Arc::new(Inner {
                outbox: OutboxStatements::new(&namespace),
                lanes: LaneStatements::new(&namespace),
                breakers: Breakers::new(options.circuit_breaker()),
                wake: Arc::new(Wake::new()),
                options,
                namespace,
                transports,
                pool,
                listen_config: database,
                lane_cursor: Mutex::new(String::new()),
            }),
        })
    }

    /// The options this dispatcher runs with.
    pub fn options(&self) -> &DispatcherOptions {
        &self.inner.options
    }

    /// A writer for the same namespace that accepts exactly this dispatcher's transports and
    /// its `max_body_bytes`.
    pub fn writer(&self) -> OutboxWriter {
        OutboxWriter::for_registry(&self.inner.namespace, &self.inner.transports)
            .with_max_body_bytes(self.inner.options.max_body_bytes())
    }

    /// Runs passes until `shutdown` is cancelled, then returns once the passes in flight
    /// (and their sends) have completed. Errors and panics are logged and retried with
    /// backoff; they never end the loop (RES-1).
    ///
    /// `concurrency` loops dispatch unordered rows side by side — each claims its own batch,
    /// so while one waits on its transport or its commit the next is already claiming — and
    /// one more loop works the ordered lanes, so a backlog of either never delays the other.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        let listener = tokio::spawn(listen(
            inner.listen_config.clone(),
            notify_channel(&inner.namespace),
            Arc::clone(&inner.wake),
            inner.options.pass_backoff(),
            shutdown.child_token(),
        ));
        let unordered = inner.options.concurrency() as usize;
        let loops = (0..unordered)
            .map(|_| self.pass_loop(Work::Unordered, &shutdown))
            .chain(std::iter::once(self.pass_loop(Work::Lanes, &shutdown)));
        futures_util::future::join_all(loops).await;
        if let Err(error) = listener.await {
            tracing::warn!(target: TARGET, error = %error, "LISTEN task ended abnormally");
        }
    }

    /// One loop of passes of one kind of work, until `shutdown`.
    async fn pass_loop(&self, work: Work, shutdown: &CancellationToken) {
        let inner = &self.inner;
        let backoff = inner.options.pass_backoff();
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            let wait = match AssertUnwindSafe(self.pass_on_pool(work)).catch_unwind().await {
                Ok(Ok(report)) => {
                    failures = 0;
                    if report.found_full_batch(&inner.options) {
                        // A backlog: bring in a sibling loop, then go on at once.
                        inner.wake.signal(work).notify_one();
                        tokio::task::yield_now().await;
                        continue;
                    }
                    backoff.interval()
                }
                Ok(Err(error)) => {
                    failures = failures.saturating_add(1);
                    // WARN: a failed pass is retried, as in every worker (docs/architecture.md).
                    tracing::warn!(target: TARGET, namespace = %inner.namespace, ?work, failures,
                        error = %error_chain(&error), "dispatch pass failed; retrying with backoff");
                    backoff.wait_after(failures)
                }
                Err(_) => {
                    failures = failures.saturating_add(1);
                    tracing::error!(target: TARGET, namespace = %inner.namespace, ?work, failures,
                        "dispatch pass panicked; retrying with backoff");
                    backoff.wait_after(failures)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = inner.wake.signal(work).notified() => {
                    // Let the commits of this moment join one batch (DispatcherOptions::linger).
                    let linger = inner.options.linger();
                    if !linger.is_zero() {
                        tokio::select! {
                            () = shutdown.cancelled() => break,
                            () = tokio::time::sleep(linger) => {}
                        }
                    }
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn pass_on_pool(&self, work: Work) -> Result<PassReport, DispatchError> {
        let connection = self.inner.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let mut report = PassReport::default();
        let pass = async {
            match work {
                Work::Unordered => self.unordered_pass(&*connection, &mut report).await,
                Work::Lanes => self.lane_pass(&*connection, &mut report).await,
            }
        };
        pass.instrument(pass_span(work)).await?;
        Ok(report)
    }

    /// One pass of each kind of work on `client` (LIF-2: it uses no other connection):
    /// claim and send due unordered rows, then due lane heads.
    pub async fn run_once(&self, client: &impl Executor) -> Result<PassReport, DispatchError> {
        let mut report = PassReport::default();
        self.unordered_pass(client, &mut report).instrument(pass_span(Work::Unordered)).await?;
        self.lane_pass(client, &mut report).instrument(pass_span(Work::Lanes)).await?;
        Ok(report)
    }

    /// Claims up to a batch of due unordered rows, sends them and completes them.
    async fn unordered_pass(
        &self,
        client: &impl Executor,
        report: &mut PassReport,
    ) -> Result<(), DispatchError> {
        let started = Instant::now();
        let inner = &self.inner;
        let token = Uuid::new_v4();
        let tripped = inner.breakers.tripped();
        let outbox = PgStore::new(client, &inner.outbox);
        let claimed = outbox
            .claim_due(token, inner.options.claim_duration(), inner.options.batch_size(), &tripped)
            .await?;
        let sent = self.send_and_complete(&outbox, token, claimed).await?;
        report.absorb(&sent);
        let span = tracing::Span::current();
        span.record("claimed", report.claimed);
        span.record("sent", report.sent);
        span.record("failed", report.failed);
        span.record("dead", report.dead);
        span.record("elapsed_ms", u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        if report.claimed > 0 {
            tracing::debug!(target: TARGET, ?report, "unordered pass done");
        }
        Ok(())
    }

    /// Tells this dispatcher that the caller just committed outbox rows: its loops wake at
    /// once, without a database round trip (commit-triggered dispatch in the writing
    /// process, OUT-4). Pairs with `OutboxWriter::without_notify`; harmless otherwise.
    pub fn committed(&self) {
        self.inner.wake.all();
    }

    /// Sends the rows this process just committed, at once (OUT-4's commit-triggered
    /// dispatch), on one pooled connection. Rows another dispatcher already holds, lane
    /// rows and rows not yet due are left to the passes.
    pub async fn dispatch_now(&self, written: &[Enqueued]) -> Result<PassReport, DispatchError> {
        if written.is_empty() {
            return Ok(PassReport::default());
        }
        let connection = self.inner.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let seqs: Vec<i64> = written.iter().map(|w| w.seq).collect();
        let token = Uuid::new_v4();
        let outbox = PgStore::new(&*connection, &self.inner.outbox);
        let claimed = outbox.claim_seqs(token, self.inner.options.claim_duration(), &seqs).await?;
        let has_lane_rows = claimed.len() < seqs.len();
        let report = self.send_and_complete(&outbox, token, claimed).await?;
        if has_lane_rows {
            // Lane rows (or rows held elsewhere): let the loop look now rather than at the next poll.
            self.inner.wake.all();
        }
        Ok(report)
    }

    /// Sends rows claimed under `token` and completes them through `outbox`.
    async fn send_and_complete<S>(
        &self,
        outbox: &S,
        token: Uuid,
        claimed: Vec<ClaimedMessage>,
    ) -> Result<PassReport, DispatchError>
    where
        S: CompleteOutbox,
        DispatchError: From<S::Error>,
    {
        let inner = &self.inner;
        let mut report = PassReport { claimed: claimed.len() as u64, ..PassReport::default() };
        if claimed.is_empty() {
            return Ok(report);
        }
        let tally = send_claimed(claimed, &inner.transports, &inner.breakers, &inner.options).await;
        let written = outbox.complete(token, &tally.completion).await?;
        report.sent = tally.accepted;
        report.failed = tally.failed;
        report.panics = tally.panics;
        report.dead = written.dead;
        report.deferred = written.deferred;
        report.fenced_out = written.fenced_out;
        if written.fenced_out > 0 {
            tracing::warn!(target: TARGET, fenced_out = written.fenced_out,
                "claims expired before completion and were taken over; those rows are left to their new owner");
        }
        Ok(report)
    }

    async fn lane_pass(&self, client: &impl Executor, report: &mut PassReport) -> Result<(), DispatchError> {
        let inner = &self.inner;
        let token = Uuid::new_v4();
        let after = inner.lane_cursor.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let limit = inner.options.batch_size();
        // Visit at most a few batches' worth of lanes per pass: lanes that cannot be claimed
        // (parked, scheduled, backing off) must not make a pass O(lanes).
        let visit_cap = limit.saturating_mul(LANE_VISITS_PER_CLAIM);
        let claim = inner
            .lanes
            .claim(client, token, inner.options.claim_duration(), limit, &after, visit_cap)
            .await?;
        *inner.lane_cursor.lock().unwrap_or_else(PoisonError::into_inner) = claim.resume_after;
        let lanes = claim.lanes;
        if lanes.is_empty() {
            return Ok(());
        }
        report.lanes = lanes.len() as u64;
        tracing::Span::current().record("lanes", report.lanes);
        let context = LaneContext {
            statements: &inner.lanes,
            transports: &inner.transports,
            breakers: &inner.breakers,
            options: &inner.options,
            token,
        };
        let tally = work_lanes(client, &context, &lanes).await?;
        report.sent += tally.sent;
        report.failed += tally.failed;
        report.lanes_parked += tally.parked;
        report.panics += tally.panics;
        Ok(())
    }
}

impl Dispatcher {
    /// Operator action (LAN-2, LAN-5): un-parks `lane`, whose head is then tried again at
    /// once; recorded in the audit table with `actor`. Returns false when it was not parked.
    pub async fn release_lane(&self, lane: &str, actor: &str) -> Result<bool, DispatchError> {
        let mut connection = self.inner.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let tx = durable_transaction(&mut connection, "releasing a lane").await?;
        let released = self.inner.lanes.release_lane(&tx, lane, actor).await?;
        tx.commit().await.map_err(|e| StorageError::database("committing a lane release", e))?;
        if released {
            self.inner.wake.all();
        }
        Ok(released)
    }

    /// Operator action (LAN-5): moves the head of the parked `lane` to the dead table so the
    /// rows behind it flow; recorded in the audit table with `actor`. Returns the moved
    /// head's `seq`, or `None` when the lane was not parked.
    pub async fn skip_lane_head(&self, lane: &str, actor: &str) -> Result<Option<i64>, DispatchError> {
        let mut connection = self.inner.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let tx = durable_transaction(&mut connection, "skipping a lane head").await?;
        let skipped = self.inner.lanes.skip_lane_head(&tx, lane, actor).await?;
        tx.commit().await.map_err(|e| StorageError::database("committing a lane head skip", e))?;
        if skipped.is_some() {
            self.inner.wake.all();
        }
        Ok(skipped)
    }
}

/// The dispatcher's own connections commit with `synchronous_commit = off`.
///
/// Why this is safe: the outbox row is the durable record of a message, and every write a
/// pass makes to it — a claim, a fenced delete, a retry release, a park — only ever moves
/// toward sending again. If a crash loses such a commit, the row is back as it was and is
/// sent again: at least once, never lost (DSP-7). The one exception is a lane head's
/// delete, which commits durably on its own (`LaneStatements`): losing a run of them would
/// replay heads after later heads of their lane. What must be durable
/// is the transport's acceptance, and transports commit on their own connections. Dropping
/// the flush wait from claims and completions stops them competing with the writers'
/// commits for WAL flushes (docs/performance.md). Operator actions opt back in through
/// [`durable_transaction`].
fn with_asynchronous_commit(mut config: tokio_postgres::Config) -> tokio_postgres::Config {
    let options = match config.get_options() {
        Some(existing) if !existing.trim().is_empty() => format!("{existing} -c synchronous_commit=off"),
        _ => "-c synchronous_commit=off".to_owned(),
    };
    config.options(&options);
    config
}

/// A transaction whose commit waits for its WAL flush, for operator actions an operator
/// must be able to trust once they returned.
async fn durable_transaction<'c>(
    connection: &'c mut tokio_postgres::Client,
    what: &str,
) -> Result<tokio_postgres::Transaction<'c>, StorageError> {
    let tx = connection.transaction().await.map_err(|e| StorageError::database(what, e))?;
    tx.batch_execute("SET LOCAL synchronous_commit = on")
        .await
        .map_err(|e| StorageError::database(what, e))?;
    Ok(tx)
}

/// How many lanes a lane claim may visit per lane it may claim.
const LANE_VISITS_PER_CLAIM: u32 = 4;

/// Which kind of work a pass loop does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// Due unordered rows, a batch at a time (DSP-1..6).
    Unordered,
    /// Ordered lanes, one head per lane at a time (LAN-1..5).
    Lanes,
}

/// The span of one pass; its counts are recorded as the pass learns them.
fn pass_span(work: Work) -> tracing::Span {
    tracing::info_span!(target: TARGET, "dispatch_pass", ?work,
        claimed = tracing::field::Empty, sent = tracing::field::Empty, failed = tracing::field::Empty,
        dead = tracing::field::Empty, lanes = tracing::field::Empty, elapsed_ms = tracing::field::Empty)
}

/// The wake-up signals of the pass loops. A notification wakes one idle unordered loop
/// (permits do not stack, so a burst of notifications during a pass coalesces into one
/// more pass) and the lane loop. An unordered loop that finds a full batch wakes a
/// sibling before going on, so a backlog engages every loop while a trickle keeps one busy.
pub(crate) struct Wake {
    unordered: Notify,
    lanes: Notify,
}

impl Wake {
    fn new() -> Self {
        Wake { unordered: Notify::new(), lanes: Notify::new() }
    }

    /// Wakes one unordered loop and the lane loop.
    pub(crate) fn all(&self) {
        self.unordered.notify_one();
        self.lanes.notify_one();
    }

    fn signal(&self, work: Work) -> &Notify {
        match work {
            Work::Unordered => &self.unordered,
            Work::Lanes => &self.lanes,
        }
    }
}
