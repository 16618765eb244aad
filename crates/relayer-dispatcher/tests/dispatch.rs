//! The dispatcher against a real PostgreSQL (§3, §4, §5, LIF-2, TRN-2).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    FaultyTransport, Sink, count, database, dispatcher, eventually, options, passes_send, run_once, writer,
};
use relayer_core::{Delivery, NewMessage};
use relayer_postgres::EnqueueError;
use relayer_test_support::within;
use tokio_util::sync::CancellationToken;

fn message(n: usize) -> NewMessage {
    NewMessage::new("test", "orders", format!("m{n}").into_bytes())
}

fn spawn_run(
    dispatcher: &relayer_dispatcher::Dispatcher<relayer_postgres::PgSource>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await.unwrap() }
    });
    (shutdown, task)
}

/// OUT-1, DSP-3: a rolled-back enqueue is never sent; a committed one is sent and its row deleted.
#[tokio::test]
async fn committed_messages_are_sent_and_deleted_rolled_back_ones_never() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 2).await;
    let mut client = db.connect().await;

    let tx = client.transaction().await.unwrap();
    writer(&dispatcher).enqueue(&tx, &[message(0)]).await.unwrap();
    tx.rollback().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let written =
        writer(&dispatcher).enqueue(&tx, &[message(1).header("k", "v").trace_context("tc")]).await.unwrap();
    tx.commit().await.unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.claimed, report.sent), (1, 1));
    let accepted = transport.accepted();
    assert_eq!(accepted.len(), 1);
    let (destination, envelope) = &accepted[0];
    assert_eq!(
        (destination.as_str(), envelope.id, envelope.body.as_slice()),
        ("orders", written[0].id, &b"m1"[..])
    );
    assert_eq!(envelope.headers.get("k").map(String::as_str), Some("v"));
    assert_eq!(envelope.trace_context.as_deref(), Some("tc"));
    assert_eq!(count(&client, &db, "outbox").await, 0);
    assert_eq!(run_once(&dispatcher).await.unwrap().claimed, 0, "the rolled-back message never appears");
}

/// OUT-4: the writing process sends its own rows at once after commit.
#[tokio::test]
async fn dispatch_now_sends_the_rows_just_committed() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let client = db.connect().await;
    let written =
        writer(&dispatcher).enqueue(&client, &(0..3).map(message).collect::<Vec<_>>()).await.unwrap();
    let report = dispatcher.dispatch_now(&written).await.unwrap();
    assert_eq!(report.sent, 3);
    assert_eq!(transport.accepted().len(), 3);
    assert_eq!(count(&client, &db, "outbox").await, 0);
}

/// DSP-3: per-message outcomes; accepted rows go, failed ones stay with attempts and last_error.
#[tokio::test]
async fn a_partially_failed_batch_deletes_accepted_rows_and_retries_the_failed_ones() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.failing_bodies.lock().unwrap().insert(b"m1".to_vec());
    let dispatcher = dispatcher(&db, options(), transport.clone(), 2).await;
    let client = db.connect().await;
    writer(&dispatcher).enqueue(&client, &(0..3).map(message).collect::<Vec<_>>()).await.unwrap();

    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.claimed, report.sent, report.failed), (3, 2, 1));
    let row = client
        .query_one(&format!("SELECT body, attempts, last_error FROM {}", db.namespace().table("outbox")), &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Vec<u8>>(0), b"m1");
    assert_eq!(row.get::<_, i32>(1), 1);
    assert_eq!(row.get::<_, String>(2), "transient send failure: injected message failure");

    transport.failing_bodies.lock().unwrap().clear();
    eventually("the failed row is retried and sent", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "outbox").await == 0
    })
    .await;
    assert_eq!(transport.accepted().len(), 3);
}

