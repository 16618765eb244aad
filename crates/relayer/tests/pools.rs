//! Each pool a host opens is its own (docs/connections.md): named after it in
//! `pg_stat_activity`, and never holding more connections than its size, whatever the
//! other pools do.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::{
    CleanupOptions, ConsumerOptions, DispatcherOptions, NewMessage, QUEUE_TRANSPORT, Relayer, SweeperOptions,
};
use relayer_test_support::{TestDb, eventually, within};
use relayer_worker::WorkerEvent;
use tokio_postgres::Client;

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[derive(Default)]
struct Counting(AtomicU64);

#[relayer::async_trait]
impl Handler for Counting {
    async fn handle(&self, _: &QueueMessage) -> Outcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        Outcome::Ack
    }
}

/// The sessions of `db`'s host pool `pool` (`{application_name}/{pool}`), and how many of
/// them wait for a lock.
async fn sessions(client: &Client, db: &TestDb, pool: &str) -> (i64, i64) {
    let sql = "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') \
               FROM pg_stat_activity WHERE application_name = $1";
    let row = client.query_one(sql, &[&format!("{}/{pool}", db.schema())]).await.unwrap();
    (row.get(0), row.get(1))
}

/// A host with every pool — dispatcher, maintenance, queue transport, a consumer's — whose
/// dispatcher pool is set to 2 connections for 3 unordered loops and the lane loop. With
/// the outbox locked, every dispatch pass blocks holding its connection: the pool holds
/// exactly 2, and a loop that waits for a third fails its pass when the pool gives up,
/// while the other pools keep their own connections.
#[tokio::test]
async fn each_pool_is_named_after_it_and_holds_at_most_its_own_size() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let handled = Arc::new(Counting::default());
    let consumer = ConsumerOptions::builder().poll_interval(ms(100)).build().unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().concurrency(3).poll_interval(ms(50)).build().unwrap())
        .dispatcher_pool_size(2)
        .sweeper(SweeperOptions::builder().sweep_interval(ms(100)).build().unwrap())
        .cleanup(CleanupOptions::builder().cleanup_interval(ms(100)).build().unwrap())
        .consumer(Subscription::new("orders", consumer).unwrap(), Arc::clone(&handled))
        .start()
        .await
        .unwrap();

    // One message through every pool: dispatched, sent through the queue transport, consumed.
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[NewMessage::new(QUEUE_TRANSPORT, "orders", b"{}".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the message is handled", || async { handled.0.load(Ordering::SeqCst) == 1 }).await;
    for pool in ["dispatcher", "maintenance", "queue-transport", "consumer:orders"] {
        let (open, _) = sessions(&client, &db, pool).await;
        assert!(open >= 1, "{pool}: no session named after it");
    }
    let unnamed = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '/%' \
                   AND application_name NOT IN ($2, $3, $4, $5)";
    let names: Vec<String> = ["dispatcher", "maintenance", "queue-transport", "consumer:orders"]
        .iter()
        .map(|pool| format!("{}/{pool}", db.schema()))
        .collect();
    let others: i64 = client
        .query_one(unnamed, &[&db.schema(), &names[0], &names[1], &names[2], &names[3]])
        .await
        .unwrap()
        .get(0);
    assert_eq!(others, 0, "a pool named after none of the host's");

    let mut events = host.dispatcher().unwrap().subscribe();
    let mut locker = db.connect().await;
    let lock = locker.transaction().await.unwrap();
    let outbox = db.namespace().table("outbox");
    lock.execute(&format!("LOCK TABLE {outbox} IN ACCESS EXCLUSIVE MODE"), &[]).await.unwrap();
    eventually("both dispatcher connections wait for the outbox", || async {
        sessions(&client, &db, "dispatcher").await.1 == 2
    })
    .await;
    within(async {
        loop {
            match events.recv().await {
                Ok(WorkerEvent::PassFailed { .. }) => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(error) => panic!("the dispatcher's events ended: {error}"),
            }
        }
    })
    .await;
    assert_eq!(sessions(&client, &db, "dispatcher").await, (2, 2), "the dispatcher pool holds 2 at most");
    // The sweeper's pass waits for the outbox too, on a maintenance connection of its own
    // pool (sweeper, cleanup and the bookkeeping: 3).
    let (maintenance, _) = sessions(&client, &db, "maintenance").await;
    assert!((1..=3).contains(&maintenance), "maintenance pool: {maintenance} sessions");

    lock.rollback().await.unwrap();
    within(host.shutdown()).await;
}
