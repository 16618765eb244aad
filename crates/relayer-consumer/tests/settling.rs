//! What the pump holds and for how long, on real PostgreSQL (QUE-1, QUE-5): a message
//! received ahead whose visibility lapsed is never started; a settlement kind the database
//! keeps refusing neither holds back the other kinds nor keeps its place forever; what is
//! still buffered at shutdown is given back; a wake-up ends a receive's failure backoff.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Scripted, count, enqueue, enqueue_messages, fast, pool, setup, start};
use relayer_consumer::{Consumer, Outcome, Subscription};
use relayer_core::NewMessage;
use relayer_postgres::{PgNotifications, PgSource, connect_pool};
use relayer_test_support::{Fault, FaultyStore, StoreCall, Transience, eventually, within};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// With one slot, the first message's handler blocks its thread past its deadline, so the
/// second message waits in the receive-ahead buffer past its renewal window and its
/// visibility lapses; the pump receives it again meanwhile. When the slot frees, the stale
/// buffered copy is dropped, not started: the message is handled once, from its fresh
/// receipt (QUE-5). Before, both copies were handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buffered_message_whose_visibility_lapsed_is_not_started_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 2).await;
    let (let_go, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = Arc::new(Mutex::new(blocked));
    let first = ids[0];
    let handler = Scripted::new(move |message, call| {
        let blocked = Arc::clone(&blocked);
        async move {
            if message.id == first && call == 1 {
                // Blocks the thread: the deadline cannot abandon it, the slot stays taken.
                let _ = blocked.lock().unwrap().recv_timeout(Duration::from_secs(60));
            }
            Outcome::Ack
        }
    });
    let options = fast()
        .concurrency(1)
        .visibility_timeout(Duration::from_secs(1))
        .handler_deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let running = start(
        &db,
        pool(&db, "lapsed", 4).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;

    // Both messages lapse (the blocked call past its deadline, the buffered one past its
    // window) and are received again into the buffer, behind the stale copy.
    eventually("both messages were received twice", || async { running.stats.snapshot().received >= 4 })
        .await;
    let_go.send(()).unwrap();
    eventually("the second message was handled", || async { handler.calls(ids[1]) >= 1 }).await;
    eventually("the queue is empty", || async { count(&db, "orders").await == 0 }).await;
    assert_eq!(handler.calls(ids[1]), 1, "the stale buffered copy was started too");
    assert!(running.stats.snapshot().abandoned >= 1, "{}", running.stats.snapshot());
    running.stop().await;
}

/// Runs a pump of queue `orders` on `store` with `options`; returns its counters, what
/// stops it and its task.
async fn run_on(
    db: &relayer_test_support::TestDb,
    store: FaultyStore<PgSource>,
    options: relayer_core::ConsumerOptions,
    handler: Arc<Scripted>,
) -> (Arc<relayer_consumer::ConsumerStats>, CancellationToken, tokio::task::JoinHandle<()>) {
    let consumer = Consumer::new(
        PgNotifications::queue(db.config(), db.namespace()),
        store,
        db.namespace().clone(),
        Subscription::new("orders", options).unwrap(),
        handler,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move { consumer.run(token).await.unwrap() });
    (stats, shutdown, task)
}

/// Acks the messages whose body starts with "ack", rejects the others.
fn ack_or_reject() -> Arc<Scripted> {
    Scripted::new(|message, _| async move {
        if message.body.starts_with(b"ack") { Outcome::Ack } else { Outcome::reject("a rejection") }
    })
}

fn messages(bodies: &[&str]) -> Vec<NewMessage> {
    bodies.iter().map(|body| NewMessage::new("queue", "orders", body.as_bytes().to_vec())).collect()
}

/// Every ack fails; the rejections are dead-lettered all the same: each kind of
/// settlement is written by its own statement, and one kind the database keeps refusing
/// holds back none of the others (QUE-5). Before, acks were written first and their
/// failure left the dead-letters unwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_kind_that_keeps_failing_does_not_hold_back_the_others_que_5() {
    let db = setup().await;
    enqueue_messages(&db, &messages(&["ack 1", "reject 1", "ack 2", "reject 2", "reject 3"])).await;
    let store = FaultyStore::new(PgSource::new(pool(&db, "kinds", 4).await.0, db.namespace()));
    let acks = store.inject(Fault::fail_before(StoreCall::Ack, Transience::Transient).every_call());
    let handler = ack_or_reject();
    let options = fast().build().unwrap();
    let (stats, shutdown, task) = run_on(&db, store, options, Arc::clone(&handler)).await;

    eventually("the rejections were dead-lettered while every ack failed", || async {
        stats.snapshot().dead_lettered == 3
    })
    .await;
    assert!(acks.strikes() >= 1);
    assert_eq!(stats.snapshot().acked, 0);
    assert_eq!(count(&db, "orders.dead_letters").await, 3);
    shutdown.cancel();
    within(task).await.unwrap();
}

