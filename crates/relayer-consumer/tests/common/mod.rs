//! Helpers shared by the consumer's tests: a migrated namespace, pools, a scripted handler,
//! and readers of the queue table.
#![allow(clippy::unwrap_used, dead_code, unreachable_pub)] // Test helpers; not every test uses each.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer_consumer::{Consumer, Handler, Handling, Outcome, Subscription};
use relayer_core::{ConsumerOptions, MessageId, NewMessage};
use relayer_postgres::{
    PgNotifications, PgPool, PgSession, PgSource, QueueMessage, QueueWriter, connect_pool, migrate,
};
use relayer_test_support::TestDb;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A test database with relayer's schema applied.
pub async fn setup() -> TestDb {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    db
}

/// A pool whose sessions carry `application_name` `{schema}_{name}`.
pub async fn pool(db: &TestDb, name: &str, size: u32) -> (PgPool, String) {
    let application_name = format!("{}_{name}", db.schema());
    let mut config = db.config();
    config.application_name(&application_name);
    (connect_pool(config, size).await.unwrap(), application_name)
}

/// Fast options: short requeue delays and polling, so loops cycle quickly.
pub fn fast() -> relayer_core::ConsumerOptionsBuilder {
    ConsumerOptions::builder()
        .requeue_delay(Duration::from_millis(10))
        .max_requeue_delay(Duration::from_millis(50))
        .poll_interval(Duration::from_millis(100))
        .max_backoff(Duration::from_millis(400))
        .shutdown_grace(Duration::from_secs(5))
}

/// Writes `count` messages for `queue` through relayer's direct writer, committed.
pub async fn enqueue(db: &TestDb, queue: &str, count: usize) -> Vec<MessageId> {
    let messages: Vec<NewMessage> =
        (0..count).map(|n| NewMessage::new("queue", queue, format!("{n}").into_bytes())).collect();
    enqueue_messages(db, &messages).await;
    messages.iter().map(NewMessage::message_id).collect()
}

pub async fn enqueue_messages(db: &TestDb, messages: &[NewMessage]) {
    let mut client = db.connect().await;
    let tx = client.transaction().await.unwrap();
    QueueWriter::new(db.namespace(), "queue").enqueue(&tx, messages).await.unwrap();
    tx.commit().await.unwrap();
}

/// A running consumer and what stops it.
pub struct Running {
    pub stats: Arc<relayer_consumer::ConsumerStats>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), relayer_worker::WorkerError>>>,
}

impl Running {
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            relayer_test_support::within(task).await.unwrap().unwrap();
        }
    }
}

pub async fn start(
    db: &TestDb,
    pool: PgPool,
    subscription: Subscription,
    handling: impl Into<Handling<PgSession>>,
) -> Running {
    let consumer = Consumer::new(
        PgNotifications::queue(db.config(), db.namespace()),
        PgSource::new(pool, db.namespace()),
        db.namespace().clone(),
        subscription,
        handling,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));
    Running { stats, shutdown, task: Some(task) }
}

type Behaviour = dyn Fn(QueueMessage, u32) -> Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync;

/// A handler that records every call per message id and behaves as scripted: the script
/// gets the message and the call's number for that id (1, 2, …).
pub struct Scripted {
    calls: Mutex<HashMap<MessageId, u32>>,
    running: AtomicUsize,
    pub max_running: AtomicUsize,
    behaviour: Box<Behaviour>,
}

impl Scripted {
    pub fn new<F, Fut>(behaviour: F) -> Arc<Self>
    where
        F: Fn(QueueMessage, u32) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        Arc::new(Scripted {
            calls: Mutex::default(),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            behaviour: Box::new(move |message, call| Box::pin(behaviour(message, call))),
        })
    }

    pub fn acking() -> Arc<Self> {
        Scripted::new(|_, _| async { Outcome::Ack })
    }

    pub fn calls(&self, id: MessageId) -> u32 {
        self.calls.lock().unwrap().get(&id).copied().unwrap_or(0)
    }

    pub fn total_calls(&self) -> u32 {
        self.calls.lock().unwrap().values().sum()
    }

    pub fn distinct(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

#[relayer_core::async_trait]
impl Handler for Scripted {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(message.id).or_insert(0);
            *n += 1;
            *n
        };
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let outcome = (self.behaviour)(message.clone(), call).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        outcome
    }
}

/// One row of the queue table, as a test reads it back.
#[derive(Debug)]
pub struct QueueRow {
    pub seq: i64,
    pub queue: String,
    pub handled_count: i32,
    pub original_topic: Option<String>,
    pub rejection_reason: Option<String>,
    pub rejection_message: Option<String>,
    pub dead_lettered: bool,
}

pub async fn rows(db: &TestDb, queue: &str) -> Vec<QueueRow> {
    let client = db.connect().await;
    let table = db.namespace().table("queue");
    client
        .query(
            &format!(
                "SELECT seq, queue, handled_count, original_topic, rejection_reason, rejection_message, \
                        dead_lettered_at IS NOT NULL FROM {table} WHERE queue = $1 ORDER BY seq"
            ),
            &[&queue],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| QueueRow {
            seq: row.get(0),
            queue: row.get(1),
            handled_count: row.get(2),
            original_topic: row.get(3),
            rejection_reason: row.get(4),
            rejection_message: row.get(5),
            dead_lettered: row.get(6),
        })
        .collect()
}

pub async fn count(db: &TestDb, queue: &str) -> usize {
    rows(db, queue).await.len()
}
