//! Crash windows of the pump, hit on purpose through test-support's `FaultyStore` around
//! relayer's PostgreSQL source (QUE-3, QUE-5): an ack whose answer is lost after the
//! handler succeeded, an inbox transaction whose commit answer is lost. Each checks on the
//! real tables that the handler ran, and its effects happened, exactly once.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use common::{Scripted, count, enqueue, fast, pool, setup};
use relayer_consumer::{Consumer, Handling, InboxHandler, Outcome, StatsSnapshot, Subscription};
use relayer_postgres::{PgNotifications, PgSession, PgSource, QueueMessage};
use relayer_test_support::{Fault, FaultyStore, StoreCall, TestDb, Transience, eventually, within};
use tokio_util::sync::CancellationToken;

/// Runs a pump of queue `orders` on `store` until the returned token is cancelled; returns
/// the token, a reader of its counters, and its task.
async fn run(
    db: &TestDb,
    store: FaultyStore<PgSource>,
    handling: impl Into<Handling<<FaultyStore<PgSource> as relayer_core::StoreSource>::Session>>,
) -> (CancellationToken, impl Fn() -> StatsSnapshot, tokio::task::JoinHandle<()>) {
    let subscription = Subscription::new("orders", fast().build().unwrap()).unwrap();
    let consumer = Consumer::new(
        PgNotifications::queue(db.config(), db.namespace()),
        store,
        db.namespace().clone(),
        subscription,
        handling,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { consumer.run(token).await.unwrap() });
    (shutdown, move || stats.snapshot(), task)
}

async fn faulty_source(db: &TestDb) -> FaultyStore<PgSource> {
    FaultyStore::new(PgSource::new(pool(db, "faulty", 4).await.0, db.namespace()))
}

/// QUE-5: the ack reaches the database and deletes the messages, but its answer is lost.
/// The settle loop keeps the settlements and writes them again; the second ack finds
/// nothing (the receipts no longer match a row) and counts them lapsed. No message is
/// received or handled twice.
#[tokio::test]
async fn an_ack_whose_answer_is_lost_after_the_handler_succeeded_hands_no_message_out_twice_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 3).await;
    let store = faulty_source(&db).await;
    let lost = store.inject(Fault::fail_after(StoreCall::Ack, Transience::Transient));
    let handler = Scripted::acking();
    let (shutdown, stats, task) = run(&db, store.clone(), Arc::clone(&handler)).await;

    within(lost.struck(1)).await;
    eventually("the settlements were written again", || async { stats().lapsed == 3 }).await;
    shutdown.cancel();
    within(task).await.unwrap();
    assert_eq!(count(&db, "orders").await, 0, "the first ack deleted them");
    assert!(store.calls(StoreCall::Ack) >= 2, "the ack was retried");
    for id in ids {
        assert_eq!(handler.calls(id), 1, "message {id} handled once");
    }
    assert_eq!(stats().received, 3);
}

/// An inbox handler that writes one effect row per call, through the session's transaction.
struct Effects {
    insert: String,
    calls: AtomicU32,
}

#[relayer_core::async_trait]
impl InboxHandler<relayer_test_support::FaultySession<PgSession>> for Effects {
    async fn handle(
        &self,
        tx: &relayer_test_support::FaultySession<PgSession>,
        message: &QueueMessage,
    ) -> Outcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match tx.inner_session() {
            Some(session) => {
                match session.connection().execute(&self.insert, &[message.id.as_uuid()]).await {
                    Ok(_) => Outcome::Ack,
                    Err(error) => Outcome::failed(error),
                }
            }
            None => Outcome::failed("the session was killed"),
        }
    }
}

/// QUE-3: the inbox transaction (record, effect, ack) commits, but the commit's answer is
/// lost. The pump takes it for a failed handling and requeues the message; the requeue is
/// fenced by the receipt the committed ack consumed, so it changes nothing. The effect
/// happened once, and the message is gone.
#[tokio::test]
async fn an_inbox_commit_whose_answer_is_lost_keeps_one_effect_and_no_redelivery_que_3() {
    let db = setup().await;
    let client = db.connect().await;
    let effects = format!("\"{}\".effects", db.schema());
    client.batch_execute(&format!("CREATE TABLE {effects} (message_id uuid NOT NULL)")).await.unwrap();
    let ids = enqueue(&db, "orders", 1).await;
    let store = faulty_source(&db).await;
    let lost = store.inject(Fault::fail_after(StoreCall::Commit, Transience::Transient));
    let handler = Arc::new(Effects {
        insert: format!("INSERT INTO {effects} (message_id) VALUES ($1)"),
        calls: AtomicU32::new(0),
    });
    let handling = Handling::Inbox(Arc::clone(&handler) as Arc<dyn InboxHandler<_>>);
    let (shutdown, stats, task) = run(&db, store.clone(), handling).await;

    within(lost.struck(1)).await;
    eventually("the requeue was fenced out", || async { stats().lapsed == 1 }).await;
    shutdown.cancel();
    within(task).await.unwrap();
    let effect_rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {effects} WHERE message_id = $1"), &[ids[0].as_uuid()])
        .await
        .unwrap()
        .get(0);
    assert_eq!(effect_rows, 1, "the committed effect, once");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "never handed out again");
    assert_eq!(count(&db, "orders").await, 0);
}
