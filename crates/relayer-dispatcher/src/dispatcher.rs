//! The dispatcher worker: [`Dispatcher::new`] (pool, namespace, options, transports) →
//! [`Dispatcher::run`] → its pass loops, each pass also available as
//! [`Dispatcher::run_once`] → [`PassReport`].

use std::sync::{Arc, Mutex};

use relayer_core::{DispatcherOptions, Namespace, TransportRegistry, error_chain};
use relayer_delivery::SendPath;
use relayer_postgres::{
    Connector, Enqueued, Executor, LaneStatements, OutboxStatements, OutboxWriter, PgPool, StorageError,
    listen, notify_channel, verify_schema,
};
use relayer_worker::{Leadership, PassLoop, WorkerEvent, WorkerKind};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::DispatchError;
use crate::pass::{DispatchPass, Work};
use crate::report::PassReport;
use crate::shared::{Shared, TARGET};
use crate::wake::Wake;

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

/// Sends committed outbox rows to their transports. Cheap to clone: clones share one
/// pool, one send path (and its circuit breakers), one wake-up and one event channel.
#[derive(Clone)]
pub struct Dispatcher {
    shared: Arc<Shared>,
    /// Where the LISTEN connection goes; without one, the loops poll and are woken by
    /// [`Dispatcher::committed`] and [`Dispatcher::dispatch_now`] only.
    listen: Option<Connector>,
    events: broadcast::Sender<WorkerEvent<PassReport>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("namespace", &self.shared.namespace)
            .field("send", &self.shared.send)
            .field("listens", &self.listen.is_some())
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher for `namespace`, borrowing one connection of `pool` per pass (a pool
    /// of one works, LIF-2) and sending through `transports` with `options`. Build the
    /// pool from [`asynchronous_commit`]`(config)`: claims and completions then skip the
    /// WAL flush wait, which is safe here and only here (see that function).
    ///
    /// Refuses an empty registry (OPT-5). The schema is checked when [`run`](Self::run)
    /// starts.
    pub fn new(
        pool: PgPool,
        namespace: Namespace,
        options: DispatcherOptions,
        transports: Arc<TransportRegistry>,
    ) -> Result<Self, DispatchError> {
        if transports.is_empty() {
            return Err(DispatchError::Setup("no transport is registered".to_owned()));
        }
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let shared = Shared {
            // Rows for a transport this dispatcher lacks are set aside, never retried forever.
            outbox: OutboxStatements::new(&namespace).with_transports(transports.names()),
            lanes: LaneStatements::new(&namespace).with_transports(transports.names()),
            send: SendPath::new(transports, options.clone()),
            wake: Arc::new(Wake::default()),
            lane_cursor: Mutex::new(String::new()),
            lanes_seen: std::sync::atomic::AtomicBool::new(false),
            pool,
            namespace,
            options,
        };
        Ok(Dispatcher { shared: Arc::new(shared), listen: None, events })
    }

    /// Wakes the loops on the namespace's channel (OUT-4), through one dedicated
    /// connection to `database` (a `Config`, or a [`Connector`] with TLS) held while
    /// running (not from the pool: it must not starve passes, LIF-2). Without it the loops
    /// poll every `poll_interval`.
    pub fn listening(mut self, database: impl Into<Connector>) -> Self {
        self.listen = Some(database.into());
        self
    }

    /// The options this dispatcher runs with (immutable, OPT-4).
    pub fn options(&self) -> &DispatcherOptions {
        &self.shared.options
    }

    /// The send path (its transports, its circuit breakers).
    pub fn send_path(&self) -> &SendPath {
        &self.shared.send
    }

    /// A writer for the same namespace that accepts exactly this dispatcher's transports and
    /// its `max_body_bytes`.
    pub fn writer(&self) -> OutboxWriter {
        OutboxWriter::for_registry(&self.shared.namespace, self.shared.send.transports())
            .with_max_body_bytes(self.shared.options.max_body_bytes())
    }

    /// A subscription to the worker's events — pass started, succeeded with its report,
    /// failed with the next wait, stopped — from every loop (the unordered loops and the
    /// lane loop each stop once), for tests and health checks.
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent<PassReport>> {
        self.events.subscribe()
    }

    /// Checks the schema, then runs the pass loops until `shutdown` is cancelled and
    /// returns once the passes in flight (and their sends) have completed. Errors and
    /// panics of a pass are logged and retried with backoff; they never end a loop (RES-1).
    ///
    /// `concurrency` loops dispatch unordered rows side by side — each claims its own batch,
    /// so while one waits on its transport or its commit the next is already claiming — and
    /// one more loop works the ordered lanes, so a backlog of either never delays the other.
    /// Each is a [`PassLoop`]: woken by notifications (after `linger`), at once again after
    /// a full batch that moved rows, every `poll_interval` otherwise.
    ///
    /// Returns an error only when it cannot start: no transport, or the schema is missing or
    /// too old (OPT-5). A database that cannot be reached yet is waited for with backoff.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), DispatchError> {
        if !self.wait_for_schema(&shutdown).await? {
            return Ok(());
        }
        let shared = &self.shared;
        let listener = self.listen.clone().map(|database| {
            // Every notification, and every (re)connect (rows may have committed while nobody
            // listened), wakes every pass loop (OUT-4).
            let wake = Arc::clone(&shared.wake);
            tokio::spawn(listen(
                database,
                notify_channel(&shared.namespace),
                shared.options.pass_backoff(),
                shutdown.child_token(),
                move |_heard| wake.all(),
            ))
        });
        let backoff = shared.options.pass_backoff();
        let linger = shared.options.linger();
        let pass_loop = |work: Work, pass: Arc<DispatchPass>| {
            let wake = match work {
                Work::Unordered => &shared.wake.unordered,
                Work::Lanes => &shared.wake.lanes,
            };
            PassLoop::with_shared_pass(WorkerKind::Dispatcher, pass, backoff, Leadership::EveryInstance)
                .wake_on(Arc::clone(wake))
                .linger_after_wake(linger)
                .events_to(self.events.clone())
                .run(shutdown.clone())
        };
        let unordered = Arc::new(DispatchPass { shared: Arc::clone(shared), work: Work::Unordered });
        let loops: Vec<_> = (0..shared.options.concurrency())
            .map(|_| pass_loop(Work::Unordered, Arc::clone(&unordered)))
            .collect();
        let lanes =
            pass_loop(Work::Lanes, Arc::new(DispatchPass { shared: Arc::clone(shared), work: Work::Lanes }));
        futures_util::future::join(futures_util::future::join_all(loops), lanes).await;
        if let Some(listener) = listener
            && let Err(error) = listener.await
        {
            tracing::warn!(target: TARGET, error = %error, "LISTEN task ended abnormally");
        }
        Ok(())
    }

