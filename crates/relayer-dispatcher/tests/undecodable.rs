//! Rows the dispatcher cannot decode never stall anything (SPEC §15): unordered ones move
//! to the dead table with their batch's completion, a lane head parks its lane (LAN-5).
//! The rows are written by hand, since relayer's writer refuses them (OUT-3).
#![allow(clippy::unwrap_used)]
// `common` re-exports helpers for other test files.
#![allow(unused_imports)]

mod common;

use std::sync::Arc;

use common::{FaultyTransport, count, database, dispatcher, options, run_once, writer};
use relayer_core::NewMessage;
use relayer_postgres::Enqueued;
use relayer_test_support::TestDb;

/// The kinds of undecodable row: (transport, headers as jsonb text, what the `last_error`
/// must say besides the table and seq). A row naming a transport this process lacks is not
/// one (TRN-6): see `unregistered.rs` and the last test here.
const BAD: [(&str, &str, &str); 2] = [
    (
        "test",
        r#"{"a":1}"#,
        r#"column headers: expected a JSON object of strings, but header "a" is a number"#,
    ),
    ("test", "null", "column headers: expected a JSON object of strings, found null"),
];

/// A row of a transport the dispatcher lacks, written as its writer would (by hand here:
/// this test's writer refuses the name, OUT-3); returns its seq.
async fn write_foreign_row(client: &tokio_postgres::Client, db: &TestDb, lane: Option<&str>) -> i64 {
    let sql = format!(
        "INSERT INTO {} (message_id, transport, destination, body, lane) \
         VALUES (gen_random_uuid(), 'nope', 'orders', '\\x00', $1) RETURNING seq",
        db.namespace().table("outbox")
    );
    client.query_one(&sql, &[&lane]).await.unwrap().get(0)
}

/// (attempts, last_error IS NULL) of outbox row `seq`.
async fn row_state(client: &tokio_postgres::Client, db: &TestDb, seq: i64) -> (i32, bool) {
    let sql =
        format!("SELECT attempts, last_error IS NULL FROM {} WHERE seq = $1", db.namespace().table("outbox"));
    let row = client.query_one(&sql, &[&seq]).await.unwrap();
    (row.get(0), row.get(1))
}

/// Writes the `BAD` row of kind `which` straight into the outbox (on `lane` when given).
async fn write_bad_row(
    client: &tokio_postgres::Client,
    db: &TestDb,
    which: usize,
    lane: Option<&str>,
) -> i64 {
    let (transport, headers, _) = BAD[which];
    let sql = format!(
        "INSERT INTO {} (message_id, transport, destination, body, headers, lane) \
         VALUES (gen_random_uuid(), $1, 'orders', '\\x00', $2::text::jsonb, $3) RETURNING seq",
        db.namespace().table("outbox")
    );
    client.query_one(&sql, &[&transport, &headers, &lane]).await.unwrap().get(0)
}

/// Writes one row of each `BAD` kind, unordered; returns their seqs.
async fn write_bad_rows(client: &tokio_postgres::Client, db: &TestDb) -> Vec<i64> {
    let mut seqs = Vec::new();
    for which in 0..BAD.len() {
        seqs.push(write_bad_row(client, db, which, None).await);
    }
    seqs
}

/// The outbox as `last_error` names it.
fn table(db: &TestDb) -> String {
    format!("{}.{}", db.namespace().schema(), db.namespace().object_name("outbox"))
}

/// Each dead row's `last_error`, by seq.
async fn dead_errors(client: &tokio_postgres::Client, db: &TestDb) -> Vec<(i64, String)> {
    let sql = format!("SELECT seq, last_error FROM {} ORDER BY seq", db.namespace().table("dead"));
    client.query(&sql, &[]).await.unwrap().iter().map(|row| (row.get(0), row.get(1))).collect()
}

fn expected_errors(db: &TestDb, seqs: &[i64]) -> Vec<(i64, String)> {
    seqs.iter()
        .zip(BAD)
        .map(|(seq, (_, _, what))| (*seq, format!("undecodable row {} seq {seq}: {what}", table(db))))
        .collect()
}

/// SPEC §15 on the claim path: undecodable rows ahead of good ones move to the dead table
/// in the batch's completion, naming table, seq, column and reason; the good rows are sent.
#[tokio::test]
async fn undecodable_claimed_rows_move_to_dead_and_the_batch_goes_on_spec_15() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let client = db.connect().await;
    let bad = write_bad_rows(&client, &db).await;
    let good: Vec<NewMessage> =
        (0..5).map(|n| NewMessage::new("test", "orders", format!("good-{n}").into_bytes())).collect();
    writer(&dispatcher).enqueue(&client, &good).await.unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.claimed, report.sent, report.undecodable, report.dead), (7, 5, 2, 2), "{report:?}");
    assert_eq!(transport.accepted().len(), 5);
    assert_eq!(count(&client, &db, "outbox").await, 0, "nothing is left claimed or pending");
    assert_eq!(dead_errors(&client, &db).await, expected_errors(&db, &bad));
    assert_eq!(run_once(&dispatcher).await.unwrap().claimed, 0);
}

/// SPEC §15 on commit-triggered dispatch: rows claimed by seq are decoded one by one too.
#[tokio::test]
async fn undecodable_rows_dispatched_now_move_to_dead_spec_15() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let client = db.connect().await;
    let bad = write_bad_rows(&client, &db).await;
    let mut written = writer(&dispatcher)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"good".to_vec())])
        .await
        .unwrap();
    written.extend(bad.iter().map(|&seq| Enqueued { seq, id: relayer_core::MessageId::new() }));

    let report = dispatcher.dispatch_now(&written).await.unwrap();
    assert_eq!((report.sent, report.undecodable, report.dead), (1, 2, 2), "{report:?}");
    assert_eq!(dead_errors(&client, &db).await, expected_errors(&db, &bad));
}

