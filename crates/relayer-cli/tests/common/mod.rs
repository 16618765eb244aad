//! Running the `relayer` binary against a test namespace, and putting data there through
//! relayer's own components.
#![allow(dead_code, clippy::unwrap_used)]

use std::num::NonZeroUsize;
use std::process::{Command, Output};
use std::sync::Arc;

use relayer::{
    DispatcherOptions, Envelope, MessageId, NewMessage, Relayer, RelayerHost, SendOutcome, Transport,
    TransportError, async_trait,
};
use relayer_postgres::{OutboxWriter, migrate};
use relayer_test_support::{TestDb, eventually};
use tokio_postgres::Client;

/// What one run of the binary printed, and how it ended.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) success: bool,
    /// The exit status (`None`: ended by a signal).
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    /// Asserts success and returns standard output.
    pub(crate) fn ok(&self) -> &str {
        assert!(self.success, "relayer failed:\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        &self.stdout
    }
}

/// The binary, pointed at `db`'s database and namespace, acting as `ops-test`.
pub(crate) fn relayer_command(db: &TestDb) -> Command {
    relayer_command_at(&db.url(), db)
}

/// The binary, pointed at `url` and `db`'s namespace, acting as `ops-test`.
pub(crate) fn relayer_command_at(url: &str, db: &TestDb) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relayer"));
    command
        .args(["--database-url", url, "--schema", db.schema()])
        .env("USER", "ops-test")
        .env_remove("RELAYER_LOG");
    command
}

/// Runs the binary with `args` (on a blocking thread: it may take a moment).
pub(crate) async fn relayer(db: &TestDb, args: &[&str]) -> Ran {
    let mut command = relayer_command(db);
    command.args(args);
    ran(command).await
}

/// Runs the binary with `args` against `url` (another role, say) and `db`'s namespace.
pub(crate) async fn relayer_with_url(url: &str, db: &TestDb, args: &[&str]) -> Ran {
    let mut command = relayer_command_at(url, db);
    command.args(args);
    ran(command).await
}

