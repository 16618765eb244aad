//! DSP-1b: an unordered pass pipelines its batches — claims the next while the current one
//! is at the transport, completes the previous one meanwhile — and still delivers
//! everything, leaves nothing claimed when shut down, and holds a tripped destination back
//! once while the others flow.
#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{FaultyTransport, count, database, dispatcher, eventually, options, run_once, writer};
use relayer_core::NewMessage;
use relayer_test_support::{TestDb, within};
use tokio_util::sync::CancellationToken;

fn message(destination: &str, n: usize) -> NewMessage {
    NewMessage::new("test", destination, format!("{destination}-{n}").into_bytes())
}

async fn rows_where(client: &tokio_postgres::Client, db: &TestDb, condition: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {} WHERE {condition}", db.namespace().table("outbox"));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// DSP-1b: a backlog of several batches goes out in one pass, one transport call per batch,
/// and the pass stops on the batch that was not full.
#[tokio::test]
async fn a_backlog_of_several_batches_is_delivered_by_one_pipelined_pass_dsp_1b() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options().batch_size(10), transport.clone(), 1).await;
    let client = db.connect().await;
    writer(&dispatcher)
        .enqueue(&client, &(0..45).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.claimed, report.sent, report.deferred), (45, 45, 0), "{report:?}");
    assert_eq!(transport.calls.load(Ordering::SeqCst), 5, "five batches of at most ten, each sent once");
    assert_eq!(count(&client, &db, "outbox").await, 0);
    let mut bodies: Vec<_> = transport.accepted().into_iter().map(|(_, envelope)| envelope.body).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 45, "every message once");
}

/// DSP-1b: a pass is bounded: a backlog larger than its bound is left for the next pass.
#[tokio::test]
async fn a_pipelined_pass_is_bounded_and_the_next_one_goes_on_dsp_1b() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options().batch_size(2), transport.clone(), 1).await;
    let client = db.connect().await;
    writer(&dispatcher)
        .enqueue(&client, &(0..100).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();

    let first = run_once(&dispatcher).await.unwrap();
    assert!(first.sent > 2 && first.sent < 100, "more than one batch, not the whole backlog: {first:?}");
    assert_eq!(rows_where(&client, &db, "claim_token IS NOT NULL").await, 0, "nothing left claimed");
    eventually("the rest goes in later passes", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "outbox").await == 0
    })
    .await;
    assert_eq!(transport.accepted().len(), 100);
}

/// DSP-1b, LIF-1: shut down while a batch is at the transport and the next one is already
/// claimed: the batch in flight finishes and is completed, the prefetched one is released
/// at once — no row is left claimed, every row is either gone or free now.
#[tokio::test]
async fn a_shutdown_during_a_pipelined_pass_leaves_no_row_claimed_dsp_1b() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.gated.store(true, Ordering::SeqCst);
    let dispatcher = dispatcher(&db, options().batch_size(10).concurrency(1), transport.clone(), 2).await;
    let client = db.connect().await;
    writer(&dispatcher)
        .enqueue(&client, &(0..50).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();

    let shutdown = CancellationToken::new();
    let worker = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await }
    });
    within(transport.entered.notified()).await;
    eventually("the next batch is claimed while the first is held at the transport", || async {
        rows_where(&client, &db, "claim_token IS NOT NULL").await == 20
    })
    .await;
    shutdown.cancel();
    transport.open_gate();
    within(worker).await.unwrap().unwrap();

    assert_eq!(transport.accepted().len(), 10, "the batch in flight was sent, the prefetched one was not");
    assert_eq!(count(&client, &db, "outbox").await, 40, "the sent batch was completed");
    assert_eq!(rows_where(&client, &db, "claim_token IS NOT NULL").await, 0, "no row is left claimed");
    assert_eq!(rows_where(&client, &db, "visible_at > now()").await, 0, "every row left is free at once");
    assert_eq!(rows_where(&client, &db, "attempts > 0").await, 0, "releasing counts no attempt");
}