    /// Checks the schema before the loops start: a missing or old schema is refused, a
    /// database not reachable yet is retried with backoff. `false`: shut down meanwhile.
    async fn wait_for_schema(&self, shutdown: &CancellationToken) -> Result<bool, DispatchError> {
        let backoff = self.shared.options.pass_backoff();
        let mut failures = 0u32;
        loop {
            let checked = match self.shared.pool.get().await {
                Ok(connection) => {
                    verify_schema(&**connection, &self.shared.namespace).await.map_err(|error| {
                        if error.is_transient() {
                            DispatchError::Storage(error)
                        } else {
                            DispatchError::Schema(error)
                        }
                    })
                }
                Err(error) => Err(DispatchError::pool(&error)),
            };
            match checked {
                Ok(_) => return Ok(true),
                Err(error) if !error.is_transient() => return Err(error),
                Err(error) => {
                    failures = failures.saturating_add(1);
                    let wait = backoff.wait_after(failures);
                    tracing::warn!(target: TARGET, namespace = %self.shared.namespace, failures, ?wait,
                        cause = %error_chain(&error), "dispatcher cannot check the schema yet; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(false),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// One pass of each kind of work on `client` (LIF-2: it uses no other connection):
    /// claim and send due unordered rows, then due lane heads.
    pub async fn run_once(&self, client: &impl Executor) -> Result<PassReport, DispatchError> {
        let mut report = self.shared.unordered_pass(client).await?;
        report.absorb(&self.shared.lane_pass(client).await?);
        Ok(report)
    }

    /// Tells this dispatcher that the caller just committed outbox rows: its loops wake at
    /// once, without a database round trip (commit-triggered dispatch in the writing
    /// process, OUT-4). Pairs with `OutboxWriter::without_notify`; harmless otherwise.
    pub fn committed(&self) {
        self.shared.wake.all();
    }

    /// Sends the rows this process just committed, at once (OUT-4's commit-triggered
    /// dispatch), on one pooled connection. Rows another dispatcher already holds, lane
    /// rows and rows not yet due are left to the passes.
    pub async fn dispatch_now(&self, written: &[Enqueued]) -> Result<PassReport, DispatchError> {
        if written.is_empty() {
            return Ok(PassReport::default());
        }
        let connection = self.shared.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let seqs: Vec<i64> = written.iter().map(|w| w.seq).collect();
        let token = Uuid::new_v4();
        let claimed = self
            .shared
            .outbox
            .claim_seqs(&*connection, token, self.shared.options.claim_duration(), &seqs)
            .await?;
        let has_lane_rows = claimed.messages.len() + claimed.undecodable.len() < seqs.len();
        let report = self.shared.send_and_complete(&*connection, token, claimed).await?;
        if has_lane_rows {
            // Lane rows (or rows held elsewhere): let the loop look now rather than at the next poll.
            self.shared.wake.all();
        }
        Ok(report)
    }
}

impl Dispatcher {
    /// Operator action (LAN-2, LAN-5): un-parks `lane`, whose head is then tried again at
    /// once; recorded in the audit table with `actor`. Returns false when it was not parked.
    pub async fn release_lane(&self, lane: &str, actor: &str) -> Result<bool, DispatchError> {
        let mut connection = self.shared.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let tx = durable_transaction(&mut connection, "releasing a lane").await?;
        let released = self.shared.lanes.release_lane(&tx, lane, actor).await?;
        tx.commit().await.map_err(|e| StorageError::database("committing a lane release", e))?;
        if released {
            self.shared.wake.all();
        }
        Ok(released)
    }

    /// Operator action (LAN-5): moves the head of the parked `lane` to the dead table so the
    /// rows behind it flow; recorded in the audit table with `actor`. Returns the moved
    /// head's `seq`, or `None` when the lane was not parked.
    pub async fn skip_lane_head(&self, lane: &str, actor: &str) -> Result<Option<i64>, DispatchError> {
        let mut connection = self.shared.pool.get().await.map_err(|e| DispatchError::pool(&e))?;
        let tx = durable_transaction(&mut connection, "skipping a lane head").await?;
        let skipped = self.shared.lanes.skip_lane_head(&tx, lane, actor).await?;
        tx.commit().await.map_err(|e| StorageError::database("committing a lane head skip", e))?;
        if skipped.is_some() {
            self.shared.wake.all();
        }
        Ok(skipped)
    }
}

/// `config` with `synchronous_commit = off` on every session: build the dispatcher's pool
/// from it ([`Dispatcher::new`]).
///
/// Why this is safe for the dispatcher's connections (and only for them): the outbox row is
/// the durable record of a message, and every write a pass makes to it — a claim, a fenced delete, a retry release, a park — only ever moves
/// toward sending again. If a crash loses such a commit, the row is back as it was and is
/// sent again: at least once, never lost (DSP-7). The one exception is a lane head's
/// delete, which commits durably on its own (`LaneStatements`): losing a run of them would
/// replay heads after later heads of their lane. What must be durable
/// is the transport's acceptance, and transports commit on their own connections. Dropping
/// the flush wait from claims and completions stops them competing with the writers'
/// commits for WAL flushes (docs/performance.md). Operator actions (lane release and skip)
/// opt back in for their own transactions.
pub fn asynchronous_commit(mut config: tokio_postgres::Config) -> tokio_postgres::Config {
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
