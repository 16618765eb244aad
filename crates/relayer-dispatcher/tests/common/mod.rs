//! Small real transports and fixtures for dispatcher tests (no mocking libraries).
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer_core::{
    DispatcherOptions, DispatcherOptionsBuilder, Envelope, SendOutcome, Transport, TransportError,
    TransportRegistry, async_trait,
};
use relayer_dispatcher::{Dispatcher, asynchronous_commit};
use relayer_test_support::TestDb;
#[allow(unused_imports)] // Not every test file waits on state.
pub(crate) use relayer_test_support::eventually;

/// What a transport accepted: (destination, envelope), in acceptance order. Shared by the
/// transports of several dispatchers so a test sees every delivery.
pub(crate) type Sink = Arc<Mutex<Vec<(String, Envelope)>>>;

/// A recording transport with injectable failures, panics and slowness.
pub(crate) struct TestTransport {
    pub(crate) name: String,
    pub(crate) limit: usize,
    pub(crate) sink: Sink,
    pub(crate) calls: AtomicU32,
    /// Fail (whole batch, `Err`) the first n calls.
    pub(crate) fail_first_calls: AtomicU32,
    /// Fail every call whose number (from 1) is a multiple of this (0: never).
    pub(crate) fail_every_nth_call: u32,
    /// Panic on the first n calls.
    pub(crate) panic_first_calls: AtomicU32,
    /// Messages whose body is in this set fail (per-message outcome) while `failing` is on.
    pub(crate) failing_bodies: Mutex<HashSet<Vec<u8>>>,
    /// Every message fails while this is on.
    pub(crate) failing: AtomicBool,
    /// Failures are permanent instead of transient.
    pub(crate) permanent: bool,
    /// Each call sleeps this long before answering.
    pub(crate) delay: Duration,
}

impl TestTransport {
    pub(crate) fn new(name: &str) -> Self {
        TestTransport::with_sink(name, Sink::default())
    }

    pub(crate) fn with_sink(name: &str, sink: Sink) -> Self {
        TestTransport {
            name: name.to_owned(),
            limit: 50,
            sink,
            calls: AtomicU32::new(0),
            fail_first_calls: AtomicU32::new(0),
            fail_every_nth_call: 0,
            panic_first_calls: AtomicU32::new(0),
            failing_bodies: Mutex::new(HashSet::new()),
            failing: AtomicBool::new(false),
            permanent: false,
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn accepted(&self) -> Vec<(String, Envelope)> {
        self.sink.lock().unwrap().clone()
    }

    fn error(&self, what: &str) -> TransportError {
        if self.permanent { TransportError::permanent(what) } else { TransportError::transient(what) }
    }
}

fn take_one(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

#[async_trait]
impl Transport for TestTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.limit).unwrap()
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if take_one(&self.panic_first_calls) {
            panic!("injected transport panic");
        }
        if take_one(&self.fail_first_calls) {
            return Err(self.error("injected batch failure"));
        }
        if self.fail_every_nth_call > 0 && call.is_multiple_of(self.fail_every_nth_call) {
            return Err(self.error("injected periodic failure"));
        }
        let failing_all = self.failing.load(Ordering::SeqCst);
        let failing_bodies = self.failing_bodies.lock().unwrap().clone();
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut sink = self.sink.lock().unwrap();
        for envelope in batch {
            if failing_all || failing_bodies.contains(&envelope.body) {
                outcomes.push(SendOutcome::Failed(self.error("injected message failure")));
            } else {
                sink.push((destination.to_owned(), envelope.clone()));
                outcomes.push(SendOutcome::Accepted);
            }
        }
        Ok(outcomes)
    }
}

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
    transport: Arc<TestTransport>,
    pool_size: u32,
) -> Dispatcher {
    let registry = TransportRegistry::new().with(transport).unwrap();
    let pool = relayer_postgres::connect_pool(asynchronous_commit(db.config()), pool_size).await.unwrap();
    Dispatcher::new(pool, db.namespace().clone(), options.build().unwrap(), Arc::new(registry))
        .unwrap()
        .listening(db.config())
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