async fn ran(mut command: Command) -> Ran {
    let output: Output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    Ran {
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A migrated namespace and a client on it.
pub(crate) async fn setup() -> (TestDb, Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

/// Writes `messages` through relayer's outbox writer.
pub(crate) async fn write(client: &Client, db: &TestDb, messages: &[NewMessage]) {
    let writer = OutboxWriter::new(db.namespace(), ["queue", "refusing"]);
    writer.enqueue(client, messages).await.unwrap();
}

/// Why the `Refusing` transport refuses: long, as real errors are, so tables must wrap it.
pub(crate) const REFUSAL: &str = "refused for good: the ledger accepts no entries for account 4711, \
     which was closed on 2026-11-30 by its owner (code 409, request 7f3a9c2e)";

/// A transport that refuses everything for good.
pub(crate) struct Refusing;

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

/// Parks lane `lane` behind a head the `Refusing` transport refuses: a host's dispatcher
/// with `max_attempts = 1` parks it on the first failure (LAN-2). Returns the head's id.
pub(crate) async fn park_lane(client: &Client, db: &TestDb, lane: &str, behind: usize) -> MessageId {
    let head = NewMessage::new("refusing", "ledger", b"head".to_vec()).lane(lane);
    let id = head.message_id();
    let mut messages = vec![head];
    messages.extend(
        (0..behind).map(|n| NewMessage::new("refusing", "ledger", format!("#{n}").into_bytes()).lane(lane)),
    );
    write(client, db, &messages).await;
    let host = dispatching_host(db).await;
    let parked = format!(
        "SELECT count(*) FROM {} WHERE lane = $1 AND parked_at IS NOT NULL",
        db.namespace().table("lanes")
    );
    eventually("the lane is parked", || async {
        client.query_one(&parked, &[&lane]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    host.shutdown().await;
    id
}

/// Kills `count` unordered messages to `destination`: the dispatcher moves each to the
/// outbox's dead table on its first refusal (DSP-5). Returns their ids, in seq order.
pub(crate) async fn kill(client: &Client, db: &TestDb, destination: &str, count: usize) -> Vec<MessageId> {
    let messages: Vec<NewMessage> = (0..count)
        .map(|n| NewMessage::new("refusing", destination, format!("{destination} #{n}").into_bytes()))
        .collect();
    let ids = messages.iter().map(NewMessage::message_id).collect();
    write(client, db, &messages).await;
    let host = dispatching_host(db).await;
    let dead = format!("SELECT count(*) FROM {} WHERE destination = $1", db.namespace().table("dead"));
    let expected = i64::try_from(count).unwrap();
    eventually("the messages are dead", || async {
        client.query_one(&dead, &[&destination]).await.unwrap().get::<_, i64>(0) == expected
    })
    .await;
    host.shutdown().await;
    ids
}

/// `text` with every run of whitespace one space: wrapped table cells read as written.
pub(crate) fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Asserts that no line of `text` is wider than 80 columns.
pub(crate) fn fits_80_columns(text: &str) {
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "wider than 80 columns: {line:?}\n{text}");
    }
}

/// A host whose dispatcher parks lanes after one failure.
pub(crate) async fn dispatching_host(db: &TestDb) -> RelayerHost {
    let options = DispatcherOptions::builder()
        .max_attempts(Some(std::num::NonZeroU32::MIN))
        .poll_interval(std::time::Duration::from_millis(50))
        .build()
        .unwrap();
    Relayer::builder(db.config(), db.namespace().clone())
        .transport(Arc::new(Refusing))
        .dispatcher(options)
        .start()
        .await
        .unwrap()
}

/// Sends `count` messages to queue `queue` through relayer's queue transport.
pub(crate) async fn send_to_queue(db: &TestDb, queue: &str, count: usize) -> Vec<MessageId> {
    let pool = relayer_postgres::connect_pool(db.config(), 1).await.unwrap();
    let transport = relayer::queue::PgQueueTransport::new(pool, db.namespace());
    let envelopes: Vec<Envelope> = (0..count)
        .map(|n| Envelope {
            id: MessageId::new(),
            body: format!("{queue} #{n}").into_bytes(),
            headers: [("kind".to_owned(), queue.to_owned())].into(),
            created_at: relayer::Timestamp::from_system_time(std::time::SystemTime::now()),
            trace_context: None,
            lane: None,
            attempts: 0,
        })
        .collect();
    let outcomes = transport.send(queue, &envelopes).await.unwrap();
    assert!(outcomes.iter().all(|o| *o == SendOutcome::Accepted));
    envelopes.iter().map(|e| e.id).collect()
}

/// Dead-letters every message of `queue` into `dead_letter_queue` with `reason`, as a
/// consumer does (QUE-2). The one hand-written step: it stands in for the consumer, which
/// is not on this branch; switch it to the consumer's dead-lettering at merge.
pub(crate) async fn dead_letter(
    client: &Client,
    db: &TestDb,
    queue: &str,
    dead_letter_queue: &str,
    reason: &str,
) {
    let table = db.namespace().table("queue");
    client
        .execute(
            &format!(
                "UPDATE {table} SET queue = $2, original_topic = queue, rejection_reason = $3, \
                 rejection_message = 'handler gave up', dead_lettered_at = now(), handled_count = 5 \
                 WHERE queue = $1"
            ),
            &[&queue, &dead_letter_queue, &reason],
        )
        .await
        .unwrap();
}

/// The audit rows: (actor, action, subject).
pub(crate) async fn audit(client: &Client, db: &TestDb) -> Vec<(String, String, String)> {
    let sql = format!("SELECT actor, action, subject FROM {} ORDER BY id", db.namespace().table("audit"));
    client.query(&sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

/// `SELECT count(*) FROM {table} WHERE {condition}`.
pub(crate) async fn count(client: &Client, db: &TestDb, table: &str, condition: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {} WHERE {condition}", db.namespace().table(table));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}
