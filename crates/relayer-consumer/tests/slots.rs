//! Handler slots, the receive-ahead buffer and pending settlements (QUE-5), and conflicts
//! retried at once, on real PostgreSQL: `concurrency` counts handler calls running, not
//! messages whose ack is still unwritten; every message the pump holds stays invisible to
//! other readers; a statement that loses a lock conflict is retried at once, not after the
//! backoff an outage earns.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Scripted, count, enqueue, fast, pool, setup, start};
use relayer_consumer::{Consumer, Outcome, Subscription};
use relayer_postgres::{PgNotifications, PgSource, connect_pool};
use relayer_test_support::{Fault, FaultyStore, StoreCall, eventually, within};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A handler that, on the first message it gets, says so and waits to be let go; every
/// other message is acked at once.
fn held_first(started: Arc<Notify>, go: Arc<Notify>) -> Arc<Scripted> {
    let first = Arc::new(std::sync::Mutex::new(None));
    Scripted::new(move |message, _| {
        let (started, go, first) = (Arc::clone(&started), Arc::clone(&go), Arc::clone(&first));
        async move {
            let is_first = *first.lock().unwrap().get_or_insert(message.id) == message.id;
            if is_first {
                started.notify_one();
                go.notified().await;
            }
            Outcome::Ack
        }
    })
}

/// With one handler slot, a message's ack blocked on a row lock does not keep the next
/// message from being handled: the slot is freed when the handler returns, and the ack is
/// written once the lock goes (QUE-5). Before, the slot was held until the ack's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slot_is_freed_when_the_handler_returns_not_when_its_ack_is_written_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 2).await;
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = held_first(Arc::clone(&started), Arc::clone(&go));
    let options = fast().concurrency(1).build().unwrap();
    let running = start(
        &db,
        pool(&db, "slots", 4).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;

    within(started.notified()).await;
    // The first message's row, locked until the test lets go: its ack waits for the lock.
    let mut blocker = db.connect().await;
    let tx = blocker.transaction().await.unwrap();
    let queue = db.namespace().table("queue");
    let locked = tx
        .execute(&format!("SELECT 1 FROM {queue} WHERE seq = (SELECT min(seq) FROM {queue}) FOR UPDATE"), &[])
        .await
        .unwrap();
    assert_eq!(locked, 1);
    go.notify_one();

    eventually("the second message was handled while the first one's ack waited", || async {
        handler.distinct() == 2
    })
    .await;
    assert_eq!(count(&db, "orders").await, 2, "the first ack is not written while its row is locked");
    assert_eq!(running.stats.snapshot().acked, 0);
    tx.rollback().await.unwrap();
    eventually("both acks were written", || async { running.stats.snapshot().acked == 2 }).await;
    assert_eq!(count(&db, "orders").await, 0);
    assert!(ids.iter().all(|&id| handler.calls(id) == 1));
    assert_eq!(handler.max_running.load(std::sync::atomic::Ordering::SeqCst), 1);
    running.stop().await;
}

/// A message waiting in the receive-ahead buffer and a message whose ack is held back
/// both stay invisible for several visibility timeouts while a second pump polls the same
/// queue: the heartbeat covers every message the first pump holds, not only running ones.
/// Each message is handled once, by the first pump; nothing lapses (QUE-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_received_ahead_or_awaiting_their_ack_stay_invisible_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 2).await;
    let store = FaultyStore::new(PgSource::new(pool(&db, "held", 4).await.0, db.namespace()));
    let acks = store.inject(Fault::hold(StoreCall::Ack).every_call());
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let first = held_first(Arc::clone(&started), Arc::clone(&go));
    let visibility = Duration::from_secs(1);
    let options = fast().concurrency(1).visibility_timeout(visibility).build().unwrap();
    let consumer = Consumer::new(
        PgNotifications::queue(db.config(), db.namespace()),
        store,
        db.namespace().clone(),
        Subscription::new("orders", options.clone()).unwrap(),
        Arc::clone(&first),
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));

    within(started.notified()).await;
    eventually("the second message was received ahead", || async { stats.snapshot().received == 2 }).await;
    let other = Scripted::acking();
    let second = start(
        &db,
        pool(&db, "other", 4).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&other),
    )
    .await;
    // Three visibility timeouts with one message buffered, then three with both awaiting
    // their acks: without the heartbeat, the other pump (polling every 100 ms) takes them.
    tokio::time::sleep(3 * visibility).await;
    go.notify_one();
    eventually("both were handled by the first pump", || async { first.distinct() == 2 }).await;
    tokio::time::sleep(3 * visibility).await;
    acks.release();
    eventually("both acks were written", || async { stats.snapshot().acked == 2 }).await;

    assert_eq!(other.total_calls(), 0, "the other pump received a message the first one held");
    assert!(ids.iter().all(|&id| first.calls(id) == 1));
    assert_eq!(stats.snapshot().lapsed, 0);
    second.stop().await;
    shutdown.cancel();
    within(task).await.unwrap().unwrap();
}

/// An ack that meets a row lock past `lock_timeout` (55P03, lock not available) is retried
/// at once, after a short pause, not after the poll-interval backoff an outage earns (an
/// hour here): once the lock goes, the ack is written and the pump goes on consuming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_conflict_is_retried_at_once_not_after_the_outage_backoff_que_5() {
    let db = setup().await;
    enqueue(&db, "orders", 1).await;
    let mut config = db.config();
    config.options("-c lock_timeout=300");
    let pool = connect_pool(config, 4).await.unwrap();
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = held_first(Arc::clone(&started), Arc::clone(&go));
    let hour = Duration::from_secs(3600);
    let options = fast().poll_interval(hour).max_backoff(hour).build().unwrap();
    let running = start(&db, pool, Subscription::new("orders", options).unwrap(), Arc::clone(&handler)).await;

    within(started.notified()).await;
    let mut blocker = db.connect().await;
    let tx = blocker.transaction().await.unwrap();
    let queue = db.namespace().table("queue");
    tx.execute(&format!("SELECT 1 FROM {queue} FOR UPDATE"), &[]).await.unwrap();
    go.notify_one();
    eventually("the ack lost a lock conflict", || async { running.stats.snapshot().conflicts >= 1 }).await;
    tx.rollback().await.unwrap();
    eventually("the ack was retried and written", || async { running.stats.snapshot().acked == 1 }).await;

    enqueue(&db, "orders", 3).await;
    eventually("the pump goes on consuming", || async { running.stats.snapshot().acked == 4 }).await;
    assert_eq!(count(&db, "orders").await, 0);
    running.stop().await;
}
