//! Fixtures for dispatcher tests: a migrated database, fast options, and the test-support
//! crate's recording transport (no mocking libraries).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use relayer_core::{DispatcherOptions, DispatcherOptionsBuilder, TransportRegistry};
use relayer_dispatcher::{Dispatcher, PassReport};
use relayer_postgres::{OutboxWriter, PgNotifications, PgSource, asynchronous_commit};
use relayer_test_support::TestDb;
#[allow(unused_imports)] // Not every test file waits on state.
pub(crate) use relayer_test_support::eventually;
use relayer_worker::WorkerError;

/// The recording transport with injectable faults that users get too.
pub(crate) use relayer_test_support::FaultyTransport;
#[allow(unused_imports)] // Only the multi-dispatcher tests share a sink.
pub(crate) use relayer_test_support::Sink;

/// A migrated test database.
pub(crate) async fn database() -> TestDb {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    db
}

/// Options for tests: fast retries and polls.
pub(crate) fn options() -> DispatcherOptionsBuilder {
    DispatcherOptions::builder()
        .retry_base(Duration::from_millis(10))
        .retry_max(Duration::from_millis(50))
        .poll_interval(Duration::from_millis(50))
        .max_backoff(Duration::from_millis(200))
}

pub(crate) async fn dispatcher(
    db: &TestDb,
    options: DispatcherOptionsBuilder,
    transport: Arc<FaultyTransport>,
    pool_size: u32,
) -> Dispatcher<PgSource> {
    let registry = Arc::new(TransportRegistry::new().with(transport).unwrap());
    let pool = relayer_postgres::connect_pool(asynchronous_commit(db.config()), pool_size).await.unwrap();
    let source = PgSource::new(pool, db.namespace()).with_transports(registry.names());
    Dispatcher::new(source, db.namespace().clone(), options.build().unwrap(), registry)
        .unwrap()
        .listening(PgNotifications::outbox(db.config(), db.namespace()))
}

/// One pass of each kind on a session of the dispatcher's own source.
pub(crate) async fn run_once(dispatcher: &Dispatcher<PgSource>) -> Result<PassReport, WorkerError> {
    dispatcher.run_once().await
}

/// A writer for the dispatcher's namespace accepting exactly its transports and its
/// `max_body_bytes`.
pub(crate) fn writer(dispatcher: &Dispatcher<PgSource>) -> OutboxWriter {
    OutboxWriter::for_registry(dispatcher.namespace(), dispatcher.send_path().transports())
        .with_max_body_bytes(dispatcher.options().max_body_bytes())
}

pub(crate) async fn count(client: &tokio_postgres::Client, db: &TestDb, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table(table)), &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits (on the dispatcher's events, never polling) until its passes have sent `n` more
/// messages.
pub(crate) async fn passes_send(
    events: &mut tokio::sync::broadcast::Receiver<
        relayer_worker::WorkerEvent<relayer_dispatcher::PassReport>,
    >,
    n: u64,
) {
    relayer_test_support::within(async {
        let mut sent = 0;
        while sent < n {
            match events.recv().await {
                Ok(relayer_worker::WorkerEvent::PassSucceeded {
                    outcome: relayer_worker::PassOutcome::Led(report),
                    ..
                }) => {
                    sent += report.sent;
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    panic!("the dispatcher's events ended")
                }
            }
        }
    })
    .await;
}