/// TRN-5, DSP-1: a send slower than its claim allows is cut off at the send deadline
/// (half the claim), so it can never outlive the claim: the row is released as a transient
/// failure before another dispatcher could take it over, and is then sent and deleted once.
#[tokio::test]
async fn a_send_slower_than_its_claim_is_cut_off_and_the_row_retried_never_fenced_out_trn_5() {
    let db = database().await;
    let mut slow = FaultyTransport::new("test");
    slow.delay = Duration::from_secs(3600);
    let slow = Arc::new(slow);
    let fast = Arc::new(FaultyTransport::new("test"));
    let short_claim = options().claim_duration(Duration::from_secs(1));
    let a = dispatcher(&db, short_claim, slow.clone(), 1).await;
    let b = dispatcher(&db, options(), fast.clone(), 1).await;
    let client = db.connect().await;
    writer(&a).enqueue(&client, &[message(0)]).await.unwrap();

    let report = within(run_once(&a)).await.unwrap();
    assert_eq!(
        (report.claimed, report.sent, report.failed, report.timed_out, report.fenced_out),
        (1, 0, 1, 1, 0),
        "the hung send was abandoned and its row released within the claim"
    );
    let attempts: i32 = client
        .query_one(&format!("SELECT attempts FROM {}", db.namespace().table("outbox")), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 1, "a timed-out send is a failed attempt");
    eventually("the row is retried and sent", || async {
        run_once(&b).await.unwrap();
        !fast.accepted().is_empty()
    })
    .await;
    assert_eq!(fast.accepted().len(), 1);
    assert_eq!(count(&client, &db, "outbox").await, 0, "deleted once");
}

/// DSP-4: a scheduled row is not sent before it is due, and is sent once due.
#[tokio::test]
async fn scheduled_rows_are_not_sent_before_due() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let client = db.connect().await;
    let later = message(0).delivery(Delivery::After(Duration::from_secs(3)));
    let written = writer(&dispatcher).enqueue(&client, &[later]).await.unwrap();
    assert_eq!(run_once(&dispatcher).await.unwrap().claimed, 0);
    assert_eq!(dispatcher.dispatch_now(&written).await.unwrap().claimed, 0);
    assert!(transport.accepted().is_empty(), "not yet");
    eventually("the scheduled row is sent once due", || async {
        run_once(&dispatcher).await.unwrap();
        !transport.accepted().is_empty()
    })
    .await;
}

/// DSP-5: with max_attempts a poison row moves to dead; without it the row stays pending.
#[tokio::test]
async fn poison_rows_reach_dead_after_max_attempts_and_stay_pending_without_it() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.failing.store(true, Ordering::SeqCst);
    let capped = options().max_attempts(NonZeroU32::new(3)).breaker_threshold(NonZeroU32::new(1000).unwrap());
    let dispatcher = dispatcher(&db, capped, transport.clone(), 1).await;
    let client = db.connect().await;
    writer(&dispatcher).enqueue(&client, &[message(0)]).await.unwrap();
    eventually("the poison row is dead", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "dead").await == 1
    })
    .await;
    let dead = client
        .query_one(&format!("SELECT attempts, last_error FROM {}", db.namespace().table("dead")), &[])
        .await
        .unwrap();
    assert_eq!(dead.get::<_, i32>(0), 3);
    assert!(dead.get::<_, String>(1).contains("injected message failure"));
    assert_eq!(count(&client, &db, "outbox").await, 0);

    let db = database().await;
    let uncapped = options().breaker_threshold(NonZeroU32::new(1000).unwrap());
    let dispatcher = common::dispatcher(&db, uncapped, transport.clone(), 1).await;
    let client = db.connect().await;
    writer(&dispatcher).enqueue(&client, &[message(1)]).await.unwrap();
    let attempts = || async {
        let row =
            client.query_one(&format!("SELECT attempts FROM {}", db.namespace().table("outbox")), &[]).await;
        row.unwrap().get::<_, i32>(0)
    };
    eventually("the row failed five times", || async {
        run_once(&dispatcher).await.unwrap();
        attempts().await >= 5
    })
    .await;
    assert_eq!(count(&client, &db, "dead").await, 0, "without max_attempts nothing is dead");
    assert_eq!(count(&client, &db, "outbox").await, 1, "the row stays pending");
}

