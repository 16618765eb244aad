//! The receive cursor on real PostgreSQL (QUE-1): a receive starts where the last one got
//! to, so it does not walk the dead row versions a held snapshot keeps behind it; and
//! nothing is skipped for it — not a row that commits late with an older `visible_at`, not
//! a requeued or lapsed message, and (by the full scan) not even a row committed long
//! after its `visible_at`.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Scripted, count, enqueue, fast, pool, setup, start};
use relayer_consumer::Subscription;
use relayer_core::receive_cursor::ReceiveCursor;
use relayer_core::{NewMessage, Receipt};
use relayer_postgres::{ConsumeStatements, QueueWriter, Requeue};
use relayer_test_support::{TestDb, eventually};

const VISIBILITY: Duration = Duration::from_secs(60);
const NEVER: Duration = Duration::from_secs(1_000_000);

/// One receive of up to `limit` from `cursor`'s position, recorded; returns the receipts
/// and whether it was a full scan.
async fn receive(
    statements: &ConsumeStatements,
    client: &tokio_postgres::Client,
    cursor: &mut ReceiveCursor,
    limit: u32,
    visibility: Duration,
) -> (Vec<Receipt>, bool) {
    let now = Instant::now();
    let from = cursor.plan(now);
    let page = statements.receive_from(client, "orders", limit, visibility, from).await.unwrap();
    cursor.record(from, page.reach, now);
    (page.received.iter().map(|r| r.receipt).collect(), from.is_none())
}

/// A row whose transaction began before an earlier row's, and committed after a receive
/// took that earlier row, has the older `visible_at`: the next receive from the cursor
/// still takes it — the cursor keeps [`ReceiveCursor::LAG`] behind what it reached (QUE-1).
#[tokio::test]
async fn a_row_committed_late_with_an_older_visible_at_is_received_from_the_cursor_que_1() {
    let db = setup().await;
    let statements = ConsumeStatements::new(db.namespace());
    let writer = QueueWriter::new(db.namespace(), "queue");
    let mut late_client = db.connect().await;
    let late = late_client.transaction().await.unwrap();
    // `visible_at` defaults to the transaction's start: older than the next row's.
    let late_message = NewMessage::new("queue", "orders", b"late".to_vec());
    writer.enqueue(&late, std::slice::from_ref(&late_message)).await.unwrap();
    enqueue(&db, "orders", 1).await;

    let client = db.connect().await;
    let mut cursor = ReceiveCursor::new(NEVER);
    let (first, full) = receive(&statements, &client, &mut cursor, 10, VISIBILITY).await;
    assert_eq!((first.len(), full), (1, true));
    late.commit().await.unwrap();
    let (second, full) = receive(&statements, &client, &mut cursor, 10, VISIBILITY).await;
    assert!(!full, "a receive from the cursor");
    assert_eq!(second.len(), 1, "the late row was skipped");
    assert_ne!(second[0].seq, first[0].seq);
}

