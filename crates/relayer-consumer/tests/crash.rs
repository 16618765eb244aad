//! A consumer process SIGKILLed mid-handler (QUE-3, QUE-5, LIF-3, §16).
//!
//! This test binary re-executes itself as a child process ([`crash_child`], selected by an
//! environment variable) running a pump with an inbox handler that writes its effect and
//! then blocks, after recording durably (on a separate connection) that it started. The
//! parent waits for that record, kills the child with SIGKILL, and starts a pump of its
//! own: the message reappears after its visibility timeout, is handled once more, and the
//! inbox boundary leaves exactly one effect.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{count, enqueue, fast, pool, setup, start};
use relayer_consumer::{Consumer, Handling, InboxHandler, Outcome, Subscription};
use relayer_core::Namespace;
use relayer_postgres::{PgNotifications, PgSession, PgSource, QueueMessage, connect_pool};
use relayer_test_support::eventually;
use tokio_util::sync::CancellationToken;

const CHILD_URL: &str = "RELAYER_CONSUMER_CRASH_CHILD_URL";
const CHILD_SCHEMA: &str = "RELAYER_CONSUMER_CRASH_CHILD_SCHEMA";
const PREFIX: &str = "relayer_";
const VISIBILITY: Duration = Duration::from_secs(1);

/// Writes the effect on the inbox transaction; in the child, also marks "started" durably
/// and then blocks until killed.
struct Effect {
    schema: String,
    blocks: bool,
    calls: AtomicU32,
    marker: Option<tokio_postgres::Client>,
}

#[relayer_core::async_trait]
impl InboxHandler<PgSession> for Effect {
    async fn handle(&self, tx: &PgSession, message: &QueueMessage) -> Outcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let insert = format!("INSERT INTO \"{}\".effects (message_id) VALUES ($1)", self.schema);
        if let Err(error) = tx.connection().execute(&insert, &[message.id.as_uuid()]).await {
            return Outcome::failed(error);
        }
        if let Some(marker) = &self.marker {
            let started = format!("INSERT INTO \"{}\".started (message_id) VALUES ($1)", self.schema);
            marker.execute(&started, &[message.id.as_uuid()]).await.unwrap();
        }
        if self.blocks {
            std::future::pending::<()>().await;
        }
        Outcome::Ack
    }
}

fn options() -> relayer_core::ConsumerOptions {
    fast().visibility_timeout(VISIBILITY).build().unwrap()
}

/// The child: a pump whose handler blocks mid-transaction, until it is killed.
#[test]
#[ignore = "the child process of the SIGKILL test; it runs only when that test starts it"]
fn crash_child() {
    let (Ok(url), Ok(schema)) = (std::env::var(CHILD_URL), std::env::var(CHILD_SCHEMA)) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let (marker, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let namespace = Namespace::new(schema.as_str(), PREFIX).unwrap();
        let handler = Effect { schema, blocks: true, calls: AtomicU32::new(0), marker: Some(marker) };
        let handling = Handling::Inbox(Arc::new(handler));
        let pool = connect_pool(config.clone(), 4).await.unwrap();
        let subscription = Subscription::new("billing", options()).unwrap();
        let (notifications, source) =
            (PgNotifications::queue(config, &namespace), PgSource::new(pool, &namespace));
        Consumer::new(notifications, source, namespace, subscription, handling)
            .run(CancellationToken::new())
            .await
            .unwrap();
    });
}

#[tokio::test]
async fn a_consumer_killed_mid_handler_lets_its_message_reappear_and_the_inbox_keeps_one_effect_que_5() {
    let db = setup().await;
    assert_eq!(db.namespace().prefix(), PREFIX);
    let client = db.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{0}\".effects (message_id uuid NOT NULL); CREATE TABLE \"{0}\".started (message_id uuid NOT NULL);",
            db.schema()
        ))
        .await
        .unwrap();
    let id = enqueue(&db, "billing", 1).await[0];

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "crash_child", "--nocapture"])
        .env(CHILD_URL, db.url())
        .env(CHILD_SCHEMA, db.schema())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = format!("SELECT count(*) FROM \"{}\".started", db.schema());
    eventually("the child's handler is running", || async {
        client.query_one(&started, &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let handler = Arc::new(Effect {
        schema: db.schema().to_owned(),
        blocks: false,
        calls: AtomicU32::new(0),
        marker: None,
    });
    let handling = Handling::Inbox(Arc::clone(&handler) as Arc<dyn InboxHandler<PgSession>>);
    let running = start(
        &db,
        pool(&db, "survivor", 4).await.0,
        Subscription::new("billing", options()).unwrap(),
        handling,
    )
    .await;
    eventually("the message reappears and is handled", || async { count(&db, "billing").await == 0 }).await;
    running.stop().await;
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "handled once more after the kill");
    let effects: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM \"{}\".effects WHERE message_id = $1", db.schema()),
            &[id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(effects, 1, "the killed handler's effect rolled back with its inbox row");
}
