//! What the console tests share: a namespace holding backlog, a parked lane, dead rows and
//! queue dead letters — each made by relayer's own components — and a console serving it
//! on a thread of its own (the tests' WebDriver calls block).
#![allow(dead_code, clippy::unwrap_used)]

pub(crate) mod browser;
pub(crate) mod http;

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::{
    ConsumerOptions, DispatcherOptions, Envelope, MessageId, NewMessage, Relayer, SendOutcome, Transport,
    TransportError, async_trait,
};
use relayer_console::{Console, ConsoleSettings, History, Sample};
use relayer_postgres::{OutboxWriter, migrate};
use relayer_test_support::{TestDb, eventually};
use tokio_postgres::Client;

/// Why the refusing transport refuses; markup in it must show as text.
pub(crate) const REFUSAL: &str = "refused for good: <b>account 4711</b> is closed";
/// Why the handler rejects; markup and a direction control in it must show as text.
pub(crate) const REJECTION: &str = "<script>alert('x')</script> needs review \u{202e}";
/// The parked lane.
pub(crate) const LANE: &str = "ledger-7";

/// A transport that refuses everything for good.
struct Refusing;

#[async_trait]
impl Transport for Refusing {
    fn name(&self) -> &str {
        "refusing"
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::MIN
    }

    async fn send(&self, _destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        Ok(batch.iter().map(|_| SendOutcome::Failed(TransportError::permanent(REFUSAL))).collect())
    }
}

/// A handler that rejects every message.
struct Rejecting;

#[async_trait]
impl Handler for Rejecting {
    async fn handle(&self, _message: &QueueMessage) -> Outcome {
        Outcome::reject(REJECTION)
    }
}

/// A namespace with something in every corner of the console.
pub(crate) struct Scene {
    pub(crate) db: TestDb,
    pub(crate) client: Client,
    /// The queue the rejected messages came from, and their dead-letter queue.
    pub(crate) queue: String,
    pub(crate) dead_letter_queue: String,
    /// The dead letters' ids, in the order they were sent.
    pub(crate) letters: Vec<MessageId>,
}

impl Scene {
    /// Backlog on a transport nothing serves (3 rows to `d1`, 2 to `d2`), a parked lane with
    /// 2 rows behind its head, 2 dead outbox rows, and 3 queue dead letters.
    pub(crate) async fn new() -> Scene {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        migrate(&mut client, db.namespace()).await.unwrap();
        let writer = OutboxWriter::new(db.namespace(), ["nowhere", "refusing"]);
        let mut messages: Vec<NewMessage> = Vec::new();
        for (destination, n) in [("d1", 3), ("d2", 2)] {
            messages.extend((0..n).map(|i| {
                NewMessage::new("nowhere", destination, format!("{destination} #{i}").into_bytes())
            }));
        }
        messages.push(NewMessage::new("refusing", "ledger", b"head".to_vec()).lane(LANE));
        messages.extend(
            (0..2).map(|i| {
                NewMessage::new("refusing", "ledger", format!("behind #{i}").into_bytes()).lane(LANE)
            }),
        );
        messages.extend(
            (0..2).map(|i| NewMessage::new("refusing", "audit-log", format!("audit #{i}").into_bytes())),
        );
        writer.enqueue(&client, &messages).await.unwrap();

        // A dispatcher that gives up after one failure parks the lane and kills the rest.
        let options = DispatcherOptions::builder()
            .max_attempts(Some(NonZeroU32::MIN))
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap();
        let host = Relayer::builder(db.config(), db.namespace().clone())
            .transport(Arc::new(Refusing))
            .dispatcher(options)
            .start()
            .await
            .unwrap();
        let settled = format!(
            "SELECT (SELECT count(*) FROM {lanes} WHERE parked_at IS NOT NULL), (SELECT count(*) FROM {dead})",
            lanes = db.namespace().table("lanes"),
            dead = db.namespace().table("dead"),
        );
        eventually("the lane is parked and the others dead", || async {
            let row = client.query_one(&settled, &[]).await.unwrap();
            row.get::<_, i64>(0) == 1 && row.get::<_, i64>(1) == 2
        })
        .await;
        host.shutdown().await;

        // A consumer that rejects everything dead-letters what it is given (QUE-2).
        let consumer_options =
            ConsumerOptions::builder().poll_interval(Duration::from_millis(50)).build().unwrap();
        let subscription = Subscription::new("orders", consumer_options).unwrap();
        let dead_letter_queue = subscription.dead_letter_queue().to_owned();
        let host = Relayer::builder(db.config(), db.namespace().clone())
            .queue_transport()
            .consumer(subscription, Arc::new(Rejecting))
            .start()
            .await
            .unwrap();
        let orders: Vec<NewMessage> = (0..3)
            .map(|i| {
                NewMessage::new("queue", "orders", format!("<order n=\"{i}\"/> & more").into_bytes())
                    .header("kind", "order<script>")
            })
            .collect();
        let letters = orders.iter().map(NewMessage::message_id).collect();
        host.queue_writer().enqueue(&client, &orders).await.unwrap();
        let dead = format!(
            "SELECT count(*) FROM {} WHERE dead_lettered_at IS NOT NULL",
            db.namespace().table("queue")
        );
        eventually("the orders are dead-lettered", || async {
            client.query_one(&dead, &[]).await.unwrap().get::<_, i64>(0) == 3
        })
        .await;
        host.shutdown().await;
        Scene { db, client, queue: "orders".to_owned(), dead_letter_queue, letters }
    }

    /// `SELECT count(*) FROM <table> WHERE <condition>`.
    pub(crate) async fn count(&self, table: &str, condition: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {} WHERE {condition}", self.db.namespace().table(table));
        self.client.query_one(&sql, &[]).await.unwrap().get(0)
    }

    /// The audit rows: (actor, action, subject).
    pub(crate) async fn audit(&self) -> Vec<(String, String, String)> {
        let sql =
            format!("SELECT actor, action, subject FROM {} ORDER BY id", self.db.namespace().table("audit"));
        self.client.query(&sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
    }
}

/// A console serving `scene`'s namespace on a thread of its own; stops when dropped.
pub(crate) struct Served {
    pub(crate) address: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// `http://address/path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

/// Serves the console of `db` with `settings` (listening on a free loopback port).
pub(crate) fn serve(db: &TestDb, mut settings: ConsoleSettings) -> Served {
    settings.listen = "127.0.0.1:0".parse().unwrap();
    let (config, namespace) = (db.config(), db.namespace().clone());
    // An hour of history, so the chart has something to draw.
    let history = History::new(Duration::from_secs(3_600));
    let now = std::time::SystemTime::now();
    for minutes in (0..60).rev() {
        history.push(Sample {
            at: now - Duration::from_secs(minutes * 60),
            backlog: i64::try_from(60 - minutes).unwrap(),
            oldest_seconds: f64::from(u32::try_from(minutes).unwrap()),
            dead_letters: 3,
        });
    }
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let console = Console::new(settings, config, namespace).history(history).bind().await;
            match console {
                Ok(console) => {
                    bound_tx.send(Ok(console.local_addr().to_string())).unwrap();
                    console.serve(async move { drop(stopped.await) }).await.unwrap();
                }
                Err(error) => bound_tx.send(Err(error.to_string())).unwrap(),
            }
        });
    });
    let address = bound_rx.recv().unwrap().unwrap_or_else(|e| panic!("the console did not start: {e}"));
    Served { address, stop: Some(stop), thread: Some(thread) }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
