//! What one call holds is bounded (SPEC §15): `dispatch_now` claims at most a batch.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{FaultyTransport, count, database, dispatcher, eventually, options, run_once, writer};
use relayer_core::NewMessage;

/// OUT-4, DSP-1: `dispatch_now` given 25 just-written rows with a batch size of 10 claims
/// and sends the first 10 only; the other 15 stay pending and unclaimed for the passes,
/// which send them all.
#[tokio::test]
async fn dispatch_now_claims_at_most_a_batch_and_leaves_the_rest_to_the_passes_dsp_1() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options().batch_size(10), transport.clone(), 1).await;
    let client = db.connect().await;
    let batch: Vec<NewMessage> =
        (0..25).map(|n| NewMessage::new("test", "orders", format!("m{n}").into_bytes())).collect();
    let written = writer(&dispatcher).enqueue(&client, &batch).await.unwrap();
    let report = dispatcher.dispatch_now(&written).await.unwrap();
    assert_eq!((report.claimed, report.sent), (10, 10), "{report:?}");
    let sent: Vec<_> = transport.accepted().iter().map(|(_, e)| e.id).collect();
    assert_eq!(sent, written[..10].iter().map(|w| w.id).collect::<Vec<_>>(), "the first batch, in order");
    let unclaimed =
        format!("SELECT count(*) FROM {} WHERE claim_token IS NULL", db.namespace().table("outbox"));
    assert_eq!(client.query_one(&unclaimed, &[]).await.unwrap().get::<_, i64>(0), 15);
    eventually("the passes send the rest", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "outbox").await == 0
    })
    .await;
    assert_eq!(transport.accepted().len(), 25);
}
