//! The pump against a real PostgreSQL: one test per rule of SPEC §10 (QUE-1, QUE-2, QUE-5),
//! plus undecodable rows (§15) and a lost connection (RES-1).
//!
//! Messages enter through relayer's direct writer; rows are written by hand only for what no
//! writer produces (malformed headers, a negative handled count).
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Scripted, count, enqueue, fast, pool, rows, setup, start};
use relayer_consumer::{Outcome, Subscription};
use relayer_test_support::eventually;
use tokio::sync::Notify;

/// QUE-1: every message is received once by one of two pumps on one queue (SKIP LOCKED),
/// handled and acked (deleted).
#[tokio::test]
async fn two_pumps_receive_each_message_once_and_ack_deletes_it_que_1() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 200).await;
    let handler = Scripted::acking();
    let subscription =
        Subscription::new("orders", fast().concurrency(8).batch_size(16).build().unwrap()).unwrap();
    let a = start(&db, pool(&db, "a", 3).await.0, subscription.clone(), Arc::clone(&handler)).await;
    let b = start(&db, pool(&db, "b", 3).await.0, subscription, Arc::clone(&handler)).await;
    eventually("every message is acked", || async { count(&db, "orders").await == 0 }).await;
    a.stop().await;
    b.stop().await;
    for id in ids {
        assert_eq!(handler.calls(id), 1, "message {id} handled once");
    }
}

/// QUE-1: a committed write wakes a pump through LISTEN/NOTIFY; its polling is an hour.
#[tokio::test]
async fn a_notification_wakes_the_pump_without_waiting_for_its_poll_que_1() {
    let db = setup().await;
    let handler = Scripted::acking();
    let options = fast().poll_interval(Duration::from_secs(3_600)).build().unwrap();
    let running = start(
        &db,
        pool(&db, "p", 3).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;
    // The first pass runs at start, finds nothing, and the loop then waits an hour or a wake-up.
    eventually("the first pass ran", || async { running.stats.snapshot().received == 0 }).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // let it reach its wait; not a timing assertion
    let ids = enqueue(&db, "orders", 3).await;
    eventually("the notified pump handled the messages", || async {
        ids.iter().all(|id| handler.calls(*id) == 1)
    })
    .await;
    running.stop().await;
}

/// QUE-2: a failing handler's message is requeued with handled_count + 1, then, at the
/// limit, dead-lettered with its stamps; an explicit reject dead-letters at once.
#[tokio::test]
async fn failures_requeue_with_a_handled_count_and_dead_letter_at_the_limit_with_stamps_que_2() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 2).await;
    let (failing, rejected) = (ids[0], ids[1]);
    let handler = Scripted::new(move |message, _| async move {
        if message.id == failing {
            Outcome::failed("the ledger is closed")
        } else {
            Outcome::reject("not an order")
        }
    });
    let options = fast().max_handled_count(3).build().unwrap();
    let subscription = Subscription::new("orders", options).unwrap().with_dead_letter_queue("dead").unwrap();
    let running = start(&db, pool(&db, "p", 3).await.0, subscription, Arc::clone(&handler)).await;
    eventually("both messages are dead-lettered", || async { count(&db, "dead").await == 2 }).await;
    running.stop().await;
    assert_eq!(count(&db, "orders").await, 0);
    assert_eq!(handler.calls(failing), 3, "handled until the limit");
    assert_eq!(handler.calls(rejected), 1, "a reject is final");
    let table = db.namespace().table("queue");
    for row in rows(&db, "dead").await {
        assert_eq!(row.original_topic.as_deref(), Some("orders"));
        assert!(row.dead_lettered);
        let message = row.rejection_message.unwrap();
        assert!(message.contains(&format!("row seq {} of {table}", row.seq)), "{message}");
        match row.rejection_reason.as_deref() {
            Some("max_handled_count") => {
                assert_eq!(row.handled_count, 3);
                assert!(message.contains("the ledger is closed"), "{message}");
            }
            Some("rejected") => {
                assert_eq!(row.handled_count, 1);
                assert!(message.contains("not an order"), "{message}");
            }
            other => panic!("unexpected reason {other:?}"),
        }
    }
}

