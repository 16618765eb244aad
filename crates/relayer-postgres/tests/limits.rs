//! Input accepted now must not fail later (OUT-3, OPT-3): the largest values relayer
//! accepts are stored and used by PostgreSQL, anything larger is refused before the
//! caller's transaction sees a statement; and the sweeper's locked completion cannot be
//! turned against rows it does not hold.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use relayer_core::RetentionTable;
use relayer_core::message::{
    EARLIEST_DELIVERY, LATEST_DELIVERY, MAX_DELIVERY_DELAY, MAX_DESTINATION_BYTES, MAX_HEADERS_BYTES,
    MAX_LANE_KEY_BYTES, MAX_TRACE_CONTEXT_BYTES,
};
use relayer_core::options::MAX_RETENTION;
use relayer_core::store::LockOutbox;
use relayer_core::{Delivery, MessageProblem, NewMessage, Uuid};
use relayer_postgres::retention::RetentionStatements;
use relayer_postgres::{
    Completion, EnqueueError, LeaseStatements, OutboxStatements, OutboxWriter, PgStore, migrate,
};
use relayer_test_support::TestDb;

async fn setup() -> (TestDb, tokio_postgres::Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

fn writer(db: &TestDb) -> OutboxWriter {
    OutboxWriter::new(db.namespace(), ["queue"])
}

fn message() -> NewMessage {
    NewMessage::new("queue", "orders", b"{}".to_vec())
}

/// OUT-3: each value PostgreSQL would refuse inside the caller's transaction — an interval
/// or timestamp out of range, an index entry too large — is refused before any statement,
/// naming the field, so the caller's transaction goes on and commits its other work.
#[tokio::test]
async fn values_postgresql_would_refuse_are_refused_before_the_callers_transaction_out_3() {
    let (db, mut client) = setup().await;
    let refused = [
        (message().delivery(Delivery::After(Duration::MAX)), "the delivery delay (Delivery::After)"),
        (message().delivery(Delivery::After(MAX_DELIVERY_DELAY + Duration::from_secs(1))), "delivery delay"),
        (message().delivery(Delivery::At(relayer_core::Timestamp::MIN)), "the delivery time (Delivery::At)"),
        (message().lane("k".repeat(MAX_LANE_KEY_BYTES + 1)), "lane key: 513 bytes; the limit is 512"),
        (message().lane("ü".repeat(2_000)), "lane key: 4000 bytes"),
        (NewMessage::new("queue", "d".repeat(MAX_DESTINATION_BYTES + 1), vec![]), "destination: 1025 bytes"),
        (message().header("h", "v".repeat(MAX_HEADERS_BYTES)), "headers: 65537 bytes"),
        (message().trace_context("t".repeat(MAX_TRACE_CONTEXT_BYTES + 1)), "trace context: 4097 bytes"),
    ];
    let tx = client.transaction().await.unwrap();
    for (bad, what) in &refused {
        let error = writer(&db).enqueue(&tx, &[message(), bad.clone()]).await.unwrap_err();
        let EnqueueError::Invalid(invalid) = &error else { panic!("refused before the insert: {error}") };
        assert_eq!(invalid.index(), 1);
        let text = error.to_string();
        assert!(text.contains(what.trim_start_matches("headers: 65537 bytes")), "{text} names {what}");
    }
    // Nothing reached the server: the transaction is intact and commits the good message.
    writer(&db).enqueue(&tx, &[message()]).await.unwrap();
    tx.commit().await.unwrap();
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table("outbox")), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert!(matches!(
        writer(&db).enqueue(&client, &[message().header("h", "v".repeat(MAX_HEADERS_BYTES))]).await,
        Err(EnqueueError::Invalid(e)) if matches!(e.problem(), MessageProblem::TooLong { field, .. } if field == "headers")
    ));
}

/// OUT-3: the largest values accepted are stored: a lane key of `MAX_LANE_KEY_BYTES` (in
/// multi-byte characters too) fits the lane index, a delay of `MAX_DELIVERY_DELAY` and
/// delivery times at both ends of the accepted range are valid timestamps.
#[tokio::test]
async fn the_largest_accepted_values_are_stored_by_postgresql_out_3() {
    let (db, client) = setup().await;
    let edges = vec![
        message().lane("k".repeat(MAX_LANE_KEY_BYTES)),
        message().lane(format!("{}{}", "ü".repeat(MAX_LANE_KEY_BYTES / 2 - 1), "kk")),
        NewMessage::new("queue", "d".repeat(MAX_DESTINATION_BYTES), vec![]),
        message().header("h", "v".repeat(MAX_HEADERS_BYTES - 1)),
        message().trace_context("t".repeat(MAX_TRACE_CONTEXT_BYTES)),
        message().delivery(Delivery::After(MAX_DELIVERY_DELAY)),
        message().delivery(Delivery::At(EARLIEST_DELIVERY)),
        message().delivery(Delivery::At(LATEST_DELIVERY)),
    ];
    let written = writer(&db).enqueue(&client, &edges).await.unwrap();
    assert_eq!(written.len(), edges.len());
    let far: bool = client
        .query_one(
            &format!(
                "SELECT visible_at > now() + interval '36499 days' FROM {} WHERE seq = $1",
                db.namespace().table("outbox")
            ),
            &[&written[5].seq],
        )
        .await
        .unwrap()
        .get(0);
    assert!(far, "the longest delay is measured on the database clock");
}

