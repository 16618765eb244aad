//! The consumer's statements about received rows — heartbeat, ack, requeue, dead-letter —
//! lock those rows in one order (seq), so when they overlap they wait for each other and
//! never deadlock (QUE-5). The statements bind their receipts in the order given (nothing
//! sorts them in Rust), so only the SQL's own `ORDER BY q.seq FOR UPDATE` keeps the order:
//! without it this test deadlocks.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use relayer_core::{NewMessage, RejectionReason};
use relayer_postgres::{ConsumeStatements, DeadLetter, QueueWriter, Receipt, Requeue, migrate};
use relayer_test_support::TestDb;

const QUEUE: &str = "orders";
const ROWS: usize = 60;
const ROWS_U32: u32 = 60;
const ROUNDS: usize = 25;
const VISIBILITY: Duration = Duration::from_secs(60);

/// Several connections at once, over and over, on the same received rows: two heartbeats
/// binding the receipts in opposite orders, and acks, requeues and dead-letters of
/// overlapping subsets, each bound in an order of its own. Every statement succeeds: no
/// deadlock (40P01), nor any other error; each row is settled at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_and_settlements_on_overlapping_rows_never_deadlock_que_5() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let statements = ConsumeStatements::new(db.namespace());
    let writer = QueueWriter::new(db.namespace(), "queue");
    let mut connections = Vec::new();
    for _ in 0..5 {
        connections.push(std::sync::Arc::new(db.connect().await));
    }
    let mut settled_total = 0;
    for round in 0..ROUNDS {
        let messages: Vec<NewMessage> =
            (0..ROWS).map(|n| NewMessage::new("queue", QUEUE, format!("{round}/{n}").into_bytes())).collect();
        writer.enqueue(&client, &messages).await.unwrap();
        let received = statements.receive(&client, QUEUE, ROWS_U32, VISIBILITY).await.unwrap();
        assert_eq!(received.len(), ROWS);
        let ascending: Vec<Receipt> = received.iter().map(|r| r.receipt).collect();
        let descending: Vec<Receipt> = ascending.iter().rev().copied().collect();
        // Interleaved: evens ascending then odds descending, a third order.
        let mut shuffled: Vec<Receipt> = ascending.iter().step_by(2).copied().collect();
        shuffled.extend(ascending.iter().skip(1).step_by(2).rev());

        let mut tasks = tokio::task::JoinSet::new();
        for (n, order) in [ascending.clone(), descending.clone()].into_iter().enumerate() {
            let (statements, connection) = (statements.clone(), std::sync::Arc::clone(&connections[n]));
            tasks.spawn(async move {
                for _ in 0..4 {
                    statements.extend(&*connection, &order, VISIBILITY).await?;
                }
                Ok::<Vec<i64>, relayer_postgres::StorageError>(Vec::new())
            });
        }
        // Acks of the upper two thirds, bound descending, and of the middle third, shuffled.
        let upper: Vec<Receipt> = descending[..2 * ROWS / 3].to_vec();
        let middle: Vec<Receipt> =
            shuffled.iter().filter(|r| upper.contains(r) && r.seq < upper[ROWS / 3].seq).copied().collect();
        for (n, receipts) in [(2, upper), (3, middle)] {
            let (statements, connection) = (statements.clone(), std::sync::Arc::clone(&connections[n]));
            tasks.spawn(async move { statements.ack(&*connection, &receipts).await });
        }
        // Requeues and dead-letters of the lower half (overlapping the acks), shuffled.
        let lower: Vec<Receipt> =
            shuffled.iter().filter(|r| r.seq <= ascending[ROWS / 2].seq).copied().collect();
        let (statements2, connection) = (statements.clone(), std::sync::Arc::clone(&connections[4]));
        tasks.spawn(async move {
            let (requeue, dead): (Vec<Receipt>, Vec<Receipt>) = lower.iter().partition(|r| r.seq % 2 == 0);
            let requeues: Vec<Requeue> = requeue
                .iter()
                .rev()
                .map(|&receipt| Requeue { receipt, delay: Duration::from_secs(3600) })
                .collect();
            let dead: Vec<DeadLetter> = dead
                .iter()
                .map(|&receipt| DeadLetter {
                    receipt,
                    queue: format!("{QUEUE}.dead_letters"),
                    reason: RejectionReason::Rejected,
                    message: "test".into(),
                    handled: true,
                })
                .collect();
            let mut settled = statements2.requeue(&*connection, &requeues).await?;
            settled.extend(statements2.dead_letter(&*connection, &dead).await?);
            Ok(settled)
        });
        let mut settled = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined.unwrap() {
                Ok(seqs) => settled.extend(seqs),
                Err(error) => panic!(
                    "round {round}: a statement failed ({:?}): {}",
                    error.code(),
                    relayer_core::error_chain(&error)
                ),
            }
        }
        let before = settled.len();
        settled.sort_unstable();
        settled.dedup();
        assert_eq!(settled.len(), before, "round {round}: a row was settled twice");
        settled_total += settled.len();
        // What the settlements left (requeued, dead-lettered or not settled) goes for the next round.
        let queue = db.namespace().table("queue");
        client.execute(&format!("DELETE FROM {queue}"), &[]).await.unwrap();
    }
    // Every round acked at least the upper two thirds.
    assert!(settled_total >= ROUNDS * (2 * ROWS / 3), "{settled_total}");
}
