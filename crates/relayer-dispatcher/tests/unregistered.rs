//! Rows of a transport this dispatcher lacks stay pending for an instance that has it
//! (TRN-6). They are written by the writer of a service that has the transport.
#![allow(clippy::unwrap_used)]
// `common` re-exports helpers for other test files.
#![allow(unused_imports)]

mod common;

use std::sync::Arc;

use common::{FaultyTransport, count, database, dispatcher, options, run_once, writer};
use relayer_core::NewMessage;
use relayer_postgres::OutboxWriter;
use relayer_test_support::TestDb;

/// (seq, attempts, last_error IS NULL, claim_token IS NULL) of every outbox row, by seq.
async fn rows(client: &tokio_postgres::Client, db: &TestDb) -> Vec<(i64, i32, bool, bool)> {
    let sql = format!(
        "SELECT seq, attempts, last_error IS NULL, claim_token IS NULL FROM {} ORDER BY seq",
        db.namespace().table("outbox")
    );
    client.query(&sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
}

/// TRN-6 on ordered lanes: a lane whose head names a transport the dispatcher lacks waits,
/// whole — not parked, not left claimed, and the rows of a registered transport behind its
/// head are not delivered ahead of it — while another lane and unordered rows of the
/// registered transport flow, pass after pass. A dispatcher that has the transport then
/// delivers the lane in order.
#[tokio::test]
async fn a_lane_whose_head_names_an_unregistered_transport_waits_whole_trn_6() {
    let db = database().await;
    let test = Arc::new(FaultyTransport::new("test"));
    let old = dispatcher(&db, options(), Arc::clone(&test), 1).await;
    let client = db.connect().await;
    // The writer of a service that has both transports.
    let both = OutboxWriter::new(db.namespace(), ["test", "other"]);
    let lane = vec![
        NewMessage::new("other", "orders", b"head".to_vec()).lane("l"),
        NewMessage::new("test", "orders", b"behind-1".to_vec()).lane("l"),
        NewMessage::new("test", "orders", b"behind-2".to_vec()).lane("l"),
        NewMessage::new("other", "orders", b"unordered-other".to_vec()),
    ];
    both.enqueue(&client, &lane).await.unwrap();
    let flowing = vec![
        NewMessage::new("test", "orders", b"m-1".to_vec()).lane("m"),
        NewMessage::new("test", "orders", b"m-2".to_vec()).lane("m"),
        NewMessage::new("test", "orders", b"unordered-test".to_vec()),
    ];
    writer(&old).enqueue(&client, &flowing).await.unwrap();

    for _ in 0..3 {
        let report = run_once(&old).await.unwrap();
        assert_eq!((report.lanes_parked, report.undecodable, report.dead, report.failed), (0, 0, 0, 0));
    }
    let mut sent: Vec<Vec<u8>> = test.accepted().into_iter().map(|(_, e)| e.body).collect();
    sent.sort();
    assert_eq!(sent, vec![b"m-1".to_vec(), b"m-2".to_vec(), b"unordered-test".to_vec()]);
    let waiting = rows(&client, &db).await;
    assert_eq!(waiting.len(), 4, "the lane and the other transport's row wait: {waiting:?}");
    assert!(waiting.iter().all(|&(_, attempts, no_error, free)| attempts == 0 && no_error && free));
    let lanes = format!(
        "SELECT count(*) FROM {} WHERE parked_at IS NOT NULL OR claimed_until > now()",
        db.namespace().table("lanes")
    );
    let held: i64 = client.query_one(&lanes, &[]).await.unwrap().get(0);
    assert_eq!(held, 0, "the lane is neither parked nor held");

    // A dispatcher with both transports drains it, the lane in order.
    let other = Arc::new(FaultyTransport::with_sink("other", Arc::clone(&test.sink)));
    let registry =
        Arc::new(relayer_core::TransportRegistry::new().with(test.clone()).unwrap().with(other).unwrap());
    let pool = relayer_postgres::connect_pool(db.config(), 1).await.unwrap();
    let source = relayer_postgres::PgSource::new(pool, db.namespace()).with_transports(registry.names());
    let new = relayer_dispatcher::Dispatcher::new(
        source,
        db.namespace().clone(),
        options().build().unwrap(),
        registry,
    )
    .unwrap();
    for _ in 0..3 {
        new.run_once().await.unwrap();
    }
    assert_eq!(count(&client, &db, "outbox").await, 0);
    assert_eq!(count(&client, &db, "dead").await, 0);
    let lane_l: Vec<Vec<u8>> = test
        .accepted()
        .into_iter()
        .map(|(_, e)| e.body)
        .filter(|b| b.starts_with(b"head") || b.starts_with(b"behind"))
        .collect();
    assert_eq!(lane_l, vec![b"head".to_vec(), b"behind-1".to_vec(), b"behind-2".to_vec()]);
}

/// TRN-6 on both claims of unordered rows: rows of a transport the dispatcher lacks are
/// never claimed — not by the due-row claim, not by commit-triggered dispatch by seq — so
/// they are not even counted as claimed, while the rows beside them are sent.
#[tokio::test]
async fn unordered_rows_of_an_unregistered_transport_are_never_claimed_trn_6() {
    let db = database().await;
    let test = Arc::new(FaultyTransport::new("test"));
    let old = dispatcher(&db, options(), Arc::clone(&test), 1).await;
    let client = db.connect().await;
    let both = OutboxWriter::new(db.namespace(), ["test", "other"]);
    let written = both
        .enqueue(
            &client,
            &[
                NewMessage::new("other", "orders", b"o-1".to_vec()),
                NewMessage::new("test", "orders", b"t-1".to_vec()),
                NewMessage::new("other", "orders", b"o-2".to_vec()),
            ],
        )
        .await
        .unwrap();
    let now = old.dispatch_now(&written).await.unwrap();
    assert_eq!((now.claimed, now.sent), (1, 1), "{now:?}");
    both.enqueue(&client, &[NewMessage::new("test", "orders", b"t-2".to_vec())]).await.unwrap();
    let report = run_once(&old).await.unwrap();
    assert_eq!((report.claimed, report.sent, report.deferred), (1, 1, 0), "{report:?}");
    let waiting = rows(&client, &db).await;
    let expected: Vec<(i64, i32, bool, bool)> =
        [written[0].seq, written[2].seq].into_iter().map(|seq| (seq, 0, true, true)).collect();
    assert_eq!(waiting, expected, "untouched");
}

/// TRN-6 within an owned lane: once this dispatcher has sent the heads it can, a next head
/// naming a transport it lacks is let go unjudged — even one it could not decode (bad
/// headers) is not parked here, for only an instance with that transport may decide about
/// it. The lane is left neither parked nor held, the row untouched; the rows behind it
/// wait in order.
#[tokio::test]
async fn an_owned_lane_whose_next_head_is_another_transports_is_let_go_unjudged_trn_6() {
    let db = database().await;
    let test = Arc::new(FaultyTransport::new("test"));
    let here = dispatcher(&db, options(), Arc::clone(&test), 1).await;
    let client = db.connect().await;
    writer(&here)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"first".to_vec()).lane("l")])
        .await
        .unwrap();
    // Written by a service that has "other", with headers this build cannot read.
    let sql = format!(
        "INSERT INTO {} (message_id, transport, destination, body, headers, lane) \
         VALUES (gen_random_uuid(), 'other', 'orders', '\\x00', '[1, 2]'::jsonb, 'l') RETURNING seq",
        db.namespace().table("outbox")
    );
    let foreign: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
    writer(&here)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"behind".to_vec()).lane("l")])
        .await
        .unwrap();

    for _ in 0..3 {
        let report = run_once(&here).await.unwrap();
        assert_eq!(
            (report.lanes_parked, report.undecodable, report.dead, report.failed),
            (0, 0, 0, 0),
            "{report:?}"
        );
    }
    let sent: Vec<Vec<u8>> = test.accepted().into_iter().map(|(_, e)| e.body).collect();
    assert_eq!(sent, vec![b"first".to_vec()], "the head it could send, and nothing behind the foreign one");
    let waiting = rows(&client, &db).await;
    assert_eq!(waiting.iter().map(|r| r.0).next(), Some(foreign), "{waiting:?}");
    assert_eq!(waiting.len(), 2);
    assert!(waiting.iter().all(|&(_, attempts, no_error, free)| attempts == 0 && no_error && free));
    let lanes = format!(
        "SELECT count(*) FROM {} WHERE parked_at IS NOT NULL OR claimed_until > now()",
        db.namespace().table("lanes")
    );
    let held: i64 = client.query_one(&lanes, &[]).await.unwrap().get(0);
    assert_eq!(held, 0, "the lane is neither parked nor held");
}