/// QUE-2, §15: rows that cannot be decoded are moved to the invalid-message queue (or the
/// dead-letter queue as `unacceptable`) with a reason naming the table, the row and the
/// column; an empty body the handler refuses is dead-lettered naming its row; the pump
/// lives and handles the good message behind them.
#[tokio::test]
async fn undecodable_rows_are_set_aside_naming_row_and_column_and_the_pump_lives_que_2() {
    let db = setup().await;
    let client = db.connect().await;
    let table = db.namespace().table("queue");
    for (queue, headers, handled) in [
        ("orders", "null", 0),
        ("orders", "[1, 2]", 0),
        ("orders", r#"{"a": 1}"#, 0),
        ("orders", "{}", -4),
        ("invoices", r#""text""#, 0),
    ] {
        client
            .execute(
                &format!(
                    "INSERT INTO {table} (message_id, queue, body, headers, handled_count) \
                     VALUES (gen_random_uuid(), $1, '\\x7b7d', $2::text::jsonb, $3)"
                ),
                &[&queue, &headers, &handled],
            )
            .await
            .unwrap();
    }
    client
        .execute(
            &format!(
                "INSERT INTO {table} (message_id, queue, body) VALUES (gen_random_uuid(), 'orders', '\\x')"
            ),
            &[],
        )
        .await
        .unwrap();
    let good = enqueue(&db, "orders", 1).await[0];
    let handler = Scripted::new(|message, _| async move {
        if message.body.is_empty() { Outcome::reject("an order needs a body") } else { Outcome::Ack }
    });
    let orders = Subscription::new("orders", fast().build().unwrap())
        .unwrap()
        .with_invalid_message_queue("invalid")
        .unwrap();
    let invoices = Subscription::new("invoices", fast().build().unwrap()).unwrap();
    let a = start(&db, pool(&db, "a", 3).await.0, orders, Arc::clone(&handler)).await;
    let b = start(&db, pool(&db, "b", 3).await.0, invoices, Arc::clone(&handler)).await;
    eventually("the good message is handled and the rest set aside", || async {
        count(&db, "orders").await == 0 && count(&db, "invoices").await == 0
    })
    .await;
    a.stop().await;
    b.stop().await;
    assert_eq!(handler.calls(good), 1);
    let invalid = rows(&db, "invalid").await;
    assert_eq!(invalid.len(), 4);
    // The whole reason, pinned: the codec's own words, never the driver's generic
    // "error deserializing column 4".
    let expected = [
        "column headers: expected a JSON object of strings, found null",
        "column headers: expected a JSON object of strings, found an array",
        "column headers: expected a JSON object of strings, but header \"a\" is a number",
        "column handled_count: -4 is negative",
    ];
    for (row, reason) in invalid.iter().zip(expected) {
        assert_eq!(
            row.rejection_message.as_deref(),
            Some(format!("row seq {} of {table}, {reason}", row.seq).as_str())
        );
        assert_eq!(row.rejection_reason.as_deref(), Some("unacceptable"));
        assert_eq!(row.original_topic.as_deref(), Some("orders"));
    }
    let unacceptable = rows(&db, "invoices.dead_letters").await;
    assert_eq!(unacceptable.len(), 1);
    assert_eq!(unacceptable[0].rejection_reason.as_deref(), Some("unacceptable"));
    assert_eq!(
        unacceptable[0].rejection_message.as_deref(),
        Some(
            format!(
                "row seq {} of {table}, column headers: expected a JSON object of strings, found a string",
                unacceptable[0].seq
            )
            .as_str()
        )
    );
    let empty = rows(&db, "orders.dead_letters").await;
    assert_eq!(empty.len(), 1, "the empty body is rejected by the handler");
    let message = empty[0].rejection_message.as_deref().unwrap();
    assert!(
        message.contains(&format!("row seq {} of {table}", empty[0].seq)) && message.contains("needs a body")
    );
}

/// QUE-5: a handler that panics, and one that overruns its deadline, are requeued like
/// failures; the pump lives and handles them again.
#[tokio::test]
async fn a_panicking_or_overrunning_handler_is_requeued_and_the_pump_lives_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 2).await;
    let (panics, overruns) = (ids[0], ids[1]);
    let handler = Scripted::new(move |message, call| async move {
        if call == 1 && message.id == panics {
            panic!("handler bug");
        }
        if call == 1 && message.id == overruns {
            std::future::pending::<()>().await;
        }
        Outcome::Ack
    });
    let options = fast().handler_deadline(Duration::from_millis(300)).build().unwrap();
    let running = start(
        &db,
        pool(&db, "p", 3).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;
    eventually("both are handled on their second call", || async { count(&db, "orders").await == 0 }).await;
    let stats = running.stats.snapshot();
    running.stop().await;
    assert_eq!((handler.calls(panics), handler.calls(overruns)), (2, 2));
    assert_eq!((stats.panicked, stats.overran, stats.requeued, stats.acked), (1, 1, 2, 2));
}

/// QUE-5: a handler three times slower than the visibility timeout runs once — the
/// heartbeat keeps its message invisible to a second pump — and is acked, never
/// dead-lettered, even with a handled-count limit of 1.
#[tokio::test]
async fn a_handler_three_times_slower_than_the_visibility_timeout_runs_once_que_5() {
    let db = setup().await;
    let id = enqueue(&db, "orders", 1).await[0];
    let handler = Scripted::new(|_, _| async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        Outcome::Ack
    });
    let options = fast()
        .visibility_timeout(Duration::from_secs(1))
        .max_handled_count(1)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let subscription = Subscription::new("orders", options).unwrap();
    let a = start(&db, pool(&db, "a", 3).await.0, subscription.clone(), Arc::clone(&handler)).await;
    let b = start(&db, pool(&db, "b", 3).await.0, subscription, Arc::clone(&handler)).await;
    eventually("the message is acked", || async { count(&db, "orders").await == 0 }).await;
    a.stop().await;
    b.stop().await;
    assert_eq!(handler.calls(id), 1, "never redelivered while running");
    assert_eq!(count(&db, "orders.dead_letters").await, 0, "never dead-lettered");
}

