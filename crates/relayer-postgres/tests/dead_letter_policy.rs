//! The dead-letter policy statements against a real PostgreSQL: they agree with the pure
//! decisions of `relayer_core::dead_letter` on generated rows (DLP-2, DLP-4, DLP-5), and
//! their batches stay bounded under a generic plan made on empty tables (DRV-1b).
//!
//! Rows are written by hand: old `created_at` and `dead_lettered_at` values are states no
//! component produces on demand.
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use relayer_core::dead_letter::{
    DeadLetterDecision, DeadLetterPolicy, DeadLetterRow, DeadLetterType, UNACCEPTABLE,
};
use relayer_core::store::Completion;
use relayer_core::{NewMessage, Timestamp, Uuid};
use relayer_postgres::{DeadLetterPolicyStatements, OutboxStatements, OutboxWriter, PgClient, migrate};
use relayer_test_support::TestDb;

#[derive(Clone, Debug)]
struct GeneratedDeadLetter {
    queue: &'static str,
    topic: Option<&'static str>,
    reason: &'static str,
    created_secs: i64,
    dead_secs: i64,
}

/// Whole seconds in a narrow range, so exact ties with the cut-offs are frequent.
fn dead_letter() -> impl Strategy<Value = GeneratedDeadLetter> {
    (
        prop::sample::select(vec!["dead", "other.dead"]),
        prop::option::weighted(0.85, prop::sample::select(vec!["orders", "invoices"])),
        prop::sample::select(vec!["handler", UNACCEPTABLE]),
        -40i64..=0,
        0i64..=40,
    )
        .prop_map(|(queue, topic, reason, created_secs, later)| GeneratedDeadLetter {
            queue,
            topic,
            reason,
            created_secs,
            dead_secs: (created_secs + later).min(0),
        })
}