/// SPEC §15 and LAN-5 on lane heads: an undecodable head parks its lane with the row's
/// description as the reason — never skipped (that would reorder the lane), never left
/// claimed, never retried in a loop — while other lanes flow. Skipping the head then lets
/// the lane drain in order.
#[tokio::test]
async fn an_undecodable_lane_head_parks_its_lane_with_the_reason_lan_5_spec_15() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let client = db.connect().await;
    let lanes = ["lane-h", "lane-n"];
    let mut heads = Vec::new();
    for (index, lane) in lanes.iter().enumerate() {
        // One kind of bad head per lane, each followed by two good rows.
        heads.push(write_bad_row(&client, &db, index, Some(lane)).await);
        let behind: Vec<NewMessage> = (0..2)
            .map(|n| NewMessage::new("test", "orders", format!("{lane}:{n}").into_bytes()).lane(*lane))
            .collect();
        writer(&dispatcher).enqueue(&client, &behind).await.unwrap();
    }
    writer(&dispatcher)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"ok:0".to_vec()).lane("lane-ok")])
        .await
        .unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!(
        (report.lanes, report.sent, report.undecodable, report.lanes_parked),
        (3, 1, 2, 2),
        "{report:?}"
    );
    let parked = client
        .query(
            &format!(
                "SELECT lane, parked_seq, parked_reason, claim_token IS NULL FROM {} \
                 WHERE parked_at IS NOT NULL ORDER BY lane",
                db.namespace().table("lanes")
            ),
            &[],
        )
        .await
        .unwrap();
    let expected = expected_errors(&db, &heads);
    assert_eq!(parked.len(), 2);
    for ((row, lane), (seq, reason)) in parked.iter().zip(lanes).zip(expected) {
        let got: (String, Option<i64>, Option<String>, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(
            got,
            (lane.to_owned(), Some(seq), Some(reason), true),
            "parked with the reason, unclaimed"
        );
    }
    assert_eq!(
        count(&client, &db, "outbox").await,
        6,
        "every parked lane keeps its head and the rows behind"
    );

    let again = run_once(&dispatcher).await.unwrap();
    assert_eq!((again.lanes, again.sent, again.undecodable), (0, 0, 0), "parked lanes are not claimed again");

    assert_eq!(dispatcher.skip_lane_head("lane-h", "test-operator").await.unwrap(), Some(heads[0]));
    let drained = run_once(&dispatcher).await.unwrap();
    assert_eq!(drained.sent, 2);
    let bodies: Vec<Vec<u8>> = transport.accepted().into_iter().map(|(_, e)| e.body).skip(1).collect();
    assert_eq!(bodies, vec![b"lane-h:0".to_vec(), b"lane-h:1".to_vec()], "in lane order");
    let dead = dead_errors(&client, &db).await;
    assert_eq!(dead, expected_errors(&db, &heads)[..1].to_vec(), "the skipped head keeps its reason");
}

/// TRN-6 for any store: a store that hands over rows of every transport (here relayer's,
/// built without `with_transports`) still never makes the dispatcher judge a row it cannot
/// send. An unordered row naming a transport this process lacks is released unsent — not
/// dead, no attempt counted, no error recorded — and a lane whose head names one is
/// released, neither parked nor skipped: the row behind the head waits.
#[tokio::test]
async fn rows_naming_an_unregistered_transport_wait_whatever_the_store_trn_6() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let registry = Arc::new(relayer_core::TransportRegistry::new().with(transport.clone()).unwrap());
    let pool = relayer_postgres::connect_pool(db.config(), 1).await.unwrap();
    // No `with_transports`: the store claims rows of every transport.
    let source = relayer_postgres::PgSource::new(pool, db.namespace());
    let dispatcher = relayer_dispatcher::Dispatcher::new(
        source,
        db.namespace().clone(),
        options().build().unwrap(),
        registry,
    )
    .unwrap();
    let client = db.connect().await;
    let unordered = write_foreign_row(&client, &db, None).await;
    let head = write_foreign_row(&client, &db, Some("lane-n")).await;
    writer(&dispatcher)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"behind".to_vec()).lane("lane-n")])
        .await
        .unwrap();

    let report = dispatcher.run_once().await.unwrap();
    let dead = dead_errors(&client, &db).await;
    assert_eq!(
        (report.sent, report.failed, report.undecodable, report.dead),
        (0, 0, 0, 0),
        "{report:?} {dead:?}"
    );
    assert_eq!(report.lanes_parked, 0, "{report:?}");
    assert!(transport.accepted().is_empty(), "nothing overtakes the lane's head");
    assert!(dead_errors(&client, &db).await.is_empty());
    for seq in [unordered, head] {
        assert_eq!(row_state(&client, &db, seq).await, (0, true), "seq {seq}: no attempt, no error");
    }
    let lane = format!(
        "SELECT count(*) FROM {} WHERE parked_at IS NOT NULL OR claimed_until > now()",
        db.namespace().table("lanes")
    );
    let held: i64 = client.query_one(&lane, &[]).await.unwrap().get(0);
    assert_eq!(held, 0, "the lane is neither parked nor left claimed");
    assert_eq!(count(&client, &db, "outbox").await, 3, "every row waits");
}
