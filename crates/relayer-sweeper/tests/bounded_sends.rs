//! A sweep pass never outlives its lease, whatever its transport does (TRN-5).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    Sink, count, database, eventually, lease, message, options, pool, session, sweeper, transport, within,
};
use relayer_postgres::OutboxWriter;

/// TRN-5, LDR-2: a transport that never answers cannot hold the sweeper's pass, its lease
/// row, its row locks or its snapshot. The pass ends by half its lease with every message of
/// the hung batch failed transiently (attempts counted, retried later), commits, and once
/// the lease lapses another instance leads and sends the rows.
#[tokio::test]
async fn a_pass_whose_transport_never_answers_ends_within_its_lease_and_another_instance_leads_trn_5() {
    let db = database().await;
    let client = db.connect().await;
    let writer = OutboxWriter::new(db.namespace(), ["test"]);
    writer.enqueue(&client, &(1..=3).map(|n| message("orders", n)).collect::<Vec<_>>()).await.unwrap();

    let hung = Arc::new(transport(Sink::default()));
    hung.gated.store(true, Ordering::SeqCst); // every send waits for a permit that never comes
    let lease_duration = Duration::from_secs(2);
    let (pool_a, _) = pool(&db, "a", 1).await;
    let a = sweeper(
        pool_a.clone(),
        &db,
        options(10).lease_duration(lease_duration),
        hung,
        lease("a", lease_duration),
    );
    let report = {
        let mut connection = session(&a).await;
        within(a.run_once(&mut connection)).await.unwrap()
    };
    assert!(report.led);
    assert_eq!((report.claimed, report.sent, report.failed, report.timed_out), (3, 0, 3, 1));

    let rows = client
        .query(
            &format!("SELECT attempts, last_error FROM {} ORDER BY seq", db.namespace().table("outbox")),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3, "nothing lost");
    for row in &rows {
        assert_eq!(row.get::<_, i32>(0), 1, "the timed-out send counted one attempt");
        assert!(row.get::<_, String>(1).contains("send timeout"), "{:?}", row.get::<_, String>(1));
    }

    let sink = Sink::default();
    let working = Arc::new(transport(sink.clone()));
    let (pool_b, _) = pool(&db, "b", 1).await;
    let b = sweeper(
        pool_b.clone(),
        &db,
        options(10).lease_duration(lease_duration),
        working,
        lease("b", lease_duration),
    );
    let (b, client, db) = (&b, &client, &db);
    eventually("another instance leads and sends every row", move || async move {
        let mut connection = session(b).await;
        let report = b.run_once(&mut connection).await.unwrap();
        report.led && count(client, db, "outbox").await == 0
    })
    .await;
    assert_eq!(sink.lock().unwrap().len(), 3);
}
