//! A destination that trips in a sweep pass costs later pages and claims nothing (DSP-6).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use common::{Sink, database, lease, message, options, pool, registry, session, transport, within};
use relayer_core::DispatcherOptions;
use relayer_core::StoreSource;
use relayer_delivery::SendPath;
use relayer_postgres::{OutboxWriter, PgSource};
use relayer_sweeper::Sweeper;
use relayer_test_support::{Fault, FaultyStore, StoreCall, Transience};

/// DSP-6, NS-5: when a destination's breaker trips during a sweep pass, its rows due within
/// the cool-down are held back once the pass has committed (no attempt counted), so neither
/// later pages nor dispatcher claims read them; other destinations are still swept.
#[tokio::test]
async fn a_destination_that_trips_in_a_sweep_pass_is_held_back_for_its_cool_down_dsp_6() {
    let db = database().await;
    let client = db.connect().await;
    let writer = OutboxWriter::new(db.namespace(), ["test"]);
    writer.enqueue(&client, &(0..30).map(|n| message("broken", n)).collect::<Vec<_>>()).await.unwrap();
    writer.enqueue(&client, &[message("healthy", 0)]).await.unwrap();

    let transport = Arc::new(transport(Sink::default()));
    transport.failing_destinations.lock().unwrap().insert("broken".to_owned());
    let send_options = DispatcherOptions::builder()
        .breaker_threshold(NonZeroU32::new(1).unwrap())
        .breaker_cool_down(Duration::from_secs(3600))
        .build()
        .unwrap();
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let lease_duration = Duration::from_secs(30);
    let send = SendPath::new(registry(transport), send_options);
    let source = PgSource::new(pool, db.namespace()).with_transports(send.transports().names());
    let sweeper = Sweeper::new(
        source,
        db.namespace().clone(),
        options(10).build().unwrap(),
        send,
        lease("a", lease_duration),
    );
    let report = within(sweeper.run_once(&mut session(&sweeper).await)).await.unwrap();
    assert_eq!(report.failed, 10, "the first page's batch failed and tripped the breaker");
    assert_eq!(report.held_back, 30, "every row of the destination due within the cool-down");

    let due_broken: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE destination = 'broken' AND visible_at <= now()",
                db.namespace().table("outbox")
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(due_broken, 0, "nothing of it is due: pages and claims never read it");
    let attempted: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {} WHERE attempts > 0", db.namespace().table("outbox")),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempted, 10, "holding back counts no attempt");
}

/// DSP-6b: the hold-back runs after the pass committed, outside its transaction, so a hold
/// that fails (or takes long, over a large backlog) rolls back none of the page's
/// completions: the healthy rows stay delivered and deleted, the failed ones keep their
/// counted attempt, and the pass itself succeeds.
#[tokio::test]
async fn a_hold_back_that_fails_after_the_pass_committed_rolls_back_none_of_its_completions_dsp_6() {
    let db = database().await;
    let client = db.connect().await;
    let writer = OutboxWriter::new(db.namespace(), ["test"]);
    writer.enqueue(&client, &(0..10).map(|n| message("broken", n)).collect::<Vec<_>>()).await.unwrap();
    writer.enqueue(&client, &(0..5).map(|n| message("healthy", n)).collect::<Vec<_>>()).await.unwrap();

    let transport = Arc::new(transport(Sink::default()));
    transport.failing_destinations.lock().unwrap().insert("broken".to_owned());
    let send_options = DispatcherOptions::builder()
        .breaker_threshold(NonZeroU32::new(1).unwrap())
        .breaker_cool_down(Duration::from_secs(3600))
        .build()
        .unwrap();
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let send = SendPath::new(registry(transport.clone()), send_options);
    let store =
        FaultyStore::new(PgSource::new(pool, db.namespace()).with_transports(send.transports().names()));
    let failing = store.inject(Fault::fail_before(StoreCall::HoldBack, Transience::Transient).every_call());
    let sweeper = Sweeper::new(
        store,
        db.namespace().clone(),
        options(100).build().unwrap(),
        send,
        lease("a", Duration::from_secs(30)),
    );
    let mut session = sweeper.source().open().await.unwrap();
    let report = within(sweeper.run_once(&mut session)).await.unwrap();
    assert!(failing.strikes() >= 1, "the hold-back was tried and failed");
    assert_eq!((report.sent, report.failed, report.held_back), (5, 10, 0), "{report:?}");
    assert_eq!(transport.accepted().len(), 5);
    let left: Vec<(String, i32)> = client
        .query(&format!("SELECT destination, attempts FROM {}", db.namespace().table("outbox")), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(left, vec![("broken".to_owned(), 1); 10], "the page's completions committed");
}