/// Messages of queue "orders" dead-lettered into "dead".
fn queue_type() -> DeadLetterType {
    DeadLetterType::Queue { original_topic: "orders".into(), dead_letter_queue: "dead".into() }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// The policy statements for type ("orders" in "dead") move, delete and count exactly the
/// rows the pure decision redrives, expires or gives up on; no other row is touched.
#[test]
fn policy_sql_agrees_with_the_pure_decisions_dlp_2_dlp_4_dlp_5() {
    let rt = runtime();
    let db = rt.block_on(TestDb::new());
    let client = rt.block_on(db.connect());
    rt.block_on(migrate(&mut rt.block_on(db.connect()), db.namespace())).unwrap();
    let statements = DeadLetterPolicyStatements::new(db.namespace());
    let queue = db.namespace().table("queue");
    let orders = queue_type();

    let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
    let strategy = (prop::collection::vec(dead_letter(), 0..30), 0u64..=20, 1u64..=30);
    runner
        .run(&strategy, |(rows, after_secs, extra_secs)| {
            rt.block_on(async {
                // A transaction pins now(): SQL and the pure rules see one instant.
                client.batch_execute("BEGIN").await.unwrap();
                let mut expected = Vec::new();
                let now: SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
                let now = Timestamp::from_system_time(now);
                let (after, give_up) = (Duration::from_secs(after_secs), Duration::from_secs(after_secs + extra_secs));
                let redrive = DeadLetterPolicy::redrive(after, give_up).unwrap();
                let expire = DeadLetterPolicy::expire(after);
                for row in &rows {
                    let seq: i64 = client
                        .query_one(
                            &format!(
                                "INSERT INTO {queue} (message_id, queue, body, original_topic, rejection_reason, \
                                 created_at, dead_lettered_at) \
                                 VALUES (gen_random_uuid(), $1, '', $2, $3, now() + $4 * interval '1 second', \
                                         now() + $5 * interval '1 second') RETURNING seq"
                            ),
                            &[&row.queue, &row.topic, &row.reason, &(row.created_secs as f64), &(row.dead_secs as f64)],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    let pure = DeadLetterRow {
                        original_topic: row.topic.map(str::to_owned),
                        created_at: now.saturating_sub(Duration::from_secs(row.created_secs.unsigned_abs())),
                        dead_lettered_at: now.saturating_sub(Duration::from_secs(row.dead_secs.unsigned_abs())),
                        rejection_reason: Some(row.reason.to_owned()),
                    };
                    let ours = row.queue == "dead" && row.topic == Some("orders");
                    expected.push((seq, ours, redrive.decide(&pure, now), expire.decide(&pure, now)));
                }
                let pick = |wanted: DeadLetterDecision, redriving: bool| -> BTreeSet<i64> {
                    expected
                        .iter()
                        .filter(|(_, ours, on_redrive, on_expire)| {
                            *ours && (if redriving { *on_redrive } else { *on_expire }) == wanted
                        })
                        .map(|(seq, ..)| *seq)
                        .collect()
                };
                let stuck = statements.stuck(&client, &orders, after, give_up).await.unwrap();
                prop_assert_eq!(stuck, pick(DeadLetterDecision::GaveUp, true).len() as u64);

                client.batch_execute("SAVEPOINT before_actions").await.unwrap();
                let moved = statements.redrive(&client, &orders, after, give_up, 10_000).await.unwrap();
                let back: BTreeSet<i64> = client
                    .query(&format!("SELECT seq FROM {queue} WHERE queue = 'orders'"), &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                prop_assert_eq!(moved, back.len() as u64);
                prop_assert_eq!(&back, &pick(DeadLetterDecision::Redrive, true));

                client.batch_execute("ROLLBACK TO SAVEPOINT before_actions").await.unwrap();
                let deleted = statements.expire(&client, &orders, after, 10_000).await.unwrap();
                let left: BTreeSet<i64> = client
                    .query(&format!("SELECT seq FROM {queue}"), &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                let all: BTreeSet<i64> = expected.iter().map(|(seq, ..)| *seq).collect();
                let gone: BTreeSet<i64> = all.difference(&left).copied().collect();
                prop_assert_eq!(deleted, gone.len() as u64);
                prop_assert_eq!(&gone, &pick(DeadLetterDecision::Expire, false));
                client.batch_execute("ROLLBACK").await.unwrap();
                Ok(())
            })
        })
        .unwrap();
}

/// DRV-1b: the policy statements, prepared and planned generically while the tables were
/// empty, still take at most their batch once the tables fill.
#[tokio::test]
async fn policy_batches_stay_bounded_under_a_generic_plan_made_on_empty_tables() {
    let db = TestDb::new().await;
    let mut raw = db.connect().await;
    migrate(&mut raw, db.namespace()).await.unwrap();
    let client = PgClient::new(raw);
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    let statements = DeadLetterPolicyStatements::new(db.namespace());
    let (orders, outbox_type) =
        (queue_type(), DeadLetterType::Outbox { transport: "queue".into(), destination: "orders".into() });
    let (day, zero) = (Duration::from_secs(86_400), Duration::ZERO);
    for _ in 0..6 {
        assert_eq!(statements.redrive(&client, &orders, zero, day, 5).await.unwrap(), 0);
        assert_eq!(statements.expire(&client, &orders, zero, 5).await.unwrap(), 0);
        assert_eq!(statements.redrive(&client, &outbox_type, zero, day, 5).await.unwrap(), 0);
        assert_eq!(statements.expire(&client, &outbox_type, zero, 5).await.unwrap(), 0);
    }

    let queue = db.namespace().table("queue");
    client
        .batch_execute(&format!(
            "INSERT INTO {queue} (message_id, queue, body, original_topic, rejection_reason, dead_lettered_at) \
             SELECT gen_random_uuid(), 'dead', '', 'orders', 'handler', now() FROM generate_series(1, 40)"
        ))
        .await
        .unwrap();
    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    let written = writer
        .enqueue(&client, &(0..40).map(|_| NewMessage::new("queue", "orders", vec![1])).collect::<Vec<_>>())
        .await
        .unwrap();
    let outbox = OutboxStatements::new(db.namespace());
    let token = Uuid::new_v4();
    let seqs: Vec<i64> = written.iter().map(|w| w.seq).collect();
    assert_eq!(outbox.claim_seqs(&client, token, day, &seqs).await.unwrap().len(), 40);
    let mut completion = Completion::new();
    for seq in &seqs {
        completion.bury(*seq, "refused");
    }
    assert_eq!(outbox.complete(&client, token, &completion).await.unwrap().dead, 40);

    assert_eq!(statements.redrive(&client, &orders, zero, day, 5).await.unwrap(), 5);
    assert_eq!(statements.expire(&client, &orders, zero, 5).await.unwrap(), 5);
    assert_eq!(statements.redrive(&client, &outbox_type, zero, day, 5).await.unwrap(), 5);
    assert_eq!(statements.expire(&client, &outbox_type, zero, 5).await.unwrap(), 5);
    assert_eq!(statements.stuck(&client, &orders, zero, day).await.unwrap(), 0);
    assert!(client.statements().len() >= 5, "the statements were prepared");
}