/// DSP-1b, DSP-6: a breaker that trips while the next batch is already claimed holds its
/// destination back once; the rows of it in the prefetched batch are released for the
/// cool-down unsent, and the other destination's rows all go.
#[tokio::test]
async fn a_breaker_tripping_mid_pipeline_holds_its_destination_back_and_others_flow_dsp_1b() {
    let db = database().await;
    let mut slow = FaultyTransport::new("test");
    // Slow enough that the next claim overlaps the send that trips the breaker.
    slow.delay = Duration::from_millis(20);
    let transport = Arc::new(slow);
    transport.failing_destinations.lock().unwrap().insert("broken".to_owned());
    let breaker = options()
        .batch_size(10)
        .breaker_threshold(NonZeroU32::new(1).unwrap())
        .breaker_cool_down(Duration::from_secs(3600));
    let dispatcher = dispatcher(&db, breaker, transport.clone(), 1).await;
    let client = db.connect().await;
    let interleaved: Vec<_> = (0..20).flat_map(|n| [message("broken", n), message("healthy", n)]).collect();
    writer(&dispatcher).enqueue(&client, &interleaved).await.unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert!(report.claimed > 10, "the pass worked several batches: {report:?}");
    assert_eq!(
        (report.sent, report.failed),
        (20, 5),
        "one send to the broken destination, then none: {report:?}"
    );
    // Held back once: the 5 rows whose send failed and the 10 nobody had claimed. The 5 in
    // the batch prefetched before the trip are under its live claim, left to it and
    // released by it for the cool-down — counted once, as deferred, never twice.
    assert_eq!(report.held_back, 15, "held back once, not once per batch that met it: {report:?}");
    assert_eq!(report.deferred, 5, "the prefetched batch's broken rows: {report:?}");
    assert_eq!(transport.accepted().len(), 20, "every healthy row went");
    assert!(transport.accepted().iter().all(|(destination, _)| destination == "healthy"));
    assert_eq!(count(&client, &db, "outbox").await, 20, "the broken rows wait");
    assert_eq!(rows_where(&client, &db, "claim_token IS NOT NULL").await, 0, "no row is left claimed");
    assert_eq!(
        rows_where(&client, &db, "visible_at < now() + interval '3000 seconds'").await,
        0,
        "every broken row waits out the cool-down"
    );
    assert_eq!(rows_where(&client, &db, "attempts > 0").await, 5, "only the failed send counted attempts");
}

/// DSP-1b, TRN-5: a prefetched batch is sent only with a whole send timeout left before its
/// own deadline. Behind a transport slower than the slack between the two, the batch
/// claimed ahead is released unsent — no attempt counted, free at once — and the
/// dispatcher then claims batch by batch, so no later pass claims ahead only to release.
#[tokio::test]
async fn behind_a_slow_transport_a_batch_claimed_ahead_is_released_not_sent_short_dsp_1b() {
    let db = database().await;
    let mut slow = FaultyTransport::new("test");
    // Claim 2 s: each batch's sends end by 1 s after its claim; a send timeout of 600 ms
    // leaves 400 ms of slack, less than one 500 ms send.
    slow.delay = Duration::from_millis(500);
    let transport = Arc::new(slow);
    let timing = options()
        .batch_size(10)
        .claim_duration(Duration::from_secs(2))
        .send_timeout(Some(Duration::from_millis(600)));
    let dispatcher = dispatcher(&db, timing, transport.clone(), 1).await;
    let client = db.connect().await;
    writer(&dispatcher)
        .enqueue(&client, &(0..30).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();

    let first = run_once(&dispatcher).await.unwrap();
    assert_eq!((first.sent, first.deferred, first.failed, first.timed_out), (10, 10, 0, 0), "{first:?}");
    assert_eq!(rows_where(&client, &db, "claim_token IS NOT NULL").await, 0, "no row is left claimed");
    assert_eq!(rows_where(&client, &db, "visible_at > now()").await, 0, "the released rows are free at once");
    assert_eq!(rows_where(&client, &db, "attempts > 0").await, 0, "releasing counts no attempt");

    // Having seen how slow a send is, the next pass claims no batch ahead.
    let second = run_once(&dispatcher).await.unwrap();
    assert_eq!((second.claimed, second.sent, second.deferred), (10, 10, 0), "{second:?}");
    assert_eq!(count(&client, &db, "outbox").await, 10);
}
