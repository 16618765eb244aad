//! Small real transports and fixtures for sweeper tests (no mocking libraries).
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer_core::StoreSource;
use relayer_core::{
    DispatcherOptions, Envelope, NewMessage, SendOutcome, SweeperOptions, SweeperOptionsBuilder, Transport,
    TransportError, TransportRegistry, async_trait,
};
use relayer_delivery::SendPath;
use relayer_postgres::{PgPool, PgSession, PgSource, connect_pool};
use relayer_sweeper::{LEASE_JOB, SweepReport, Sweeper};
use relayer_test_support::TestDb;
#[allow(unused_imports)] // Not every test file uses both.
pub(crate) use relayer_test_support::{eventually, within};
use relayer_worker::{Leadership, PassOutcome, WorkerEvent};
use tokio::sync::{Notify, Semaphore, broadcast};

/// What the transports accepted: (destination, envelope), in acceptance order. Shared by
/// the transports of several sweepers so a test sees every delivery.
pub(crate) type Sink = Arc<Mutex<Vec<(String, Envelope)>>>;

/// A recording transport named `test` with injectable failures, slowness and a gate.
pub(crate) struct TestTransport {
    pub(crate) sink: Sink,
    pub(crate) calls: AtomicU32,
    /// Fail (whole batch, `Err`) the first n calls.
    pub(crate) fail_first_calls: AtomicU32,
    /// Messages to these destinations fail (per-message outcome).
    pub(crate) failing_destinations: Mutex<HashSet<String>>,
    /// Each call sleeps this long before answering.
    pub(crate) delay: Duration,
    /// When set, every call waits for a permit before answering (see [`TestTransport::open_gate`]).
    pub(crate) gated: AtomicBool,
    gate: Semaphore,
    /// Notified (a stored permit) each time a call starts.
    pub(crate) entered: Notify,
    /// Send calls in flight right now, and the most ever seen at once.
    in_flight: AtomicUsize,
    pub(crate) max_in_flight: AtomicUsize,
}

impl TestTransport {
    pub(crate) fn new(sink: Sink) -> Self {
        TestTransport {
            sink,
            calls: AtomicU32::new(0),
            fail_first_calls: AtomicU32::new(0),
            failing_destinations: Mutex::new(HashSet::new()),
            delay: Duration::ZERO,
            gated: AtomicBool::new(false),
            gate: Semaphore::new(0),
            entered: Notify::new(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }

    pub(crate) fn accepted(&self) -> Vec<(String, Envelope)> {
        self.sink.lock().unwrap().clone()
    }

    /// Lets every waiting and future gated call through.
    pub(crate) fn open_gate(&self) {
        self.gated.store(false, Ordering::SeqCst);
        self.gate.add_permits(1_000);
    }
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Transport for TestTransport {
    fn name(&self) -> &str {
        "test"
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::new(100).unwrap()
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&self.in_flight);
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.entered.notify_one();
        if self.gated.load(Ordering::SeqCst) {
            self.gate.acquire().await.unwrap().forget();
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if self
            .fail_first_calls
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(TransportError::transient("injected batch failure"));
        }
        let failing = self.failing_destinations.lock().unwrap().contains(destination);
        let mut sink = self.sink.lock().unwrap();
        Ok(batch
            .iter()
            .map(|envelope| {
                if failing {
                    SendOutcome::Failed(TransportError::transient("injected destination failure"))
                } else {
                    sink.push((destination.to_owned(), envelope.clone()));
                    SendOutcome::Accepted
                }
            })
            .collect())
    }
}

/// A migrated test database.
pub(crate) async fn database() -> TestDb {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    db
}

/// A pool whose sessions carry `application_name` `{schema}_{name}`.
pub(crate) async fn pool(db: &TestDb, name: &str, size: u32) -> (PgPool, String) {
    let application_name = format!("{}_{name}", db.schema());
    let mut config = db.config();
    config.application_name(&application_name);
    (connect_pool(config, size).await.unwrap(), application_name)
}

/// Sweeper options for tests: every row is old enough at once, and passes cycle quickly.
pub(crate) fn options(batch_size: u32) -> SweeperOptionsBuilder {
    SweeperOptions::builder()
        .batch_size(batch_size)
        .recovery_delay(Duration::ZERO)
        .sweep_interval(Duration::from_millis(20))
        .max_backoff(Duration::from_millis(200))
}

/// The retry and breaker policy for tests: fast retries and short cool-downs.
pub(crate) fn dispatch_options() -> DispatcherOptions {
    DispatcherOptions::builder()
        .retry_base(Duration::from_millis(10))
        .retry_max(Duration::from_millis(50))
        .breaker_cool_down(Duration::from_millis(100))
        .build()
        .unwrap()
}

pub(crate) fn registry(transport: Arc<TestTransport>) -> Arc<TransportRegistry> {
    Arc::new(TransportRegistry::new().with(transport).unwrap())
}

pub(crate) fn lease(owner: &str, duration: Duration) -> Leadership {
    Leadership::lease(LEASE_JOB, owner, duration)
}

/// A sweeper on `pool`, sending through `transport`; rows naming another transport are
/// buried as undecodable, as the facade's host builds it.
pub(crate) fn sweeper(
    pool: PgPool,
    db: &TestDb,
    options: SweeperOptionsBuilder,
    transport: Arc<TestTransport>,
    leadership: Leadership,
) -> Sweeper<PgSource> {
    let send = SendPath::new(registry(transport), dispatch_options());
    let source = PgSource::new(pool, db.namespace()).with_transports(send.transports().names());
    Sweeper::new(source, db.namespace().clone(), options.build().unwrap(), send, leadership)
}

/// A session of the sweeper's own source, for `run_once`.
pub(crate) async fn session(sweeper: &Sweeper<PgSource>) -> PgSession {
    sweeper.source().open().await.unwrap()
}

pub(crate) fn message(destination: &str, n: usize) -> NewMessage {
    NewMessage::new("test", destination, format!("{destination}-{n}").into_bytes())
}

pub(crate) async fn count(client: &tokio_postgres::Client, db: &TestDb, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table(table)), &[])
        .await
        .unwrap()
        .get(0)
}

/// The next pass outcome (success or failure), skipping `PassStarted`.
pub(crate) async fn next_outcome(
    events: &mut broadcast::Receiver<WorkerEvent<SweepReport>>,
) -> WorkerEvent<SweepReport> {
    within(async {
        loop {
            match events.recv().await {
                Ok(WorkerEvent::PassStarted { .. }) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Ok(other) => return other,
                Err(broadcast::error::RecvError::Closed) => panic!("the worker's events ended"),
            }
        }
    })
    .await
}

/// Waits for the next pass this instance led.
pub(crate) async fn next_led(events: &mut broadcast::Receiver<WorkerEvent<SweepReport>>) -> SweepReport {
    loop {
        if let WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } =
            next_outcome(events).await
        {
            return report;
        }
    }
}

/// Waits until a pass of this instance found another leader.
pub(crate) async fn next_not_leader(events: &mut broadcast::Receiver<WorkerEvent<SweepReport>>) {
    loop {
        if let WorkerEvent::PassSucceeded { outcome: PassOutcome::NotLeader, .. } = next_outcome(events).await
        {
            return;
        }
    }
}