/// OPT-3: the longest finite retention is a cut-off PostgreSQL can compute: a cleanup
/// batch with it runs (a longer one failed every pass with "timestamp out of range").
#[tokio::test]
async fn the_longest_retention_runs_a_cleanup_batch_opt_3() {
    let (db, client) = setup().await;
    let retention = RetentionStatements::new(db.namespace());
    assert_eq!(
        retention
            .delete_expired(&client, RetentionTable::Dead, MAX_RETENTION, 10, None)
            .await
            .unwrap()
            .unwrap(),
        0
    );
    assert_eq!(
        retention
            .delete_expired(&client, RetentionTable::Inbox, MAX_RETENTION, 10, None)
            .await
            .unwrap()
            .unwrap(),
        0
    );
}

/// DSP-3, LAN-4: the locked completion (the sweeper's, whose row locks are its claim)
/// matches rows by seq, but is fenced by what locked rows are — unordered, no live claim —
/// so even outside the locking transaction it never changes a lane row or a row a
/// dispatcher holds.
#[tokio::test]
async fn a_locked_completion_never_changes_lane_rows_or_rows_under_a_live_claim_dsp_3() {
    let (db, client) = setup().await;
    let written = writer(&db).enqueue(&client, &[message(), message().lane("l"), message()]).await.unwrap();
    let statements = OutboxStatements::new(db.namespace());
    let token = Uuid::new_v4();
    let held =
        statements.claim_seqs(&client, token, Duration::from_secs(30), &[written[0].seq]).await.unwrap();
    assert_eq!(held.messages.len(), 1);

    let mut completion = Completion::new();
    for row in &written {
        completion.accept(row.seq);
    }
    let report = PgStore::new(&client, &statements).complete_locked(&completion).await.unwrap();
    assert_eq!((report.deleted, report.fenced_out), (1, 2), "only the free unordered row");
    let left: Vec<i64> = client
        .query(&format!("SELECT seq FROM {} ORDER BY seq", db.namespace().table("outbox")), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(left, vec![written[0].seq, written[1].seq]);

    let mut buried = Completion::new();
    buried.bury(written[1].seq, "poison");
    buried.retry(written[0].seq, "down", Duration::ZERO);
    let report = PgStore::new(&client, &statements).complete_locked(&buried).await.unwrap();
    assert_eq!((report.dead, report.released, report.fenced_out), (0, 0, 2));
}

/// Durations handed to the statements by a raw API rather than validated options (a lease
/// built by hand, a retry delay, a claim, a retention) are clamped to
/// `MAX_DATABASE_DURATION`: `Duration::MAX` means 100 years, never a failed statement
/// ("interval out of range") repeated on every pass.
#[tokio::test]
async fn any_duration_reaching_sql_is_clamped_to_what_postgresql_represents() {
    let (db, mut client) = setup().await;
    let tx = client.transaction().await.unwrap();
    let lease = LeaseStatements::new(db.namespace()).acquire(&tx, "job", "me", Duration::MAX).await.unwrap();
    assert!(lease.is_some(), "a lease of Duration::MAX is a lease of 100 years");
    tx.commit().await.unwrap();

    let written = writer(&db).enqueue(&client, &[message(), message()]).await.unwrap();
    let statements = OutboxStatements::new(db.namespace());
    let token = Uuid::new_v4();
    let claimed = statements.claim_due(&client, token, Duration::MAX, 10, &[]).await.unwrap();
    assert_eq!(claimed.messages.len(), 2);
    let mut completion = Completion::new();
    completion.retry(written[0].seq, "down", Duration::MAX);
    completion.defer(written[1].seq, Duration::MAX);
    let report = statements.complete(&client, token, &completion).await.unwrap();
    assert_eq!((report.released, report.deferred), (1, 1));
    let far: bool = client
        .query_one(
            &format!(
                "SELECT bool_and(visible_at > now() + interval '36499 days') FROM {}",
                db.namespace().table("outbox")
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(far);
    let retention = RetentionStatements::new(db.namespace());
    assert_eq!(
        retention
            .delete_expired(&client, RetentionTable::Dead, Duration::MAX, 10, None)
            .await
            .unwrap()
            .unwrap(),
        0
    );
}
