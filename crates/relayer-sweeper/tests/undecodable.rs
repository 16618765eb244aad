//! Rows the sweeper cannot decode never stall recovery (SPEC §15). The rows are written
//! by hand, since relayer's writer refuses them (OUT-3).
#![allow(clippy::unwrap_used)]
// `common` re-exports helpers for other test files.
#![allow(unused_imports)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Sink, count, database, lease, message, options, pool, session, sweeper, transport};
use relayer_postgres::OutboxWriter;

/// SPEC §15 on the recovery path, the case found by hand: undecodable rows — a bad headers
/// shape, jsonb `null` — ahead of five good rows. The pass does not fail: the bad rows move
/// to the dead table in the pass's transaction, with a `last_error` naming the table, the
/// seq, the column and the reason; the good rows are sent in the same pass, and the next
/// pass finds nothing. A row naming a transport the sweeper lacks among them is not
/// undecodable (TRN-6): the page steps over it, and it stays pending, untouched.
#[tokio::test]
async fn undecodable_rows_in_a_recovery_page_move_to_dead_and_the_page_goes_on_spec_15() {
    let db = database().await;
    let client = db.connect().await;
    let outbox = db.namespace().table("outbox");
    let mut bad = Vec::new();
    for (transport, headers) in [("test", r#"{"a":1}"#), ("test", "null"), ("nope", "{}")] {
        let sql = format!(
            "INSERT INTO {outbox} (message_id, transport, destination, body, headers) \
             VALUES (gen_random_uuid(), $1, 'orders', '\\x00', $2::text::jsonb) RETURNING seq"
        );
        bad.push(client.query_one(&sql, &[&transport, &headers]).await.unwrap().get::<_, i64>(0));
    }
    let good: Vec<_> = (0..5).map(|n| message("orders", n)).collect();
    OutboxWriter::new(db.namespace(), ["test"]).enqueue(&client, &good).await.unwrap();

    let transport = Arc::new(transport(Sink::default()));
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let sweeper =
        sweeper(pool.clone(), &db, options(100), transport.clone(), lease("a", Duration::from_secs(30)));
    let mut conn = session(&sweeper).await;
    let report = sweeper.run_once(&mut conn).await.unwrap();
    assert_eq!(
        (report.scanned, report.claimed, report.sent, report.undecodable, report.dead),
        (7, 7, 5, 2, 2),
        "{report:?}"
    );
    assert_eq!(transport.accepted().len(), 5);
    let foreign = bad.pop().unwrap();
    let left: Vec<(i64, i32, bool)> = client
        .query(&format!("SELECT seq, attempts, last_error IS NULL FROM {outbox}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(left, vec![(foreign, 0, true)], "only the foreign row is left, untouched");

    let table = format!("{}.{}", db.namespace().schema(), db.namespace().object_name("outbox"));
    let dead: Vec<(i64, String)> = client
        .query(&format!("SELECT seq, last_error FROM {} ORDER BY seq", db.namespace().table("dead")), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let reasons = [
        r#"column headers: expected a JSON object of strings, but header "a" is a number"#,
        "column headers: expected a JSON object of strings, found null",
    ];
    let expected: Vec<(i64, String)> = bad
        .iter()
        .zip(reasons)
        .map(|(seq, reason)| (*seq, format!("undecodable row {table} seq {seq}: {reason}")))
        .collect();
    assert_eq!(dead, expected);

    let next = sweeper.run_once(&mut conn).await.unwrap();
    assert_eq!((next.claimed, next.undecodable), (0, 0), "{next:?}");
}
