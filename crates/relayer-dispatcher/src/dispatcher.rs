//! The dispatcher worker: [`Dispatcher::new`] (store source, namespace, options, transports) →
//! [`Dispatcher::run`] → its pass loops, each pass also available as
//! [`Dispatcher::run_once`] → [`PassReport`].

use std::sync::{Arc, Mutex};

use relayer_core::session::StoreSource;
use relayer_core::store::{AdministerLanes, ClaimOutbox, Enqueued, StoreError as _, VerifySchema};
use relayer_core::{DispatcherOptions, Heard, Namespace, Notifications, TransportRegistry, error_chain};
use relayer_delivery::SendPath;
use relayer_worker::{Leadership, PassLoop, WorkerError, WorkerEvent, WorkerKind};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::store;
use crate::pass::{DispatchPass, Work};
use crate::report::PassReport;
use crate::session::DispatchSession;
use crate::shared::{Shared, TARGET};
use crate::wake::Wake;

/// Test signals kept for slow subscribers.
const EVENT_CAPACITY: usize = 256;

/// Sends committed outbox rows to their transports. Cheap to clone: clones share one
/// store source, one send path (and its circuit breakers), one wake-up and one event
/// channel.
///
/// It reaches its store only through `S`, a [`StoreSource`] whose sessions are
/// [`DispatchSession`]s; operator actions on lanes also need [`AdministerLanes`].
/// relayer's is `relayer_postgres::PgSource`, on a pool built from
/// `relayer_postgres::asynchronous_commit(config)`: claims and completions then skip the
/// WAL flush wait, which is safe for the dispatcher and only for it (see that function).
pub struct Dispatcher<S> {
    shared: Arc<Shared<S>>,
    /// Where wake-ups come from; without them, the loops poll and are woken by
    /// [`Dispatcher::committed`] and [`Dispatcher::dispatch_now`] only.
    notifications: Option<Arc<dyn Notifications>>,
    events: broadcast::Sender<WorkerEvent<PassReport>>,
}

