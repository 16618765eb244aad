//! Tripped destinations cost other work nothing (DSP-6, NS-5) and the running dispatcher
//! reports its passes like every worker (RES-1..3).
#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use common::{FaultyTransport, count, database, dispatcher, options, run_once, writer};
use relayer_core::NewMessage;
use relayer_postgres::OutboxWriter;
use relayer_test_support::within;
use relayer_worker::{PassOutcome, WorkerEvent};
use tokio_util::sync::CancellationToken;

fn broken(n: usize) -> NewMessage {
    NewMessage::new("test", "broken", format!("bad-{n}").into_bytes())
}

async fn due_rows(
    client: &tokio_postgres::Client,
    db: &relayer_test_support::TestDb,
    destination: &str,
) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM {} WHERE destination = $1 AND visible_at <= now()",
        db.namespace().table("outbox")
    );
    client.query_one(&sql, &[&destination]).await.unwrap().get(0)
}

/// DSP-6, NS-5: when a destination's breaker trips, its rows due within the cool-down —
/// the failed batch's retries included — are held back, no attempt counted, so later claims
/// never read them; the rows of other destinations flow.
#[tokio::test]
async fn a_tripped_destinations_due_rows_are_held_back_so_claims_never_read_them_dsp_6() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.failing_bodies.lock().unwrap().extend((0..500).map(|n| format!("bad-{n}").into_bytes()));
    let breaker =
        options().breaker_threshold(NonZeroU32::new(1).unwrap()).breaker_cool_down(Duration::from_secs(3600));
    let dispatcher = dispatcher(&db, breaker, transport.clone(), 1).await;
    let client = db.connect().await;
    let writer = writer(&dispatcher);
    writer.enqueue(&client, &(0..500).map(broken).collect::<Vec<_>>()).await.unwrap();
    writer.enqueue(&client, &[NewMessage::new("test", "healthy", b"ok".to_vec())]).await.unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!(report.failed, 50, "one batch (the transport's limit) failed and tripped the breaker");
    assert_eq!(report.held_back, 500, "every row of the destination due within the cool-down");
    assert_eq!(due_rows(&client, &db, "broken").await, 0, "nothing of it is due: claims never read it");
    let attempted: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {} WHERE attempts > 0", db.namespace().table("outbox")),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempted, 50, "holding back counts no attempt");

    run_once(&dispatcher).await.unwrap();
    assert_eq!(count(&client, &db, "outbox").await, 500, "the healthy row went; the broken ones wait");
    assert_eq!(transport.accepted().len(), 1);
}

/// DSP-6b: a tripped destination with a backlog larger than several hold-back statements
/// (`HOLD_BACK_BATCH` rows each) is held back whole — each statement resumes after the
/// previous one, none moves more than a batch — while another destination keeps being
/// delivered; after the cool-down, once the destination answers again, every held row goes
/// out and nothing is lost or dead.
#[tokio::test]
async fn a_large_tripped_backlog_is_held_back_in_bounded_statements_and_delivered_after_the_cool_down_dsp_6()
{
    let backlog = 2 * usize::try_from(relayer_postgres::HOLD_BACK_BATCH).unwrap() + 1_000;
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test").with_batch_limit(500));
    transport.failing_destinations.lock().unwrap().insert("broken".to_owned());
    let breaker = options()
        .batch_size(500)
        .breaker_threshold(NonZeroU32::new(1).unwrap())
        .breaker_cool_down(Duration::from_millis(500));
    let dispatcher = dispatcher(&db, breaker, transport.clone(), 1).await;
    let client = db.connect().await;
    let writer = writer(&dispatcher);
    for start in (0..backlog).step_by(5_000) {
        writer
            .enqueue(&client, &(start..(start + 5_000).min(backlog)).map(broken).collect::<Vec<_>>())
            .await
            .unwrap();
    }

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!(report.failed, 500, "one batch failed and tripped the breaker");
    assert_eq!(
        usize::try_from(report.held_back).unwrap(),
        backlog,
        "the whole backlog, over several statements"
    );
    assert_eq!(due_rows(&client, &db, "broken").await, 0);

    // During the cool-down another destination is delivered as written.
    let healthy: Vec<NewMessage> =
        (0..20).map(|n| NewMessage::new("test", "healthy", format!("ok-{n}").into_bytes())).collect();
    writer.enqueue(&client, &healthy).await.unwrap();
    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.claimed, report.sent), (20, 20), "only the healthy rows are claimed: {report:?}");

    // The destination answers again; after the cool-down everything held goes out.
    transport.failing_destinations.lock().unwrap().clear();
    within(async {
        while count(&client, &db, "outbox").await > 0 {
            run_once(&dispatcher).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let mut bodies: Vec<Vec<u8>> = transport.accepted().into_iter().map(|(_, e)| e.body).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), backlog + 20, "every row delivered");
    assert_eq!(count(&client, &db, "dead").await, 0, "nothing dead");
}

