//! Small real transports and fixtures for sweeper tests (no mocking libraries).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use relayer_core::StoreSource;
use relayer_core::{DispatcherOptions, NewMessage, SweeperOptions, SweeperOptionsBuilder, TransportRegistry};
use relayer_delivery::SendPath;
use relayer_postgres::{PgPool, PgSession, PgSource, connect_pool};
use relayer_sweeper::{LEASE_JOB, SweepReport, Sweeper};
use relayer_test_support::TestDb;
pub(crate) use relayer_test_support::{FaultyTransport, Sink};
#[allow(unused_imports)] // Not every test file uses both.
pub(crate) use relayer_test_support::{eventually, within};
use relayer_worker::{Leadership, PassOutcome, WorkerEvent};
use tokio::sync::broadcast;

/// The sweeper tests' transport: a [`FaultyTransport`] named `test` taking batches of 100,
/// accepting into `sink`.
pub(crate) fn transport(sink: Sink) -> FaultyTransport {
    FaultyTransport::with_sink("test", sink).with_batch_limit(100)
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

pub(crate) fn registry(transport: Arc<FaultyTransport>) -> Arc<TransportRegistry> {
    Arc::new(TransportRegistry::new().with(transport).unwrap())
}

pub(crate) fn lease(owner: &str, duration: Duration) -> Leadership {
    Leadership::lease(LEASE_JOB, owner, duration)
}

/// A sweeper on `pool`, sending through `transport`; rows naming another transport are
/// never read (TRN-6), as the facade's host builds it.
pub(crate) fn sweeper(
    pool: PgPool,
    db: &TestDb,
    options: SweeperOptionsBuilder,
    transport: Arc<FaultyTransport>,
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