/// TRN-2, RES-1: a panicking transport is a failed send; the worker lives and delivers later.
#[tokio::test]
async fn a_panicking_transport_counts_as_a_failed_send_and_the_worker_lives() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.panic_first_calls.store(2, Ordering::SeqCst);
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let client = db.connect().await;
    writer(&dispatcher).enqueue(&client, &[message(0)]).await.unwrap();
    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.failed, report.panics), (1, 1));
    let error: String = client
        .query_one(&format!("SELECT last_error FROM {}", db.namespace().table("outbox")), &[])
        .await
        .unwrap()
        .get(0);
    assert!(error.contains("panicked: injected transport panic"), "{error}");

    let (shutdown, task) = spawn_run(&dispatcher);
    eventually("the running worker delivers after another panic", || async {
        count(&client, &db, "outbox").await == 0
    })
    .await;
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(transport.accepted().len(), 1);
}

/// DSP-6: a failing destination is tripped and skipped; other destinations flow.
#[tokio::test]
async fn a_tripped_destination_is_skipped_while_others_flow() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.failing_bodies.lock().unwrap().insert(b"bad".to_vec());
    let breaker =
        options().breaker_threshold(NonZeroU32::new(2).unwrap()).breaker_cool_down(Duration::from_secs(3600));
    let dispatcher = dispatcher(&db, breaker, transport.clone(), 1).await;
    let client = db.connect().await;
    let bad = || NewMessage::new("test", "broken", b"bad".to_vec());
    writer(&dispatcher).enqueue(&client, &[bad(), bad(), bad()]).await.unwrap();
    // Each pass fails the whole "broken" batch once: two passes trip it.
    eventually("the broken destination trips", || async {
        run_once(&dispatcher).await.unwrap();
        transport.calls.load(Ordering::SeqCst) >= 2
    })
    .await;
    let calls_when_tripped = transport.calls.load(Ordering::SeqCst);
    writer(&dispatcher).enqueue(&client, &[message(0), message(1)]).await.unwrap();
    eventually("the healthy destination flows", || async {
        run_once(&dispatcher).await.unwrap();
        transport.accepted().len() == 2
    })
    .await;
    for _ in 0..5 {
        run_once(&dispatcher).await.unwrap();
    }
    assert_eq!(
        transport.calls.load(Ordering::SeqCst),
        calls_when_tripped + 1,
        "only the healthy batch was sent; the tripped destination was not tried again"
    );
    assert_eq!(count(&client, &db, "outbox").await, 3, "the broken destination's rows stay pending");
}

/// OUT-3: bad input gets a clear error and nothing is written.
#[tokio::test]
async fn bad_input_is_refused_and_nothing_is_written() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options().max_body_bytes(16), transport, 1).await;
    let client = db.connect().await;
    for (bad, expected) in [
        (NewMessage::new("nats", "orders", vec![]), "no transport is registered as \"nats\""),
        (NewMessage::new("test", " ", vec![]), "the destination is empty"),
        (NewMessage::new("test", "orders", vec![0; 17]), "the body is 17 bytes; the limit is 16"),
        (message(0).header("x:y", "1"), "invalid header name \"x:y\""),
    ] {
        let error = writer(&dispatcher).enqueue(&client, &[message(1), bad]).await.unwrap_err();
        assert!(matches!(error, EnqueueError::Invalid(_)));
        assert!(error.to_string().contains(expected), "{error}");
        assert!(error.to_string().contains("message 1 of the batch"), "{error}");
        assert_eq!(count(&client, &db, "outbox").await, 0);
    }
}

