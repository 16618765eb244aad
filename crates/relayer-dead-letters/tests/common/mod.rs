//! Fixtures for dead-letter tests: messages enter through relayer's queue transport, the
//! writer and the dispatcher; the only hand-written SQL is the dead-lettering step (until
//! the consumer lands, [`dead_letter`] stands in for it) and old timestamps, which no
//! component produces quickly.
#![allow(dead_code, clippy::unwrap_used)]

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer_core::{
    DeadLetterOptions, DeadLetterPolicies, DeadLetterRule, Envelope, MessageId, SendOutcome, Timestamp,
    Transport, TransportError, async_trait,
};
use relayer_dead_letters::DeadLetterWorker;
use relayer_postgres::{PgClient, PgPool, PgSource, connect_pool, migrate};
use relayer_queue::PgQueueTransport;
use relayer_test_support::TestDb;
use relayer_worker::Leadership;
use tokio_postgres::Client;

pub(crate) const HOUR: Duration = Duration::from_secs(3_600);
pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// A migrated namespace and a connection wrapped as the workers' pooled connections are.
pub(crate) async fn setup() -> (TestDb, PgClient) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, PgClient::new(client))
}

pub(crate) async fn pool(db: &TestDb, size: u32) -> PgPool {
    connect_pool(db.config(), size).await.unwrap()
}

/// relayer's PostgreSQL source on a pool of `size` connections of its own.
pub(crate) async fn source(db: &TestDb, size: u32) -> PgSource {
    PgSource::new(pool(db, size).await, db.namespace())
}

/// A worker applying `rules` in batches of `batch_size`, with no leader (the statements
/// alone keep replicas apart).
pub(crate) async fn worker(
    db: &TestDb,
    rules: Vec<DeadLetterRule>,
    batch_size: u32,
) -> DeadLetterWorker<PgSource> {
    let options = DeadLetterOptions::builder()
        .batch_size(batch_size)
        .interval(Duration::from_millis(100))
        .max_backoff(Duration::from_millis(200))
        .build()
        .unwrap();
    DeadLetterWorker::new(
        source(db, 1).await,
        db.namespace().clone(),
        DeadLetterPolicies::new(rules).unwrap(),
        options,
        Leadership::EveryInstance,
    )
}

/// Sends `count` messages to queue `queue` through relayer's queue transport, created at
/// `created_at` (the transport keeps the outbox's creation time); returns their ids.
pub(crate) async fn send(db: &TestDb, queue: &str, count: usize, created_at: Timestamp) -> Vec<MessageId> {
    let transport = PgQueueTransport::new(pool(db, 1).await, db.namespace());
    let mut ids = Vec::with_capacity(count);
    let envelopes: Vec<Envelope> = (0..count)
        .map(|n| {
            let id = MessageId::new();
            ids.push(id);
            Envelope {
                id,
                body: format!("{queue} #{n}").into_bytes(),
                headers: [("kind".to_owned(), queue.to_owned())].into(),
                created_at,
                trace_context: Some(format!("00-{n:032x}-0000000000000001-01")),
                lane: None,
                attempts: 0,
            }
        })
        .collect();
    for batch in envelopes.chunks(transport.batch_limit().get()) {
        let outcomes = transport.send(queue, batch).await.unwrap();
        assert!(outcomes.iter().all(|outcome| *outcome == SendOutcome::Accepted));
    }
    ids
}

/// The database's `now()`.
pub(crate) async fn db_now(client: &Client) -> Timestamp {
    let now: std::time::SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
    Timestamp::from_system_time(now)
}

/// Dead-letters the first `count` messages of `queue` into `dead_letter_queue` as a
/// consumer does (QUE-2): stamped with `original_topic`, `reason`, a message and
/// `dead_lettered_at = now()`, its handled count as a retrying consumer left it. The one
/// place that stands in for the consumer: at merge, switch it to the consumer's
/// dead-lettering.
pub(crate) async fn dead_letter(
    client: &Client,
    db: &TestDb,
    queue: &str,
    dead_letter_queue: &str,
    reason: &str,
    count: i64,
) -> u64 {
    let table = db.namespace().table("queue");
    client
        .execute(
            &format!(
                "UPDATE {table} SET queue = $2, original_topic = queue, rejection_reason = $3, \
                        rejection_message = 'handler gave up', dead_lettered_at = now(), handled_count = 5 \
                 WHERE seq = ANY(ARRAY(SELECT seq FROM {table} WHERE queue = $1 ORDER BY seq LIMIT $4))"
            ),
            &[&queue, &dead_letter_queue, &reason, &count],
        )
        .await
        .unwrap()
}

