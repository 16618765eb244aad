//! Text PostgreSQL refuses never wedges a batch (SPEC §15): a transport whose errors carry
//! a NUL (U+0000), which no `text` value may hold, and are far longer than any stored
//! error. Each attempt is still counted, the rows are buried at `max_attempts` and a lane
//! parks, with the error stored sanitized and bounded.
#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::{FaultyTransport, count, database, dispatcher, eventually, options, run_once, writer};
use relayer_core::NewMessage;
use relayer_core::bounded_text::{MAX_ERROR_BYTES, NUL_REPLACEMENT, TRUNCATED};

/// A transport failing every message with an error holding a NUL and 20 000 more bytes.
fn nul_transport() -> Arc<FaultyTransport> {
    let mut transport = FaultyTransport::new("test");
    transport.error_detail = format!(": broker said \0 then {}", "x".repeat(20_000));
    transport.failing.store(true, Ordering::SeqCst);
    Arc::new(transport)
}

/// The stored error: the transport's text up to the NUL, the replacement, cut and marked.
fn assert_sanitized(error: &str) {
    assert!(
        error.contains(&format!("injected message failure: broker said {NUL_REPLACEMENT} then x")),
        "{error}"
    );
    assert!(!error.contains('\0'));
    assert!(error.len() <= MAX_ERROR_BYTES && error.ends_with(TRUNCATED), "{} bytes", error.len());
}

/// DSP-5, SPEC §15: 20 rows whose every send fails with a NUL in the error are each
/// counted and buried at `max_attempts`; the dead rows carry the sanitized, bounded error.
#[tokio::test]
async fn errors_carrying_a_nul_are_counted_and_their_rows_buried_at_max_attempts_dsp_5() {
    let db = database().await;
    let capped = options().max_attempts(NonZeroU32::new(2)).breaker_threshold(NonZeroU32::new(1000).unwrap());
    let dispatcher = dispatcher(&db, capped, nul_transport(), 1).await;
    let client = db.connect().await;
    let batch: Vec<NewMessage> =
        (0..20).map(|n| NewMessage::new("test", "orders", format!("m{n}").into_bytes())).collect();
    writer(&dispatcher).enqueue(&client, &batch).await.unwrap();
    eventually("every row is dead", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "dead").await == 20
    })
    .await;
    assert_eq!(count(&client, &db, "outbox").await, 0);
    let dead = client
        .query(&format!("SELECT attempts, last_error FROM {}", db.namespace().table("dead")), &[])
        .await
        .unwrap();
    for row in dead {
        assert_eq!(row.get::<_, i32>(0), 2);
        assert_sanitized(&row.get::<_, String>(1));
    }
}

/// LAN-2, SPEC §15: a lane whose head fails with a NUL in the error counts each attempt
/// and parks at `max_attempts`, the park's reason and the head's error sanitized.
#[tokio::test]
async fn a_lane_whose_errors_carry_a_nul_parks_at_max_attempts_lan_2() {
    let db = database().await;
    let capped = options().max_attempts(NonZeroU32::new(2));
    let dispatcher = dispatcher(&db, capped, nul_transport(), 1).await;
    let client = db.connect().await;
    let batch: Vec<NewMessage> = (0..3)
        .map(|n| NewMessage::new("test", "orders", format!("m{n}").into_bytes()).lane("order-1"))
        .collect();
    writer(&dispatcher).enqueue(&client, &batch).await.unwrap();
    let lanes = db.namespace().table("lanes");
    eventually("the lane is parked", || async {
        run_once(&dispatcher).await.unwrap();
        let sql = format!("SELECT count(*) FROM {lanes} WHERE parked_at IS NOT NULL");
        client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    let sql = format!(
        "SELECT o.attempts, o.last_error, l.parked_reason FROM {} o JOIN {lanes} l ON o.seq = l.parked_seq",
        db.namespace().table("outbox")
    );
    let head = client.query_one(&sql, &[]).await.unwrap();
    assert_eq!(head.get::<_, i32>(0), 2);
    assert_sanitized(&head.get::<_, String>(1));
    assert_sanitized(&head.get::<_, String>(2));
    assert_eq!(count(&client, &db, "outbox").await, 3, "the lane is parked, nothing lost");
}