/// OUT-4: the writer's NOTIFY wakes a dispatcher in another "process" (own pool and LISTEN
/// connection) whose poll interval is an hour.
#[tokio::test]
async fn a_writers_notify_wakes_a_dispatcher_elsewhere_without_polling() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher =
        dispatcher(&db, options().poll_interval(Duration::from_secs(3600)), transport.clone(), 1).await;
    let mut events = dispatcher.subscribe();
    let (shutdown, task) = spawn_run(&dispatcher);
    let mut writer_client = db.connect().await;
    let writer = relayer_postgres::OutboxWriter::new(db.namespace(), ["test"]);
    for round in 0..3 {
        let tx = writer_client.transaction().await.unwrap();
        writer.enqueue(&tx, &[message(round)]).await.unwrap();
        tx.commit().await.unwrap();
        passes_send(&mut events, 1).await; // the notified dispatcher delivers
        assert_eq!(transport.accepted().len(), round + 1);
    }
    shutdown.cancel();
    task.await.unwrap();
}

/// OUT-4 in the writing process: a writer that sends no NOTIFY wakes its own dispatcher
/// with `committed()` after the commit — no poll (an hour here), no database round trip.
#[tokio::test]
async fn a_silent_writer_wakes_its_own_dispatcher_with_committed() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher =
        dispatcher(&db, options().poll_interval(Duration::from_secs(3600)), transport.clone(), 2).await;
    let mut events = dispatcher.subscribe();
    let (shutdown, task) = spawn_run(&dispatcher);
    let mut writer_client = db.connect().await;
    let writer = writer(&dispatcher).without_notify();
    for round in 0..3 {
        let tx = writer_client.transaction().await.unwrap();
        writer.enqueue(&tx, &[message(round)]).await.unwrap();
        tx.commit().await.unwrap();
        dispatcher.committed();
        passes_send(&mut events, 1).await; // the woken dispatcher delivers
        assert_eq!(transport.accepted().len(), round + 1);
    }
    shutdown.cancel();
    task.await.unwrap();
}

/// LIF-2: a pool of one connection serves passes, commit-triggered dispatch and lanes.
#[tokio::test]
async fn a_pool_of_one_connection_works() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 1).await;
    let (shutdown, task) = spawn_run(&dispatcher);
    let client = db.connect().await;
    for n in 0..10 {
        let batch = vec![message(2 * n), message(2 * n + 1).lane("l")];
        let written = writer(&dispatcher).enqueue(&client, &batch).await.unwrap();
        dispatcher.dispatch_now(&written).await.unwrap();
    }
    eventually("all 20 are delivered", || async { count(&client, &db, "outbox").await == 0 }).await;
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(transport.accepted().len(), 20);
}

/// LAN-2, LAN-5: a poison head parks its lane; nothing behind it moves until released.
#[tokio::test]
async fn a_poison_lane_head_parks_the_lane_until_released() {
    let db = database().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    transport.failing_bodies.lock().unwrap().insert(b"m0".to_vec());
    let capped = options().max_attempts(NonZeroU32::new(2));
    let dispatcher = dispatcher(&db, capped, transport.clone(), 1).await;
    let client = db.connect().await;
    let batch: Vec<NewMessage> = (0..4).map(|n| message(n).lane("order-1")).collect();
    writer(&dispatcher).enqueue(&client, &batch).await.unwrap();
    eventually("the lane is parked", || async {
        run_once(&dispatcher).await.unwrap();
        client
            .query_one(
                &format!(
                    "SELECT count(*) FROM {} WHERE parked_at IS NOT NULL",
                    db.namespace().table("lanes")
                ),
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
    })
    .await;
    for _ in 0..3 {
        run_once(&dispatcher).await.unwrap();
    }
    assert!(transport.accepted().is_empty(), "nothing behind a parked head is sent");
    assert_eq!(count(&client, &db, "outbox").await, 4);

    transport.failing_bodies.lock().unwrap().clear();
    assert!(dispatcher.release_lane("order-1", "test-operator").await.unwrap());
    eventually("the released lane drains", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "outbox").await == 0
    })
    .await;
    let bodies: Vec<Vec<u8>> = transport.accepted().into_iter().map(|(_, e)| e.body).collect();
    assert_eq!(bodies, (0..4).map(|n| format!("m{n}").into_bytes()).collect::<Vec<_>>(), "in order");
}