/// The held rows of `destination` by the instant they are due at, oldest first.
async fn held_instants(
    client: &tokio_postgres::Client,
    db: &relayer_test_support::TestDb,
    destination: &str,
) -> Vec<(std::time::SystemTime, i64)> {
    let sql = format!(
        "SELECT visible_at, count(*) FROM {} WHERE destination = $1 AND visible_at > now() \
         GROUP BY visible_at ORDER BY visible_at",
        db.namespace().table("outbox")
    );
    client.query(&sql, &[&destination]).await.unwrap().iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// DSP-6d: a trip holds the backlog's oldest `HOLD_BACK_HEAD` rows to the cool-down's end
/// and parks the rest `PARKED_COOL_DOWNS` cool-downs out; a probe that fails again re-holds
/// the head only — the parked tail is neither read nor moved — and the probe that
/// succeeds closes the breaker and makes the parked tail due at once, so the whole
/// backlog is delivered long before the park would have ended, nothing lost or dead.
#[tokio::test]
async fn a_failed_probe_re_holds_only_the_head_and_a_closing_breaker_releases_the_parked_tail_dsp_6() {
    let head = usize::try_from(relayer_postgres::HOLD_BACK_HEAD).unwrap();
    let backlog = head + 3_000;
    let cool_down = Duration::from_secs(2);
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test").with_batch_limit(500));
    transport.failing_destinations.lock().unwrap().insert("broken".to_owned());
    let breaker =
        options().batch_size(500).breaker_threshold(NonZeroU32::new(1).unwrap()).breaker_cool_down(cool_down);
    let dispatcher = dispatcher(&db, breaker, transport.clone(), 1).await;
    let client = db.connect().await;
    let writer = writer(&dispatcher);
    writer.enqueue(&client, &(0..backlog).map(broken).collect::<Vec<_>>()).await.unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!(usize::try_from(report.held_back).unwrap(), backlog, "{report:?}");
    let held = held_instants(&client, &db, "broken").await;
    assert_eq!(held.len(), 2, "a head and a parked tail: {held:?}");
    let ((head_at, head_rows), (parked_at, parked_rows)) = (held[0], held[1]);
    assert_eq!(
        (usize::try_from(head_rows).unwrap(), usize::try_from(parked_rows).unwrap()),
        (head, backlog - head)
    );
    let parked_for = parked_at.duration_since(head_at).unwrap();
    assert_eq!(parked_for, cool_down * (relayer_postgres::PARKED_COOL_DOWNS - 1), "parked past the head");

    // The head comes due; the probe fails again: only the head is held again.
    let report = within(async {
        loop {
            let report = run_once(&dispatcher).await.unwrap();
            if report.held_back > 0 {
                break report;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(report.failed, 500, "the probe batch failed: {report:?}");
    // The head's rows the probe's pass did not hold under its own claim (a prefetched batch
    // it defers instead), and nothing more.
    let reheld = usize::try_from(report.held_back).unwrap();
    assert!(reheld > 0 && reheld <= head, "the head, not the backlog: {report:?}");
    let held = held_instants(&client, &db, "broken").await;
    assert_eq!(
        held.last().copied(),
        Some((parked_at, parked_rows)),
        "the parked tail was not moved: {held:?}"
    );

    // The destination answers: the next probe closes the breaker and frees the parked tail.
    transport.failing_destinations.lock().unwrap().clear();
    within(async {
        loop {
            if run_once(&dispatcher).await.unwrap().sent > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let parked_left: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {} WHERE visible_at = $1", db.namespace().table("outbox")),
            &[&parked_at],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(parked_left, 0, "the closing breaker released the parked tail");
    within(async {
        while count(&client, &db, "outbox").await > 0 {
            run_once(&dispatcher).await.unwrap();
        }
    })
    .await;
    let mut bodies: Vec<Vec<u8>> = transport.accepted().into_iter().map(|(_, e)| e.body).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), backlog, "every row delivered");
    assert_eq!(count(&client, &db, "dead").await, 0, "nothing dead");
}

/// DSP-6, LAN-1: a lane whose head goes to a tripped destination is not claimed, so the
/// lane loop neither sends to it nor cycles claims and releases on it; other lanes flow.
#[tokio::test]
async fn lane_claims_skip_lanes_whose_head_goes_to_a_tripped_destination_dsp_6() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.failing_bodies.lock().unwrap().insert(b"bad".to_vec());
    let breaker =
        options().breaker_threshold(NonZeroU32::new(1).unwrap()).breaker_cool_down(Duration::from_secs(3600));
    let dispatcher = dispatcher(&db, breaker, transport.clone(), 1).await;
    let client = db.connect().await;
    let writer = OutboxWriter::new(db.namespace(), ["test"]);
    let lane_rows: Vec<NewMessage> = (0..3)
        .map(|lane| NewMessage::new("test", "broken", b"bad".to_vec()).lane(format!("lane-{lane}")))
        .collect();
    writer.enqueue(&client, &lane_rows).await.unwrap();

    let first = run_once(&dispatcher).await.unwrap();
    assert_eq!(first.lanes, 3);
    assert!(first.failed >= 1, "the first failure trips the breaker");
    let calls = transport.calls.load(std::sync::atomic::Ordering::SeqCst);
    writer
        .enqueue(&client, &[NewMessage::new("test", "healthy", b"ok".to_vec()).lane("lane-ok")])
        .await
        .unwrap();
    let second = run_once(&dispatcher).await.unwrap();
    assert_eq!((second.lanes, second.sent), (1, 1), "only the healthy lane is claimed");
    let third = run_once(&dispatcher).await.unwrap();
    assert_eq!(third.lanes, 0, "tripped lanes are not claimed, not even to be released");
    assert_eq!(transport.calls.load(std::sync::atomic::Ordering::SeqCst), calls + 1);
}

/// RES-1..3: the running dispatcher's loops report every pass to subscribers — tests wait
/// on these events, never poll — and each loop reports its stop.
#[tokio::test]
async fn a_running_dispatcher_reports_its_passes_and_its_stop_to_subscribers() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options().concurrency(2), transport.clone(), 2).await;
    let mut events = dispatcher.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await }
    });
    let client = db.connect().await;
    let messages: Vec<NewMessage> =
        (0..5).map(|n| NewMessage::new("test", "orders", format!("m{n}").into_bytes())).collect();
    writer(&dispatcher).enqueue(&client, &messages).await.unwrap();
    dispatcher.committed();
    let mut sent = 0;
    within(async {
        while sent < 5 {
            if let WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } =
                events.recv().await.unwrap()
            {
                sent += report.sent;
            }
        }
    })
    .await;
    assert_eq!(transport.accepted().len(), 5);
    shutdown.cancel();
    within(task).await.unwrap().unwrap();
    let mut stopped = 0;
    while let Ok(event) = events.try_recv() {
        stopped += u32::from(event == WorkerEvent::Stopped);
    }
    assert_eq!(stopped, 3, "two unordered loops and the lane loop");
}