/// Moves `dead_lettered_at` of every dead letter of `topic` in `dead_letter_queue` to
/// `ago` before now (hand-written: no component makes an old dead letter quickly).
pub(crate) async fn dead_lettered_ago(
    client: &Client,
    db: &TestDb,
    dead_letter_queue: &str,
    topic: &str,
    ago: Duration,
) {
    let table = db.namespace().table("queue");
    let micros = i64::try_from(ago.as_micros()).unwrap();
    client
        .execute(
            &format!(
                "UPDATE {table} SET dead_lettered_at = now() - $3::int8 * interval '1 microsecond' \
                 WHERE queue = $1 AND original_topic = $2"
            ),
            &[&dead_letter_queue, &topic, &micros],
        )
        .await
        .unwrap();
}

/// How many rows of queue `queue` there are.
pub(crate) async fn in_queue(client: &Client, db: &TestDb, queue: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {} WHERE queue = $1", db.namespace().table("queue"));
    client.query_one(&sql, &[&queue]).await.unwrap().get(0)
}

pub(crate) async fn count(client: &Client, db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table(table));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// What a transport accepted: (destination, envelope).
pub(crate) type Sink = Arc<Mutex<Vec<(String, Envelope)>>>;

/// A real transport for tests that fails every message permanently while `failing` is on
/// (so rows reach the dead table at once), and otherwise records what it accepts.
pub(crate) struct SwitchTransport {
    pub(crate) failing: AtomicBool,
    pub(crate) sink: Sink,
}

impl SwitchTransport {
    pub(crate) fn failing() -> Arc<Self> {
        Arc::new(SwitchTransport { failing: AtomicBool::new(true), sink: Sink::default() })
    }

    pub(crate) fn heal(&self) {
        self.failing.store(false, Ordering::SeqCst);
    }

    pub(crate) fn accepted(&self) -> Vec<(String, Envelope)> {
        self.sink.lock().unwrap().clone()
    }
}

#[async_trait]
impl Transport for SwitchTransport {
    fn name(&self) -> &str {
        "switch"
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::new(100).unwrap()
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        if self.failing.load(Ordering::SeqCst) {
            return Ok(batch
                .iter()
                .map(|_| SendOutcome::Failed(TransportError::permanent("broker refused")))
                .collect());
        }
        let mut sink = self.sink.lock().unwrap();
        sink.extend(batch.iter().map(|envelope| (destination.to_owned(), envelope.clone())));
        Ok(vec![SendOutcome::Accepted; batch.len()])
    }
}

/// A dispatcher (max_attempts 1) whose only transport, `switch`, starts out failing: what it
/// sends goes to the dead table at once, until [`SwitchTransport::heal`].
pub(crate) async fn failing_dispatcher(
    db: &TestDb,
) -> (relayer_dispatcher::Dispatcher<relayer_postgres::PgSource>, Arc<SwitchTransport>) {
    let transport = SwitchTransport::failing();
    let pool = connect_pool(relayer_postgres::asynchronous_commit(db.config()), 1).await.unwrap();
    let registry = Arc::new(relayer_core::TransportRegistry::new().with(transport.clone()).unwrap());
    let source = relayer_postgres::PgSource::new(pool, db.namespace()).with_transports(registry.names());
    let dispatcher = relayer_dispatcher::Dispatcher::new(
        source,
        db.namespace().clone(),
        relayer_core::DispatcherOptions::builder()
            .max_attempts(std::num::NonZeroU32::new(1))
            .build()
            .unwrap(),
        registry,
    )
    .unwrap()
    .listening(relayer_postgres::PgNotifications::outbox(db.config(), db.namespace()));
    (dispatcher, transport)
}