/// A requeued message (at once, and after a delay) and a message whose visibility lapsed
/// are received again from the cursor, without a full scan: each becomes visible ahead of
/// the position (QUE-1, QUE-2, QUE-5).
#[tokio::test]
async fn requeued_and_lapsed_messages_are_received_again_from_the_cursor_que_1() {
    let db = setup().await;
    let statements = ConsumeStatements::new(db.namespace());
    enqueue(&db, "orders", 3).await;
    let client = db.connect().await;
    let mut cursor = ReceiveCursor::new(NEVER);
    let (held, _) = receive(&statements, &client, &mut cursor, 2, VISIBILITY).await;
    let (lapsing, _) = receive(&statements, &client, &mut cursor, 1, Duration::ZERO).await;
    assert_eq!((held.len(), lapsing.len()), (2, 1));
    let requeues = [
        Requeue { receipt: held[0], delay: Duration::ZERO },
        Requeue { receipt: held[1], delay: Duration::from_millis(300) },
    ];
    assert_eq!(statements.requeue(&client, &requeues).await.unwrap().len(), 2);

    let mut again = Vec::new();
    let patience = Instant::now() + relayer_test_support::PATIENCE;
    while again.len() < 3 && Instant::now() < patience {
        let (received, full) = receive(&statements, &client, &mut cursor, 10, VISIBILITY).await;
        assert!(!full, "a full scan");
        again.extend(received.iter().map(|r| r.seq));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    again.sort_unstable();
    let mut expected = vec![held[0].seq, held[1].seq, lapsing[0].seq];
    expected.sort_unstable();
    assert_eq!(again, expected);
}

/// The index entries `queue_receive_idx` has handed out so far.
async fn index_entries_read(db: &TestDb, client: &tokio_postgres::Client) -> i64 {
    client.execute("SELECT pg_stat_force_next_flush()", &[]).await.unwrap();
    let index = format!("{}queue_receive_idx", db.namespace().prefix());
    client
        .query_one(
            "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = $2",
            &[&db.schema(), &index],
        )
        .await
        .unwrap()
        .get(0)
}

/// While another session holds its snapshot, 2,000 messages are received and acked: the
/// versions they leave cannot be removed, nor their index entries marked dead. A full
/// scan walks every one of them; a receive from the cursor, once the cursor has moved past
/// them, walks none (QUE-1).
#[tokio::test]
async fn a_receive_from_the_cursor_walks_none_of_the_dead_versions_a_held_snapshot_keeps_que_1() {
    let db = setup().await;
    let statements = ConsumeStatements::new(db.namespace());
    let table = db.namespace().table("queue");
    let mut holder = db.connect().await;
    let held = holder
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    held.execute(&format!("SELECT 1 FROM {table} LIMIT 1"), &[]).await.unwrap();

    let client = db.connect().await;
    let mut cursor = ReceiveCursor::new(NEVER);
    for _ in 0..20 {
        enqueue(&db, "orders", 100).await;
        let (received, _) = receive(&statements, &client, &mut cursor, 100, VISIBILITY).await;
        assert_eq!(received.len(), 100);
        assert_eq!(statements.ack(&client, &received).await.unwrap().len(), 100);
    }
    // Past the lag, an empty receive moves the cursor beyond them.
    tokio::time::sleep(ReceiveCursor::LAG + Duration::from_millis(200)).await;
    assert!(receive(&statements, &client, &mut cursor, 100, VISIBILITY).await.0.is_empty());

    let before = index_entries_read(&db, &client).await;
    let (received, full) = receive(&statements, &client, &mut cursor, 100, VISIBILITY).await;
    assert!(received.is_empty() && !full);
    let from_cursor = index_entries_read(&db, &client).await - before;
    let page = statements.receive_from(&client, "orders", 100, VISIBILITY, None).await.unwrap();
    assert!(page.received.is_empty());
    let full_scan = index_entries_read(&db, &client).await - before - from_cursor;
    assert!(full_scan >= 2_000, "the held snapshot kept the dead versions: {full_scan} entries read");
    assert!(from_cursor < 10, "the receive from the cursor read {from_cursor} entries");
    held.rollback().await.unwrap();
}

/// A message enqueued by a transaction that commits long after it began — its
/// `visible_at`, the transaction's start, lies far behind the cursor — is still handled:
/// the pump's full scan, once per poll interval, finds it (QUE-1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_committed_long_after_its_visible_at_is_found_by_the_full_scan_que_1() {
    let db = setup().await;
    let writer = QueueWriter::new(db.namespace(), "queue");
    let mut late_client = db.connect().await;
    let late = late_client.transaction().await.unwrap();
    let message = NewMessage::new("queue", "orders", b"late".to_vec());
    writer.enqueue(&late, std::slice::from_ref(&message)).await.unwrap();

    let handler = Scripted::acking();
    let options = fast().build().unwrap();
    let running = start(
        &db,
        pool(&db, "late", 4).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;
    // Messages flow meanwhile, and the cursor moves past the lag.
    let mut ids = Vec::new();
    let started = Instant::now();
    while started.elapsed() < 2 * ReceiveCursor::LAG {
        ids.extend(enqueue(&db, "orders", 5).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    late.commit().await.unwrap();
    eventually("the late message was handled", || async { handler.calls(message.message_id()) == 1 }).await;
    eventually("every message was handled", || async { count(&db, "orders").await == 0 }).await;
    assert!(ids.iter().all(|&id| handler.calls(id) == 1));
    assert!(running.stats.snapshot().full_scans >= 2, "{}", running.stats.snapshot());
    running.stop().await;
}