impl<S> Clone for Dispatcher<S> {
    fn clone(&self) -> Self {
        Dispatcher {
            shared: Arc::clone(&self.shared),
            notifications: self.notifications.clone(),
            events: self.events.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Dispatcher<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("namespace", &self.shared.namespace)
            .field("send", &self.shared.send)
            .field("listens", &self.notifications.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Dispatcher<S>
where
    S: StoreSource,
    S::Session: DispatchSession,
{
    /// A dispatcher for `namespace`, opening one session of `source` per pass (a pool of
    /// one works, LIF-2) and sending through `transports` with `options`.
    ///
    /// `source` must work on `namespace` (which the worker's logs name), and should claim
    /// only rows of the transports in `transports` (TRN-6), so rows of another transport
    /// wait for an instance that has it, unread: with relayer's source,
    /// `PgSource::new(pool, &namespace).with_transports(transports.names())`. A source that
    /// hands such rows over anyway gets them back unsent, no attempt counted.
    ///
    /// Refuses an empty registry (OPT-5). The schema is checked when [`run`](Self::run)
    /// starts.
    pub fn new(
        source: S,
        namespace: Namespace,
        options: DispatcherOptions,
        transports: Arc<TransportRegistry>,
    ) -> Result<Self, WorkerError> {
        if transports.is_empty() {
            return Err(WorkerError::permanent("building the dispatcher", "no transport is registered"));
        }
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let shared = Shared {
            send: SendPath::new(transports, options.clone()),
            wake: Arc::new(Wake::default()),
            lane_cursor: Mutex::new(String::new()),
            lanes_seen: std::sync::atomic::AtomicBool::new(false),
            last_send_micros: std::sync::atomic::AtomicU64::new(u64::MAX),
            source,
            namespace,
            options,
        };
        Ok(Dispatcher { shared: Arc::new(shared), notifications: None, events })
    }

    /// Wakes the loops on `notifications` of the namespace's outbox channel (OUT-4) —
    /// relayer's: `PgNotifications::outbox(database, &namespace)`, one dedicated connection
    /// held while running, never a pooled one (it must not starve passes, LIF-2). Without
    /// it the loops poll every `poll_interval`.
    pub fn listening(mut self, notifications: impl Notifications) -> Self {
        self.notifications = Some(Arc::new(notifications));
        self
    }

    /// The namespace whose outbox this dispatcher drains.
    pub fn namespace(&self) -> &Namespace {
        &self.shared.namespace
    }

    /// The options this dispatcher runs with (immutable, OPT-4).
    pub fn options(&self) -> &DispatcherOptions {
        &self.shared.options
    }

    /// The send path (its transports, its circuit breakers).
    pub fn send_path(&self) -> &SendPath {
        &self.shared.send
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
    /// Returns an error only when it cannot start: no transport, or the schema is of another
    /// version (OPT-5). A database that cannot be reached yet, or whose schema is not applied
    /// yet, is waited for with backoff (RES-4).
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        if !self.wait_for_schema(&shutdown).await? {
            return Ok(());
        }
        let shared = &self.shared;
        let listener = self.notifications.clone().map(|notifications| {
            // Every notification, and every (re)connect (rows may have committed while nobody
            // listened), wakes every pass loop (OUT-4).
            let wake = Arc::clone(&shared.wake);
            let heard = move |_: Heard<'_>| wake.all();
            let (backoff, until) =
                (shared.options.pass_backoff(), Box::pin(shutdown.clone().cancelled_owned()));
            tokio::spawn(async move { notifications.listen(backoff, Box::new(heard), until).await })
        });
        let backoff = shared.options.pass_backoff();
        let linger = shared.options.linger();
        let pass_loop = |work: Work, pass: Arc<DispatchPass<S>>| {
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

    /// Checks the schema before the loops start: a wrong version is refused; a schema not
    /// applied yet and a database not reachable yet are retried with backoff (RES-4).
    /// `false`: shut down meanwhile.
    async fn wait_for_schema(&self, shutdown: &CancellationToken) -> Result<bool, WorkerError> {
        let backoff = self.shared.options.pass_backoff();
        let mut failures = 0u32;
        loop {
            let checked = match self.shared.source.open().await {
                // A schema not applied yet is waited for like an outage (RES-4); a wrong
                // version ends the dispatcher.
                Ok(session) => match session.verify_schema().await {
                    Ok(_) => Ok(()),
                    Err(error) if error.is_schema_missing() => Err((
                        true,
                        WorkerError::store("checking the namespace's schema (not applied yet)", error),
                    )),
                    Err(error) => Err((false, WorkerError::store("checking the namespace's schema", error))),
                },
                Err(error) => {
                    Err((false, WorkerError::store("opening a store session to check the schema", error)))
                }
            };
            match checked {
                Ok(()) => return Ok(true),
                Err((missing, error)) if !missing && !error.is_transient() => return Err(error),
                Err((_, error)) => {
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

    /// One pass of each kind of work on one session of the dispatcher's source (LIF-2: it
    /// uses no other connection): claim and send due unordered rows, then due lane heads.
    pub async fn run_once(&self) -> Result<PassReport, WorkerError> {
        let session = self.shared.source.open().await.map_err(store("opening a store session"))?;
        let mut report = self.shared.unordered_pass(&session, &CancellationToken::new()).await?;
        report.absorb(&self.shared.lane_pass(&session).await?);
        Ok(report)
    }

    /// Tells this dispatcher that the caller just committed outbox rows: its loops wake at
    /// once, without a database round trip (commit-triggered dispatch in the writing
    /// process, OUT-4). Pairs with `OutboxWriter::without_notify`; harmless otherwise.
    pub fn committed(&self) {
        self.shared.wake.all();
    }

    /// Sends the rows this process just committed, at once (OUT-4's commit-triggered
    /// dispatch), on one store session. Rows another dispatcher already holds, lane rows
    /// and rows not yet due are left to the passes, and so is everything past the first
    /// `batch_size` rows: one call claims, holds in memory and sends at most a batch, like
    /// a pass (a caller enqueueing 100 000 rows at once must not claim them all under one
    /// claim deadline).
    pub async fn dispatch_now(&self, written: &[Enqueued]) -> Result<PassReport, WorkerError> {
        if written.is_empty() {
            return Ok(PassReport::default());
        }
        let session = self.shared.source.open().await.map_err(store("opening a store session"))?;
        let batch = usize::try_from(self.shared.options.batch_size()).unwrap_or(usize::MAX);
        let seqs: Vec<i64> = written.iter().take(batch).map(|w| w.seq).collect();
        let left_to_the_loop = written.len() > seqs.len();
        let token = Uuid::new_v4();
        // Taken before the claim is sent: the send deadline errs early, never late (TRN-5).
        let claimed_at = tokio::time::Instant::now();
        let claimed = session
            .claim_seqs(token, self.shared.options.claim_duration(), &seqs)
            .await
            .map_err(store("claiming just-written outbox rows"))?;
        let has_lane_rows = claimed.messages.len() + claimed.undecodable.len() < seqs.len();
        let report = self.shared.send_and_complete(&session, token, claimed_at, claimed).await?;
        if has_lane_rows || left_to_the_loop {
            // Lane rows, rows held elsewhere or past the batch: let the loop look now rather
            // than at the next poll.
            self.shared.wake.all();
        }
        Ok(report)
    }
}

impl<S> Dispatcher<S>
where
    S: StoreSource,
    S::Session: DispatchSession + AdministerLanes,
{
    /// Operator action (LAN-2, LAN-5): un-parks `lane`, whose head is then tried again at
    /// once; recorded in the audit table with `actor`, and durable once it returned.
    /// Returns false when it was not parked.
    pub async fn release_lane(&self, lane: &str, actor: &str) -> Result<bool, WorkerError> {
        let session = self.shared.source.open().await.map_err(store("opening a store session"))?;
        let released = session.release_lane(lane, actor).await.map_err(store("releasing a parked lane"))?;
        if released {
            self.shared.wake.all();
        }
        Ok(released)
    }

    /// Operator action (LAN-5): moves the head of the parked `lane` to the dead table so the
    /// rows behind it flow; recorded in the audit table with `actor`, and durable once it
    /// returned. Returns the moved head's `seq`, or `None` when the lane was not parked.
    pub async fn skip_lane_head(&self, lane: &str, actor: &str) -> Result<Option<i64>, WorkerError> {
        let session = self.shared.source.open().await.map_err(store("opening a store session"))?;
        let skipped =
            session.skip_lane_head(lane, actor).await.map_err(store("skipping a parked lane's head"))?;
        if skipped.is_some() {
            self.shared.wake.all();
        }
        Ok(skipped)
    }
}
