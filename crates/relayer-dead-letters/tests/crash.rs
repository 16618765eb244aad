//! Crash windows of the dead-letter policy pass, hit on purpose through test-support's
//! `FaultyStore` around relayer's PostgreSQL source (DLP-3, LDR-2): a move whose answer is
//! lost, a connection lost between the lease and the moves. Each checks on the real tables
//! that every dead letter moved exactly once.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::time::Duration;

use common::{DAY, db_now, dead_letter, in_queue, send, setup, source};
use relayer_core::{DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, StoreSource};
use relayer_dead_letters::{DeadLetterWorker, LEASE_JOB};
use relayer_postgres::{LeaseStatements, PgSource};
use relayer_test_support::{Fault, FaultyStore, StoreCall, TestDb, Transience, within};
use relayer_worker::Leadership;

/// A worker redriving queue `orders`' dead letters from `dead`, `batch_size` at a time, on
/// `store`, led as `leadership` says.
fn worker(
    db: &TestDb,
    store: FaultyStore<PgSource>,
    batch_size: u32,
    leadership: Leadership,
) -> DeadLetterWorker<FaultyStore<PgSource>> {
    let policy = DeadLetterPolicy::redrive(Duration::ZERO, DAY).unwrap();
    let options = DeadLetterOptions::builder().batch_size(batch_size).build().unwrap();
    DeadLetterWorker::new(
        store,
        db.namespace().clone(),
        DeadLetterPolicies::new([DeadLetterRule::queue("orders", "dead", policy)]).unwrap(),
        options,
        leadership,
    )
}

/// DLP-3: the answer to a redrive is lost after the statement committed. The pass fails
/// transiently; the batch it moved is back in its topic once, and the next pass moves the
/// rest, never the same dead letter twice.
#[tokio::test]
async fn a_redrive_whose_answer_is_lost_is_not_moved_twice_dlp_3() {
    let (db, client) = setup().await;
    send(&db, "orders", 25, db_now(&client).await).await;
    assert_eq!(dead_letter(&client, &db, "orders", "dead", "handler", 25).await, 25);
    let store = FaultyStore::new(source(&db, 1).await);
    let worker = worker(&db, store.clone(), 10, Leadership::EveryInstance);

    let lost =
        store.inject(Fault::fail_after(StoreCall::RedriveDeadLetters, Transience::Transient).at_call(2));
    let error = worker.run_once(&mut store.open().await.unwrap()).await.unwrap_err();
    assert!(error.is_transient(), "{error:?}");
    assert_eq!(lost.strikes(), 1);
    assert_eq!(
        in_queue(&client, &db, "orders").await,
        20,
        "both batches committed, the second's answer was lost"
    );
    assert_eq!(in_queue(&client, &db, "dead").await, 5);

    let report = worker.run_once(&mut store.open().await.unwrap()).await.unwrap();
    assert_eq!(report.redriven, 5, "only the dead letters still dead move");
    assert_eq!(in_queue(&client, &db, "orders").await, 25);
    assert_eq!(in_queue(&client, &db, "dead").await, 0);
}

/// LDR-2: the connection dies right after the lease was taken, before any move. The lease
/// transaction had committed, so the same owner leads the next pass on a new connection
/// (renewing its own term) and moves every dead letter once.
#[tokio::test]
async fn a_connection_lost_between_the_lease_and_the_moves_costs_one_pass_ldr_2() {
    let (db, client) = setup().await;
    send(&db, "orders", 7, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 7).await;
    let store = FaultyStore::new(source(&db, 1).await);
    let leadership = Leadership::lease(LEASE_JOB, "a", Duration::from_secs(30));
    let worker = worker(&db, store.clone(), 10, leadership);

    let killed = store.inject(Fault::kill_after(StoreCall::Commit));
    let error = worker.run_once(&mut store.open().await.unwrap()).await.unwrap_err();
    assert!(error.is_transient(), "{error:?}");
    assert_eq!(killed.strikes(), 1);
    assert_eq!(in_queue(&client, &db, "dead").await, 7);

    let report = worker.run_once(&mut store.open().await.unwrap()).await.unwrap();
    assert!(report.led, "the lease the lost pass took is still this owner's");
    assert_eq!(report.redriven, 7);
    assert_eq!(in_queue(&client, &db, "orders").await, 7);
}

/// LDR-6: a leader whose lease passed to another instance while its pass was under way
/// moves nothing more. Its pass took the lease (term 1), then stalls before its first
/// batch; the lease lapses and another owner takes it (term 2). The stale pass's batch
/// checks owner and term, finds them changed, rolls back and ends: every dead letter stays
/// for the new leader.
#[tokio::test]
async fn a_stale_leaders_pass_commits_nothing_ldr_6() {
    let (db, mut client) = setup().await;
    send(&db, "orders", 7, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 7).await;
    let store = FaultyStore::new(source(&db, 1).await);
    let leadership = Leadership::lease(LEASE_JOB, "a", Duration::from_secs(1));
    let stale = worker(&db, store.clone(), 10, leadership);

    // The first acquire takes the lease; the second is the first batch's fence.
    let stalled = store.inject(Fault::hold(StoreCall::Acquire).at_call(2));
    let pass = tokio::spawn({
        let store = store.clone();
        async move { stale.run_once(&mut store.open().await.unwrap()).await }
    });
    within(stalled.struck(1)).await;

    // Another instance takes the lease once it has lapsed (a bounded wait on a condition).
    let leases = LeaseStatements::new(db.namespace());
    let taken = within(async {
        loop {
            if let Some(lease) = leases.acquire_committed(&mut client, LEASE_JOB, "b", DAY).await.unwrap() {
                return lease;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(taken.term, 2, "{taken:?}");

    stalled.release();
    let report = within(pass).await.unwrap().unwrap();
    assert!(report.led && report.fenced_off, "{report:?}");
    assert_eq!(report.redriven, 0, "{report:?}");
    assert_eq!(in_queue(&client, &db, "dead").await, 7, "the stale leader moved nothing");
    assert_eq!(in_queue(&client, &db, "orders").await, 0);
    let current = leases.current(&client, LEASE_JOB).await.unwrap().unwrap();
    assert_eq!((current.owner.as_str(), current.term), ("b", 2), "the new leader's lease is untouched");
}