/// DSP-1, LAN-1, LAN-3: two dispatchers (separate pools) on one namespace deliver every
/// message, leave none stuck, and keep every lane strictly ordered under injected failures.
#[tokio::test]
async fn two_dispatchers_deliver_everything_and_keep_lanes_ordered_under_failures() {
    let db = database().await;
    let sink = Sink::default();
    let mut flaky_a = FaultyTransport::with_sink("test", sink.clone()).with_batch_limit(7);
    flaky_a.fail_every_nth_call = 3;
    let mut flaky_b = FaultyTransport::with_sink("test", sink.clone());
    flaky_b.fail_every_nth_call = 4;
    let breaker = || options().breaker_threshold(NonZeroU32::new(1000).unwrap());
    let a = dispatcher(&db, breaker(), Arc::new(flaky_a), 2).await;
    let b = dispatcher(&db, breaker(), Arc::new(flaky_b), 2).await;
    let (stop_a, task_a) = spawn_run(&a);
    let (stop_b, task_b) = spawn_run(&b);

    let mut client = db.connect().await;
    let mut expected = Vec::new();
    for round in 0..20 {
        let mut batch: Vec<NewMessage> = (0..10).map(|n| message(round * 10 + n)).collect();
        for lane in 0..4 {
            batch.push(
                NewMessage::new("test", "lanes", format!("{lane}:{round}").into_bytes())
                    .lane(format!("lane-{lane}")),
            );
        }
        expected.extend(batch.iter().map(NewMessage::message_id));
        let tx = client.transaction().await.unwrap();
        writer(&a).enqueue(&tx, &batch).await.unwrap();
        tx.commit().await.unwrap();
    }
    eventually("every message is delivered and the outbox is empty", || async {
        count(&client, &db, "outbox").await == 0
    })
    .await;
    stop_a.cancel();
    stop_b.cancel();
    task_a.await.unwrap();
    task_b.await.unwrap();

    let delivered = sink.lock().unwrap().clone();
    for id in &expected {
        assert!(delivered.iter().any(|(_, e)| e.id == *id), "message {id} never delivered");
    }
    let mut lanes: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (_, envelope) in delivered.iter().filter(|(d, _)| d == "lanes") {
        let text = String::from_utf8(envelope.body.clone()).unwrap();
        let (lane, round) = text.split_once(':').unwrap();
        lanes.entry(lane.to_owned()).or_default().push(round.parse().unwrap());
    }
    assert_eq!(lanes.len(), 4);
    for (lane, rounds) in lanes {
        assert_eq!(rounds, (0..20).collect::<Vec<_>>(), "lane {lane} delivered out of order or twice");
    }
    assert_eq!(count(&client, &db, "dead").await, 0);
}

/// RES-4: a dispatcher started before its namespace has a schema does not end: it waits
/// with backoff, and once the schema is applied it sends what is written.
#[tokio::test]
async fn a_dispatcher_started_before_its_schema_waits_for_it_and_then_sends_res_4() {
    let db = relayer_test_support::TestDb::new().await;
    let transport = Arc::new(FaultyTransport::new("test"));
    let dispatcher = dispatcher(&db, options(), transport.clone(), 2).await;
    let shutdown = CancellationToken::new();
    let running = dispatcher.clone();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move { running.run(stop).await });
    // Long enough for several schema checks to fail (the backoff starts at 50 ms).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!task.is_finished(), "a schema not applied yet must not end the dispatcher");

    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let tx = client.transaction().await.unwrap();
    writer(&dispatcher).enqueue(&tx, &[message(1)]).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the message written after the migration is sent", || async {
        transport.accepted().len() == 1
    })
    .await;
    shutdown.cancel();
    within(task).await.unwrap().unwrap();
}
