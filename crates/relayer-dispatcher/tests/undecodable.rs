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

/// The three kinds of undecodable row: (transport, headers as jsonb text, what the
/// `last_error` must say besides the table and seq).
const BAD: [(&str, &str, &str); 3] = [
    (
        "test",
        r#"{"a":1}"#,
        r#"column headers: expected a JSON object of strings, but header "a" is a number"#,
    ),
    ("test", "null", "column headers: expected a JSON object of strings, found null"),
    ("nope", "{}", r#"column transport: no transport named "nope" is registered here (known: test)"#),
];

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
    assert_eq!((report.claimed, report.sent, report.undecodable, report.dead), (8, 5, 3, 3), "{report:?}");
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
    assert_eq!((report.sent, report.undecodable, report.dead), (1, 3, 3), "{report:?}");
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
    let lanes = ["lane-h", "lane-n", "lane-t"];
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
        (4, 1, 3, 3),
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
    assert_eq!(parked.len(), 3);
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
        9,
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

/// SPEC §15 for any store: a store that decodes every transport name (here relayer's, built
/// without `with_transports`) still never makes the dispatcher retry a row it cannot send:
/// the dispatcher itself moves an unordered row naming an unregistered transport to the
/// dead table, and parks a lane whose head names one, with the same reason.
#[tokio::test]
async fn rows_naming_an_unregistered_transport_are_dead_or_parked_whatever_the_store_spec_15() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let registry = Arc::new(relayer_core::TransportRegistry::new().with(transport.clone()).unwrap());
    let pool = relayer_postgres::connect_pool(db.config(), 1).await.unwrap();
    // No `with_transports`: the store hands every row over as decodable.
    let source = relayer_postgres::PgSource::new(pool, db.namespace());
    let dispatcher = relayer_dispatcher::Dispatcher::new(
        source,
        db.namespace().clone(),
        options().build().unwrap(),
        registry,
    )
    .unwrap();
    let client = db.connect().await;
    let unordered = write_bad_row(&client, &db, 2, None).await;
    let head = write_bad_row(&client, &db, 2, Some("lane-n")).await;
    writer(&dispatcher)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"behind".to_vec()).lane("lane-n")])
        .await
        .unwrap();

    let report = dispatcher.run_once().await.unwrap();
    assert_eq!((report.sent, report.failed, report.undecodable), (0, 0, 2), "{report:?}");
    assert_eq!((report.dead, report.lanes_parked), (1, 1), "{report:?}");
    assert!(transport.accepted().is_empty());
    let reason = |seq: i64| format!("undecodable row {} seq {seq}: {}", table(&db), BAD[2].2);
    assert_eq!(dead_errors(&client, &db).await, vec![(unordered, reason(unordered))]);
    let parked: (Option<i64>, Option<String>) = {
        let sql = format!(
            "SELECT parked_seq, parked_reason FROM {} WHERE lane = 'lane-n'",
            db.namespace().table("lanes")
        );
        let row = client.query_one(&sql, &[]).await.unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(parked, (Some(head), Some(reason(head))), "the lane parks behind its head");
    assert_eq!(count(&client, &db, "outbox").await, 2, "the parked head and the row behind it wait");
}
