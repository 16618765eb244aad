//! Worker statements prepared once per pooled connection ([`Prepared`], [`PgClient`]):
//! they give the same answers as unnamed statements, stay bounded under the generic plans
//! PostgreSQL may cache for them (the empty-table plan trap (docs/performance.md, "Raw limits"): a plan made on an empty table), and a
//! cached statement that a schema change broke is prepared again instead of failing forever.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use relayer_core::RetentionTable;
use relayer_core::store::{LeaderCheck, LockOutbox, PageRequest, UnderLease};
use relayer_core::{NewMessage, PassPlan, ScanWindow, Uuid};
use relayer_postgres::recovery::RecoveryStatements;
use relayer_postgres::retention::RetentionStatements;
use relayer_postgres::{
    Completion, Executor, LOST_STATEMENTS_BEFORE_GIVING_UP, LaneStatements, LeaseStatements,
    OutboxStatements, OutboxWriter, PgClient, PgStore, Prepared, StatementMode, connect_pool,
    connect_pool_with, migrate,
};
use relayer_test_support::TestDb;
use tokio_postgres::types::Type;

const CLAIM: Duration = Duration::from_secs(30);

async fn setup() -> (TestDb, PgClient) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, PgClient::new(client))
}

fn messages(n: usize) -> Vec<NewMessage> {
    (0..n).map(|i| NewMessage::new("queue", "orders", format!("m{i}").into_bytes())).collect()
}