/// QUE-5: at most `concurrency` handlers run at once.
#[tokio::test]
async fn at_most_concurrency_handlers_run_at_once_que_5() {
    let db = setup().await;
    enqueue(&db, "orders", 30).await;
    let handler = Scripted::new(|_, _| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Outcome::Ack
    });
    let options = fast().concurrency(3).build().unwrap();
    let running = start(
        &db,
        pool(&db, "p", 3).await.0,
        Subscription::new("orders", options).unwrap(),
        Arc::clone(&handler),
    )
    .await;
    eventually("all acked", || async { count(&db, "orders").await == 0 }).await;
    running.stop().await;
    assert_eq!(handler.distinct(), 30);
    assert!(handler.max_running.load(Ordering::SeqCst) <= 3);
}

/// QUE-5: shutdown lets a handler in flight finish within the grace and acks it, then
/// abandons one that does not finish; that message reappears after the visibility timeout
/// and another pump handles it.
#[tokio::test]
async fn shutdown_finishes_handlers_within_the_grace_and_leaves_the_rest_to_reappear_que_5() {
    let db = setup().await;
    let ids = enqueue(&db, "orders", 2).await;
    let (finishes, hangs) = (ids[0], ids[1]);
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicBool::new(false));
    let handler = {
        let (release, started) = (Arc::clone(&release), Arc::clone(&started));
        Scripted::new(move |message, _| {
            let (release, started) = (Arc::clone(&release), Arc::clone(&started));
            async move {
                if message.id == finishes {
                    started.store(true, Ordering::SeqCst);
                    release.notified().await;
                } else {
                    std::future::pending::<()>().await;
                }
                Outcome::Ack
            }
        })
    };
    let options = fast()
        .visibility_timeout(Duration::from_secs(1))
        .shutdown_grace(Duration::from_millis(500))
        .handler_deadline(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let subscription = Subscription::new("orders", options).unwrap();
    let first = start(&db, pool(&db, "a", 3).await.0, subscription.clone(), Arc::clone(&handler)).await;
    eventually("both handlers run", || async { handler.calls(finishes) == 1 && handler.calls(hangs) == 1 })
        .await;
    assert!(started.load(Ordering::SeqCst));
    let stats = Arc::clone(&first.stats);
    let stopping = tokio::spawn(first.stop());
    release.notify_one();
    relayer_test_support::within(stopping).await.unwrap();
    let snapshot = stats.snapshot();
    assert_eq!((snapshot.acked, snapshot.abandoned), (1, 1));
    let left = rows(&db, "orders").await;
    assert_eq!(left.len(), 1, "the abandoned message is still there");
    let acker = Scripted::acking();
    let second = start(&db, pool(&db, "b", 3).await.0, subscription, Arc::clone(&acker)).await;
    eventually("the abandoned message reappears and is handled", || async { acker.calls(hangs) == 1 }).await;
    second.stop().await;
    assert_eq!(acker.calls(finishes), 0, "the finished one was acked at shutdown");
    assert_eq!(count(&db, "orders").await, 0);
}

/// RES-1, QUE-5: killing the pump's connections fails its passes; it backs off, reconnects
/// and goes on handling.
#[tokio::test]
async fn a_killed_connection_is_backed_off_and_the_pump_resumes_res_1() {
    let db = setup().await;
    let handler = Scripted::acking();
    let (pool, application_name) = pool(&db, "victim", 3).await;
    let running =
        start(&db, pool, Subscription::new("orders", fast().build().unwrap()).unwrap(), Arc::clone(&handler))
            .await;
    let first = enqueue(&db, "orders", 5).await;
    eventually("the first messages are handled", || async { first.iter().all(|id| handler.calls(*id) == 1) })
        .await;
    assert!(db.terminate_backends(&application_name).await > 0);
    let second = enqueue(&db, "orders", 5).await;
    eventually("the pump resumes after the killed connection", || async {
        second.iter().all(|id| handler.calls(*id) >= 1)
    })
    .await;
    eventually("all acked", || async { count(&db, "orders").await == 0 }).await;
    running.stop().await;
}

/// RES-4: a consumer started before its namespace has a schema does not end: it waits with
/// backoff, and once the schema is applied it consumes what is written.
#[tokio::test]
async fn a_consumer_started_before_its_schema_waits_for_it_and_then_consumes_res_4() {
    let db = relayer_test_support::TestDb::new().await;
    let handler = Scripted::acking();
    let subscription = Subscription::new("orders", fast().build().unwrap()).unwrap();
    let running = start(&db, pool(&db, "early", 3).await.0, subscription, Arc::clone(&handler)).await;
    // Long enough for several schema checks to fail (the backoff starts at 100 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let ids = enqueue(&db, "orders", 5).await;
    eventually("every message written after the migration is acked", || async {
        count(&db, "orders").await == 0
    })
    .await;
    // `stop` fails the test if the consumer had ended with an error.
    running.stop().await;
    for id in ids {
        assert_eq!(handler.calls(id), 1, "message {id} handled once");
    }
}