/// One place for pending settlements, and an ack the database keeps refusing: once the
/// ack's time is up (three visibility timeouts) it is given up and its place freed, so the
/// next message's dead-letter is written (QUE-5). Before, the failing ack kept the only
/// place forever and the pump stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_that_keeps_failing_gives_up_its_place_in_time_que_5() {
    let db = setup().await;
    enqueue_messages(&db, &messages(&["ack 1", "reject 1"])).await;
    let store = FaultyStore::new(PgSource::new(pool(&db, "room", 4).await.0, db.namespace()));
    let acks = store.inject(Fault::fail_before(StoreCall::Ack, Transience::Transient).every_call());
    let handler = ack_or_reject();
    let options =
        fast().concurrency(1).batch_size(1).visibility_timeout(Duration::from_secs(1)).build().unwrap();
    assert_eq!(options.max_pending_settlements(), 1);
    let (stats, shutdown, task) = run_on(&db, store, options, Arc::clone(&handler)).await;

    eventually("the rejection was dead-lettered", || async { stats.snapshot().dead_lettered == 1 }).await;
    assert!(stats.snapshot().abandoned >= 1, "{}", stats.snapshot());
    acks.release();
    shutdown.cancel();
    within(task).await.unwrap();
}

/// Messages received ahead and never started are given back at shutdown: visible at once,
/// their receipt cleared, their handled count unchanged (QUE-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_received_ahead_are_given_back_at_shutdown_receipt_cleared_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 3).await;
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let first = ids[0];
    let handler = {
        let (started, go) = (Arc::clone(&started), Arc::clone(&go));
        Scripted::new(move |message, _| {
            let (started, go) = (Arc::clone(&started), Arc::clone(&go));
            async move {
                if message.id == first {
                    started.notify_one();
                    go.notified().await;
                }
                Outcome::Ack
            }
        })
    };
    let options = fast().concurrency(1).shutdown_grace(Duration::from_secs(30)).build().unwrap();
    let running = start(
        &db,
        pool(&db, "release", 4).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;
    within(started.notified()).await;
    eventually("all three were received", || async { running.stats.snapshot().received == 3 }).await;
    // Shutdown gives the two buffered ones back, then waits for the running handler.
    let stopping = tokio::spawn(running.stop());
    let client = db.connect().await;
    let table = db.namespace().table("queue");
    eventually("the buffered messages were given back", || async {
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE receipt IS NULL AND visible_at <= now() AND handled_count = 0), \
                            count(*) FILTER (WHERE receipt IS NOT NULL AND visible_at > now()) \
                     FROM {table} WHERE queue = 'orders'"
                ),
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1)) == (2, 1)
    })
    .await;
    go.notify_one();
    within(stopping).await.unwrap();
    assert_eq!(handler.calls(ids[1]) + handler.calls(ids[2]), 0);
    assert_eq!(count(&db, "orders").await, 2, "the running one was acked, the others are back");
}

/// A receive cancelled by `statement_timeout` (the table locked by another session) earns
/// the failure backoff — an hour here — but the notification of a new message ends it:
/// the message is handled at once (QUE-1). Before, wake-ups were ignored during the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_ends_the_backoff_of_a_receive_that_timed_out_que_1() {
    let db = setup().await;
    let hour = Duration::from_secs(3600);
    let mut config = db.config();
    config.options("-c statement_timeout=300");
    let store = FaultyStore::new(PgSource::new(connect_pool(config, 4).await.unwrap(), db.namespace()));
    let handler = Scripted::acking();
    let options = fast().poll_interval(hour).max_backoff(hour).build().unwrap();
    let (stats, shutdown, task) = run_on(&db, store.clone(), options, Arc::clone(&handler)).await;
    enqueue(&db, "orders", 1).await;
    eventually("the pump runs", || async { stats.snapshot().acked == 1 }).await;

    let table = db.namespace().table("queue");
    let mut locker = db.connect().await;
    let lock = locker.transaction().await.unwrap();
    lock.execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"), &[]).await.unwrap();
    let receives = store.calls(StoreCall::Receive);
    let watcher = db.connect().await;
    let channel = relayer_postgres::queue_channel(db.namespace());
    watcher.execute("SELECT pg_notify($1, 'orders')", &[&channel]).await.unwrap();
    let waiting = || async {
        let row = watcher
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::text::regclass",
                &[&table],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    eventually("a receive waits for the lock", || async { waiting().await == 1 }).await;
    eventually("the receive was cancelled by its statement timeout", || async { waiting().await == 0 }).await;
    assert!(store.calls(StoreCall::Receive) > receives);
    lock.rollback().await.unwrap();
    let ids = enqueue(&db, "orders", 1).await;
    eventually("the notified message was handled", || async { handler.calls(ids[0]) == 1 }).await;
    assert_eq!(stats.snapshot().acked, 2);
    shutdown.cancel();
    within(task).await.unwrap();
}