fn page_request(plan: PassPlan, limit: u32, leader: Option<LeaderCheck<'_>>) -> PageRequest<'_> {
    PageRequest { plan, recovery_delay: Duration::ZERO, limit, leader }
}

/// Every statement is prepared once per connection and reused; pooled connections cache
/// their own.
#[tokio::test]
async fn a_pooled_connection_prepares_each_statement_once() {
    let (db, client) = setup().await;
    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    writer.enqueue(&client, &messages(3)).await.unwrap();
    let outbox = OutboxStatements::new(db.namespace());
    for _ in 0..3 {
        let claimed = outbox.claim_due(&client, Uuid::new_v4(), CLAIM, 1, &[]).await.unwrap().messages;
        assert_eq!(claimed.len(), 1);
    }
    assert_eq!(client.statements().len(), 2, "the enqueue and the claim, each prepared once");

    let pool = connect_pool(db.config(), 1).await.unwrap();
    let connection = pool.get().await.unwrap();
    assert!(connection.statements().is_empty());
    assert!(outbox.claim_due(&*connection, Uuid::new_v4(), CLAIM, 1, &[]).await.unwrap().messages.is_empty());
    drop(connection);
    assert_eq!(pool.get().await.unwrap().statements().len(), 1, "the cache lives with its connection");

    // Behind a transaction-mode pooler: nothing is prepared, everything still runs.
    let unnamed = connect_pool_with(db.config(), 1, StatementMode::Unnamed).await.unwrap();
    let connection = unnamed.get().await.unwrap();
    assert!(!connection.statements().is_enabled());
    writer.enqueue(&*connection, &messages(2)).await.unwrap();
    assert_eq!(
        outbox.claim_due(&*connection, Uuid::new_v4(), CLAIM, 5, &[]).await.unwrap().messages.len(),
        2
    );
    assert!(connection.statements().is_empty());
}

/// A statement whose cached plan a schema change invalidated fails once, is dropped from
/// the cache, and works on the next call.
#[tokio::test]
async fn a_statement_broken_by_a_schema_change_is_prepared_again() {
    let (db, client) = setup().await;
    let table = format!("{}.\"scratch\"", db.namespace().quoted_schema());
    client
        .batch_execute(&format!("CREATE TABLE {table} (a int); INSERT INTO {table} VALUES (1)"))
        .await
        .unwrap();
    let sql = format!("SELECT * FROM {table}");
    assert_eq!(client.rows(&sql, &[]).await.unwrap().len(), 1);
    client.batch_execute(&format!("ALTER TABLE {table} ADD COLUMN b int")).await.unwrap();
    let broken = client.rows(&sql, &[]).await;
    assert!(broken.is_err(), "the cached plan's result type changed: {broken:?}");
    let rows = client.rows(&sql, &[]).await.unwrap();
    assert_eq!(rows[0].columns().len(), 2, "prepared again against the new table");
}

/// A server that forgets the connection's prepared statements (`DEALLOCATE ALL` here; a
/// transaction-mode pooler does it behind our back) costs one failed call, after which they
/// are prepared again; when it keeps happening the connection stops preparing altogether.
#[tokio::test]
async fn lost_prepared_statements_are_prepared_again_and_then_no_longer_prepared() {
    let (db, client) = setup().await;
    let outbox = OutboxStatements::new(db.namespace());
    let claim = || outbox.claim_due(&client, Uuid::new_v4(), CLAIM, 1, &[]);
    for loss in 1..=LOST_STATEMENTS_BEFORE_GIVING_UP {
        claim().await.unwrap();
        assert_eq!(client.statements().len(), 1);
        client.batch_execute("DEALLOCATE ALL").await.unwrap();
        let error = claim().await.unwrap_err();
        assert!(error.to_string().contains("claiming due outbox rows"), "{error}");
        assert!(client.statements().is_empty(), "loss {loss}: every entry is forgotten");
    }
    assert!(!client.statements().is_enabled());
    // What the connection was opened as does not change: a lent pool is judged by it.
    assert_eq!(client.statements().mode(), StatementMode::Prepared);
    OutboxWriter::new(db.namespace(), ["queue"]).enqueue(&client, &messages(2)).await.unwrap();
    assert_eq!(claim().await.unwrap().messages.len(), 1, "statements are sent unnamed and still work");
    assert!(client.statements().is_empty());
}

/// Calls in flight together (a lane pass works its lanes side by side on one connection)
/// all fail on one loss; it counts once, so the cache does not give up on a single
/// `DISCARD ALL`.
#[tokio::test]
async fn one_loss_seen_by_several_calls_in_flight_counts_once() {
    let (db, client) = setup().await;
    let outbox = OutboxStatements::new(db.namespace());
    let claim = || outbox.claim_due(&client, Uuid::new_v4(), CLAIM, 1, &[]);
    claim().await.unwrap();
    client.batch_execute("DEALLOCATE ALL").await.unwrap();
    let (a, b, c, d) = tokio::join!(claim(), claim(), claim(), claim());
    assert!(a.is_err() && b.is_err() && c.is_err() && d.is_err());
    assert!(client.statements().is_enabled(), "one loss, not four");
    claim().await.unwrap();
    assert_eq!(client.statements().len(), 1, "prepared again");
}

/// the empty-table plan trap (docs/performance.md, "Raw limits"), for the statements a pass prepares: a generic plan made while the
/// outbox was empty must still take at most `limit` rows once it fills — the claim, the
/// recovery page (and its lock), and the completion.
#[tokio::test]
async fn generic_plans_made_on_an_empty_outbox_stay_bounded() {
    let (db, mut client) = setup().await;
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    let (outbox, recovery) = (OutboxStatements::new(db.namespace()), RecoveryStatements::new(db.namespace()));
    // Prepared and planned on the empty table.
    assert!(outbox.claim_due(&client, Uuid::new_v4(), CLAIM, 5, &[]).await.unwrap().messages.is_empty());
    let capture = page_request(PassPlan::CaptureBoundary, 5, None);
    assert_eq!(recovery.lock_page(&client, &capture).await.unwrap().unwrap().window, None);

    let written =
        OutboxWriter::new(db.namespace(), ["queue"]).enqueue(&client, &messages(600)).await.unwrap();
    let token = Uuid::new_v4();
    let claimed = outbox.claim_due(&client, token, CLAIM, 5, &[]).await.unwrap().messages;
    assert_eq!(claimed.len(), 5);
    let mut completion = Completion::new();
    claimed.iter().for_each(|m| completion.accept(m.seq));
    assert_eq!(outbox.complete(&client, token, &completion).await.unwrap().deleted, 5);

    let (connection, statements) = client.split();
    let tx = connection.transaction().await.unwrap();
    let on_tx = Prepared::new(&tx, statements);
    let found = recovery.lock_page(&on_tx, &capture).await.unwrap().unwrap();
    assert_eq!(found.window.map(|w| w.up_to), Some(written[599].seq));
    assert_eq!(found.page.eligible, written[5..10].iter().map(|w| w.seq).collect::<Vec<_>>());
    assert_eq!(found.locked.len(), 5);
    // A window whose rows are all too young: the scan stops at its cap, not at the table's end.
    let young = PageRequest {
        recovery_delay: Duration::from_secs(3600),
        ..page_request(PassPlan::Scan(ScanWindow { after: 0, up_to: i64::MAX }), 2, None)
    };
    let capped = recovery.lock_page(&on_tx, &young).await.unwrap().unwrap();
    assert!(capped.page.eligible.is_empty() && capped.locked.is_empty());
    assert_eq!(capped.page.scanned_up_to, Some(written[5 + 99].seq), "2 × 50 rows read");
    tx.rollback().await.unwrap();
    assert!(client.statements().len() >= 4);
}

/// The rest of the statements a worker prepares, planned generic on empty tables: the
/// claim by seq, the five-part completion (retry, defer, bury), the locked completion, the
/// lane claim and the retention batches (plain and under the cleanup lease) each stay
/// bounded and exact once the tables fill.
#[tokio::test]
async fn every_other_worker_statement_stays_bounded_under_a_generic_plan() {
    let (db, mut client) = setup().await;
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    let outbox = OutboxStatements::new(db.namespace());
    let (lanes, retention) = (LaneStatements::new(db.namespace()), RetentionStatements::new(db.namespace()));
    let token = Uuid::new_v4();
    // Planned while everything is empty.
    assert!(outbox.claim_seqs(&client, token, CLAIM, &[1, 2]).await.unwrap().messages.is_empty());
    let mut mixed = Completion::new();
    mixed.retry(1, "down", CLAIM);
    mixed.defer(2, CLAIM);
    assert_eq!(outbox.complete(&client, token, &mixed).await.unwrap().fenced_out, 2);
    assert!(lanes.claim(&client, token, CLAIM, 3, "", 12, &[]).await.unwrap().lanes.is_empty());
    assert_eq!(
        retention
            .delete_expired(&client, RetentionTable::Dead, Duration::from_secs(60), 5, None)
            .await
            .unwrap()
            .unwrap(),
        0
    );
    // Cleanup's batch under its lease, planned on an empty dead table too.
    let cleanup_lease = {
        let (connection, statements) = client.split();
        let tx = connection.transaction().await.unwrap();
        let lease = LeaseStatements::new(db.namespace())
            .acquire(&Prepared::new(&tx, statements), "cleanup", "a", CLAIM)
            .await
            .unwrap()
            .unwrap();
        tx.commit().await.unwrap();
        lease
    };
    let minute = Duration::from_secs(60);
    let leased = retention
        .delete_expired(
            &client,
            RetentionTable::Dead,
            minute,
            5,
            Some(UnderLease { lease: &cleanup_lease, lease_duration: CLAIM }),
        )
        .await;
    assert_eq!(leased.unwrap(), Some(0));

    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    let written = writer.enqueue(&client, &messages(300)).await.unwrap();
    let laned: Vec<NewMessage> =
        (0..40).map(|i| NewMessage::new("queue", "orders", vec![1]).lane(format!("lane-{i}"))).collect();
    writer.enqueue(&client, &laned).await.unwrap();
    let seqs: Vec<i64> = written[..4].iter().map(|w| w.seq).collect();
    let claimed = outbox.claim_seqs(&client, token, CLAIM, &seqs).await.unwrap().messages;
    assert_eq!(claimed.len(), 4);
    let mut completion = Completion::new();
    completion.accept(seqs[0]);
    completion.retry(seqs[1], "down", CLAIM);
    completion.defer(seqs[2], CLAIM);
    completion.bury(seqs[3], "refused");
    let report = outbox.complete(&client, token, &completion).await.unwrap();
    assert_eq!(
        (report.deleted, report.released, report.deferred, report.dead, report.fenced_out),
        (1, 1, 1, 1, 0)
    );
    let lane_claim = lanes.claim(&client, token, CLAIM, 3, "", 12, &[]).await.unwrap();
    assert_eq!(lane_claim.lanes.len(), 3, "{lane_claim:?}");

    // The locked completion, inside a pass's transaction.
    {
        let (connection, statements) = client.split();
        let tx = connection.transaction().await.unwrap();
        let on_tx = Prepared::new(&tx, statements);
        let recovery = RecoveryStatements::new(db.namespace());
        let found =
            recovery.lock_page(&on_tx, &page_request(PassPlan::CaptureBoundary, 3, None)).await.unwrap();
        let locked = found.unwrap().locked;
        assert_eq!(locked.len(), 3);
        let mut completion = Completion::new();
        completion.accept(locked[0].seq);
        completion.retry(locked[1].seq, "down", CLAIM);
        completion.bury(locked[2].seq, "refused");
        let report = PgStore::new(&on_tx, &outbox).complete_locked(&completion).await.unwrap();
        assert_eq!((report.deleted, report.released, report.dead), (1, 1, 1));
        tx.commit().await.unwrap();
    }

    // Dead rows are now old enough for a retention of zero: a batch takes exactly its limit.
    client
        .batch_execute(&format!(
            "UPDATE {} SET failed_at = now() - interval '1 day'",
            db.namespace().table("dead")
        ))
        .await
        .unwrap();
    // Two dead rows: each batch statement takes exactly what its limit allows.
    let leased = retention
        .delete_expired(
            &client,
            RetentionTable::Dead,
            minute,
            1,
            Some(UnderLease { lease: &cleanup_lease, lease_duration: CLAIM }),
        )
        .await;
    assert_eq!(leased.unwrap(), Some(1));
    assert_eq!(
        retention.delete_expired(&client, RetentionTable::Dead, minute, 5, None).await.unwrap().unwrap(),
        1
    );
}

/// The sweeper sends its page read in the same round trip as its lease acquisition: the
/// read takes nothing unless the named lease is live and held by the named owner — also as
/// a prepared statement under a generic plan.
#[tokio::test]
async fn a_page_conditional_on_a_lease_reads_nothing_without_it() {
    let (db, mut client) = setup().await;
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    OutboxWriter::new(db.namespace(), ["queue"]).enqueue(&client, &messages(3)).await.unwrap();
    let (leases, recovery) = (LeaseStatements::new(db.namespace()), RecoveryStatements::new(db.namespace()));
    let as_a = LeaderCheck { job: "sweeper", owner: "a" };
    let as_b = LeaderCheck { job: "sweeper", owner: "b" };
    let capture = |leader| page_request(PassPlan::CaptureBoundary, 10, Some(leader));

    // No lease row yet: nobody leads.
    assert_eq!(recovery.lock_page(&client, &capture(as_a)).await.unwrap(), None);
    {
        let (connection, statements) = client.split();
        let tx = connection.transaction().await.unwrap();
        let on_tx = Prepared::new(&tx, statements);
        let lease = leases.acquire(&on_tx, "sweeper", "a", CLAIM).await.unwrap().unwrap();
        assert_eq!(lease.term, 1);
        let found = recovery.lock_page(&on_tx, &capture(as_a)).await.unwrap().unwrap();
        assert_eq!(found.locked.len(), 3, "the holder reads and locks its page");
        tx.commit().await.unwrap();
    }
    assert_eq!(
        recovery.lock_page(&client, &capture(as_b)).await.unwrap(),
        None,
        "another owner's live lease"
    );
    // Once released (expired now), the old holder's check fails too.
    assert!(leases.release(&client, "sweeper", "a").await.unwrap());
    assert_eq!(recovery.lock_page(&client, &capture(as_a)).await.unwrap(), None);
    assert!(client.statements().len() >= 3, "the page, the lease and the release ran prepared");
}

/// LDR-2: a pass's renewal restarts the expiry when the pass ends, not when its
/// transaction began.
#[tokio::test]
async fn a_renewal_counts_the_lease_from_the_end_of_the_pass() {
    let (db, mut client) = setup().await;
    let leases = LeaseStatements::new(db.namespace());
    let tx = client.transaction().await.unwrap();
    let lease = leases.acquire(&tx, "sweeper", "a", CLAIM).await.unwrap().unwrap();
    // The pass works a while: the database clock moves on inside the transaction.
    tx.batch_execute("SELECT pg_sleep(0.05)").await.unwrap();
    let renewed = leases.renew(&tx, &lease, CLAIM).await.unwrap().unwrap();
    assert!(renewed.expires_at > lease.expires_at, "{renewed:?} vs {lease:?}");
    let from_end: bool = tx
        .rows(
            &format!(
                "SELECT expires_at >= now() + $1::int8 * interval '1 microsecond' + interval '50 ms' FROM {}",
                db.namespace().table("leases")
            ),
            &[(&i64::try_from(CLAIM.as_micros()).unwrap(), Type::INT8)],
        )
        .await
        .unwrap()[0]
        .get(0);
    assert!(from_end, "the expiry counts from after the pass's work");
    tx.commit().await.unwrap();
}
