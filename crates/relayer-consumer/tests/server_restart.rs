//! The database restarts while pumps run (RES-1, QUE-1, QUE-5): PostgreSQL — a cluster this
//! test owns, never the shared server — is stopped in immediate mode, as in a crash, and
//! started again. The same pumps, with no process restart, then handle the messages that
//! were pending or in flight at the crash and the ones written after it, and every message
//! whose write was acknowledged is handled and acked; none is dead-lettered.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Scripted, count, enqueue, fast, pool, start};
use relayer_consumer::{Outcome, Subscription};
use relayer_postgres::migrate;
use relayer_test_support::{OwnedCluster, eventually};

/// Two pumps on one queue survive an immediate-mode restart of the server: their receive,
/// settle and heartbeat passes fail while it is down, back off (RES-2) and find the server
/// again by themselves, on the default poll interval (1 s; the backoff is capped at 1 s
/// here).
#[tokio::test]
async fn pumps_resume_after_a_server_restart_without_a_process_restart_res_1() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    migrate(&mut db.connect().await, db.namespace()).await.unwrap();
    // Slow enough that messages are in flight when the server goes down.
    let handler = Scripted::new(|_, _| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Outcome::Ack
    });
    let options = fast()
        .poll_interval(Duration::from_secs(1))
        .max_backoff(Duration::from_secs(1))
        .visibility_timeout(Duration::from_secs(2))
        .concurrency(4)
        .batch_size(4)
        .build()
        .unwrap();
    let subscription = Subscription::new("orders", options).unwrap();
    let a = start(&db, pool(&db, "a", 3).await.0, subscription.clone(), Arc::clone(&handler)).await;
    let b = start(&db, pool(&db, "b", 3).await.0, subscription.clone(), Arc::clone(&handler)).await;

    let before = enqueue(&db, "orders", 200).await;
    eventually("the pumps are handling the first messages", || async { handler.distinct() >= 10 }).await;
    cluster.stop_immediately().await;
    let handled_at_crash = handler.distinct();
    cluster.start_again().await;
    assert!(handled_at_crash < before.len(), "messages were still pending when the server went down");

    let after = enqueue(&db, "orders", 50).await;
    eventually("every message written before and after the restart is handled", || async {
        before.iter().chain(&after).all(|id| handler.calls(*id) >= 1)
    })
    .await;
    eventually("every message is acked", || async { count(&db, "orders").await == 0 }).await;
    assert_eq!(count(&db, subscription.dead_letter_queue()).await, 0, "nothing was dead-lettered");
    let (a_stats, b_stats) = (a.stats.snapshot(), b.stats.snapshot());
    assert!(a_stats.acked + b_stats.acked >= 250, "{a_stats:?} {b_stats:?}");
    a.stop().await;
    b.stop().await;
}
