//! The dead-letter policy worker against a real PostgreSQL (DLP-1..DLP-6, LDR-5).
//!
//! Messages enter through relayer's queue transport, the writer and the dispatcher; the
//! dead-lettering step stands in for the consumer in one helper (`common::dead_letter`),
//! and old timestamps are written by hand.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    DAY, HOUR, count, db_now, dead_letter, dead_lettered_ago, failing_dispatcher, in_queue, send, setup,
    source, worker,
};
use relayer_core::dead_letter::UNACCEPTABLE;
use relayer_core::{
    DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, NewMessage, StoreSource,
};
use relayer_dead_letters::{DeadLetterReport, DeadLetterWorker, lock_resource};
use relayer_postgres::{OutboxWriter, PgSource};
use relayer_test_support::within;
use relayer_worker::{Leadership, PassOutcome, WorkerEvent};
use tokio_util::sync::CancellationToken;

fn redrive(after: Duration, give_up_after: Duration) -> DeadLetterPolicy {
    DeadLetterPolicy::redrive(after, give_up_after).unwrap()
}

/// DLP-1: a type with a policy has its dead letters moved; a type without one keeps them,
/// even in the same dead-letter queue. The default interval is 15 minutes.
#[tokio::test]
async fn only_types_with_a_policy_are_moved_and_others_keep_their_dead_letters_dlp_1() {
    assert_eq!(DeadLetterOptions::default().interval(), Duration::from_secs(15 * 60));
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    send(&db, "orders", 3, now).await;
    send(&db, "invoices", 2, now).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 3).await;
    dead_letter(&client, &db, "invoices", "dead", "handler", 2).await;

    let worker =
        worker(&db, vec![DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY))], 10).await;
    let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
    assert_eq!((report.redriven, report.expired, report.stuck), (3, 0, 0));
    assert_eq!(in_queue(&client, &db, "orders").await, 3);
    assert_eq!(in_queue(&client, &db, "dead").await, 2, "invoices has no policy: its dead letters stay");
}

/// DLP-2: `after` counts from dead-lettering and `give_up_after` from creation, on the
/// database clock; a redrive due too late gives up; expiry deletes once `after` passed.
#[tokio::test]
async fn windows_count_after_from_dead_lettering_and_give_up_after_from_creation_dlp_2() {
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    // Created now (young), two days ago (past give_up_after = 1d), for each of three ages
    // since dead-lettering.
    for (topic, created) in [("young", now), ("old", now.saturating_sub(2 * DAY))] {
        for (dlq, ago) in [("dead.fresh", Duration::ZERO), ("dead.due", 2 * HOUR)] {
            send(&db, topic, 2, created).await;
            dead_letter(&client, &db, topic, dlq, "handler", 2).await;
            dead_lettered_ago(&client, &db, dlq, topic, ago).await;
        }
    }
    let policy = redrive(HOUR, DAY);
    let worker = worker(
        &db,
        vec![
            DeadLetterRule::queue("young", "dead.fresh", policy),
            DeadLetterRule::queue("young", "dead.due", policy),
            DeadLetterRule::queue("old", "dead.fresh", policy),
            DeadLetterRule::queue("old", "dead.due", policy),
        ],
        10,
    )
    .await;
    let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
    let per_type: Vec<(u64, u64)> = report.types.iter().map(|t| (t.redriven, t.stuck)).collect();
    assert_eq!(per_type, [(0, 0), (2, 0), (0, 0), (0, 2)], "wait, redrive, wait, gave up");
    assert_eq!(in_queue(&client, &db, "young").await, 2);
    assert_eq!(in_queue(&client, &db, "dead.due").await, 2, "the old ones stay in place (DLP-5)");

    // Expiry: `after` since dead-lettering, whatever the age since creation.
    let expire =
        worker_with(&db, DeadLetterRule::queue("old", "dead.due", DeadLetterPolicy::expire(3 * HOUR))).await;
    assert_eq!(
        expire.run_once(&mut expire.source().open().await.unwrap()).await.unwrap().expired,
        0,
        "dead-lettered 2h ago: kept"
    );
    dead_lettered_ago(&client, &db, "dead.due", "old", 3 * HOUR).await;
    assert_eq!(expire.run_once(&mut expire.source().open().await.unwrap()).await.unwrap().expired, 2);
    assert_eq!(in_queue(&client, &db, "dead.due").await, 0);

    let refused = DeadLetterPolicy::redrive(DAY, DAY).unwrap_err();
    assert_eq!(refused.to_string(), "give_up_after: 1d must be greater than after (1d)");
}

async fn worker_with(db: &relayer_test_support::TestDb, rule: DeadLetterRule) -> DeadLetterWorker<PgSource> {
    worker(db, vec![rule], 10).await
}

/// DLP-3: a redrive restores the original topic, resets the handled count, strips the
/// rejection stamps and makes the message visible now, keeping id, body and headers.
#[tokio::test]
async fn a_redrive_restores_the_topic_resets_the_count_and_strips_the_stamps_dlp_3() {
    let (db, client) = setup().await;
    let ids = send(&db, "orders", 2, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "orders.dead", "handler", 2).await;
    let worker =
        worker_with(&db, DeadLetterRule::queue("orders", "orders.dead", redrive(Duration::ZERO, DAY))).await;
    assert_eq!(worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap().redriven, 2);
    let rows = client
        .query(
            &format!(
                "SELECT message_id, queue, handled_count, original_topic, rejection_reason, rejection_message, \
                        dead_lettered_at, visible_at <= now(), body, headers->>'kind' FROM {} ORDER BY seq",
                db.namespace().table("queue")
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for (row, id) in rows.iter().zip(&ids) {
        assert_eq!(row.get::<_, relayer_core::Uuid>(0), *id.as_uuid());
        assert_eq!(row.get::<_, String>(1), "orders");
        assert_eq!(row.get::<_, i32>(2), 0);
        assert!(row.get::<_, Option<String>>(3).is_none() && row.get::<_, Option<String>>(4).is_none());
        assert!(row.get::<_, Option<String>>(5).is_none());
        assert!(row.get::<_, Option<std::time::SystemTime>>(6).is_none());
        assert!(row.get::<_, bool>(7), "visible now");
        assert!(row.get::<_, Vec<u8>>(8).starts_with(b"orders #"));
        assert_eq!(row.get::<_, String>(9), "orders");
    }
}

/// DLP-3: four replicas, with no leader among them, redrive the same 10,000 dead letters at
/// once; the moves they report add up to exactly 10,000 and every message is back once.
#[tokio::test]
async fn four_replicas_redrive_10000_dead_letters_each_exactly_once_dlp_3() {
    let (db, client) = setup().await;
    send(&db, "orders", 10_000, db_now(&client).await).await;
    assert_eq!(dead_letter(&client, &db, "orders", "dead", "handler", 10_000).await, 10_000);
    let rule = DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY));
    let mut replicas = Vec::new();
    for _ in 0..4 {
        let worker = worker(&db, vec![rule.clone()], 250).await;
        replicas.push(tokio::spawn(async move {
            let mut moved = 0;
            // Each replica keeps passing until it finds nothing left (others may drain it).
            loop {
                let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
                moved += report.redriven;
                if report.redriven == 0 {
                    return moved;
                }
            }
        }));
    }
    let mut moves = Vec::new();
    for replica in replicas {
        moves.push(within(replica).await.unwrap());
    }
    assert_eq!(moves.iter().sum::<u64>(), 10_000, "moves per replica: {moves:?}");
    assert_eq!(in_queue(&client, &db, "dead").await, 0);
    let back: (i64, i64) = {
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*), count(DISTINCT message_id) FROM {} \
                     WHERE queue = 'orders' AND handled_count = 0 AND original_topic IS NULL",
                    db.namespace().table("queue")
                ),
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(back, (10_000, 10_000));
}

/// DLP-4: two types share one dead-letter queue; each statement matches the queue and the
/// original topic, so a policy moves its own type's dead letters only.
#[tokio::test]
async fn types_sharing_a_dead_letter_queue_are_moved_by_their_own_policy_only_dlp_4() {
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    send(&db, "orders", 4, now).await;
    send(&db, "invoices", 3, now).await;
    dead_letter(&client, &db, "orders", "shared.dead", "handler", 4).await;
    dead_letter(&client, &db, "invoices", "shared.dead", "handler", 3).await;
    let worker = worker(
        &db,
        vec![
            DeadLetterRule::queue("orders", "shared.dead", redrive(Duration::ZERO, DAY)),
            DeadLetterRule::queue("invoices", "shared.dead", DeadLetterPolicy::expire(Duration::ZERO)),
        ],
        2,
    )
    .await;
    let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
    assert_eq!((report.redriven, report.expired), (4, 3));
    assert_eq!(report.batches, 3 + 2, "orders: 2, 2, 0; invoices: 2, 1");
    assert_eq!(in_queue(&client, &db, "orders").await, 4);
    assert_eq!(
        (in_queue(&client, &db, "invoices").await, in_queue(&client, &db, "shared.dead").await),
        (0, 0)
    );
}

/// DLP-4: a dead letter without an original topic is never touched, nor is the
/// invalid-message queue, nor an undecodable (`unacceptable`) dead letter by a redrive.
#[tokio::test]
async fn rows_without_original_topic_and_the_invalid_message_queue_are_never_touched_dlp_4() {
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    // Sent straight into the dead-letter queue by some other producer: no original topic.
    send(&db, "dead", 2, now).await;
    // Undecodable messages of "orders": one in the invalid-message queue, one in the DLQ.
    send(&db, "orders", 3, now).await;
    dead_letter(&client, &db, "orders", "orders.invalid", UNACCEPTABLE, 1).await;
    dead_letter(&client, &db, "orders", "dead", UNACCEPTABLE, 1).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 1).await;
    dead_lettered_ago(&client, &db, "dead", "orders", 30 * DAY).await;
    dead_lettered_ago(&client, &db, "orders.invalid", "orders", 30 * DAY).await;
    let worker =
        worker_with(&db, DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, 365 * DAY))).await;
    for _ in 0..2 {
        let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
        assert_eq!((report.redriven, report.stuck), (1, 0), "only the decodable dead letter moves");
        dead_letter(&client, &db, "orders", "dead", "handler", 1).await;
    }
    assert_eq!(in_queue(&client, &db, "dead").await, 2 + 1 + 1, "foreign, unacceptable, last dead-lettered");
    assert_eq!(in_queue(&client, &db, "orders.invalid").await, 1);

    // Expiry of the type deletes its undecodable dead letter too, but never the foreign rows
    // nor the invalid-message queue.
    let expire =
        worker_with(&db, DeadLetterRule::queue("orders", "dead", DeadLetterPolicy::expire(Duration::ZERO)))
            .await;
    assert_eq!(expire.run_once(&mut expire.source().open().await.unwrap()).await.unwrap().expired, 2);
    assert_eq!(in_queue(&client, &db, "dead").await, 2);
    assert_eq!(in_queue(&client, &db, "orders.invalid").await, 1);
}

/// A writer collecting formatted log lines, for a subscriber set on the test's thread.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn errors(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().filter(|line| line.contains("ERROR")).map(str::to_owned).collect()
    }
}

/// DLP-5: dead letters past their redrive window stay, and every pass counts them again,
/// logs the count at ERROR and reports it per type (the facade exports it as a gauge:
/// `relayer/tests/metrics.rs`).
#[tokio::test]
async fn stuck_dead_letters_are_left_and_counted_by_every_pass_dlp_5() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::ERROR)
        .with_writer(move || writer.clone())
        .finish();
    // The test runs on one thread: the subscriber sees the worker's passes.
    let _logging = tracing::subscriber::set_default(subscriber);
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    send(&db, "orders", 3, now.saturating_sub(10 * DAY)).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 3).await;
    let worker =
        worker_with(&db, DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY))).await;
    for _ in 0..3 {
        let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
        assert_eq!((report.redriven, report.stuck), (0, 3));
        assert_eq!(report.types[0].stuck, 3);
    }
    assert_eq!(in_queue(&client, &db, "dead").await, 3);
    let errors = logs.errors();
    assert_eq!(errors.len(), 3, "one ERROR per pass: {errors:?}");
    for line in &errors {
        assert!(line.contains("relayer::dead_letter") && line.contains("stuck=3"), "{line}");
        assert!(line.contains("past their redrive window"), "{line}");
    }
}

/// DLP-6 (the pure start-time check the facade calls): a policy needs exactly one
/// subscription of its topic dead-lettering into its queue.
#[test]
fn a_policy_needs_exactly_one_subscription_with_its_dead_letter_queue_dlp_6() {
    use relayer_core::SubscriptionQueues;
    let policies =
        DeadLetterPolicies::new([DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY))])
            .unwrap();
    assert!(policies.check_subscriptions(&[SubscriptionQueues::new("orders", Some("dead"))]).is_ok());
    let missing = policies.check_subscriptions(&[SubscriptionQueues::new("orders", None)]).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "dead-letter policy for queue \"orders\" (dead letters in \"dead\"): no subscription of queue \"orders\" \
         has a dead-letter queue; a type with a policy needs exactly one"
    );
    let twice =
        [SubscriptionQueues::new("orders", Some("dead")), SubscriptionQueues::new("orders", Some("dead"))];
    assert!(policies.check_subscriptions(&twice).is_err());
}

/// DLP-1 for the outbox's dead table: poison rows of a (transport, destination) type are
/// redriven back into the outbox, and the dispatcher then delivers them, identity intact.
#[tokio::test]
async fn outbox_dead_rows_are_redriven_by_policy_and_the_dispatcher_delivers_them_dlp_1() {
    let (db, client) = setup().await;
    let (dispatcher, transport) = failing_dispatcher(&db).await;
    let writer = OutboxWriter::new(db.namespace(), ["switch"]);
    let messages: Vec<NewMessage> = (0..5u8)
        .map(|n| {
            NewMessage::new("switch", if n < 3 { "orders" } else { "invoices" }, vec![n])
                .header("n", n.to_string())
        })
        .collect();
    writer.enqueue(&*client, &messages).await.unwrap();
    assert_eq!(dispatcher.run_once().await.unwrap().dead, 5);
    transport.heal();

    let worker =
        worker(&db, vec![DeadLetterRule::outbox("switch", "orders", redrive(Duration::ZERO, DAY))], 10).await;
    let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
    assert_eq!(report.redriven, 3);
    assert_eq!(count(&client, &db, "dead").await, 2, "invoices has no policy");
    assert_eq!(dispatcher.run_once().await.unwrap().sent, 3);
    let mut delivered: Vec<_> =
        transport.accepted().into_iter().map(|(d, e)| (d, e.id, e.body, e.attempts)).collect();
    delivered.sort_by_key(|(_, _, body, _)| body.clone());
    let expected: Vec<_> =
        messages[..3].iter().map(|m| ("orders".to_owned(), m.message_id(), m.body().to_vec(), 0)).collect();
    assert_eq!(delivered, expected, "same ids and bodies, attempts counted afresh");
}

/// LDR-5: with the default advisory-lock leadership, one of two replicas leads each pass;
/// the other skips its turn.
#[tokio::test]
async fn one_replica_leads_through_the_advisory_lock_ldr_5() {
    let (db, client) = setup().await;
    send(&db, "orders", 5, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 5).await;
    let rule = DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY));
    let options = DeadLetterOptions::builder().interval(Duration::from_millis(50)).build().unwrap();
    let shutdown = CancellationToken::new();
    let mut events = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let lock = relayer_advisory_lock::PgAdvisoryLock::new(db.config()).with_shutdown(shutdown.clone());
        let worker = DeadLetterWorker::new(
            source(&db, 1).await,
            db.namespace().clone(),
            DeadLetterPolicies::new([rule.clone()]).unwrap(),
            options.clone(),
            Leadership::Advisory(Arc::new(lock), lock_resource(db.namespace())),
        );
        events.push(worker.subscribe());
        let token = shutdown.clone();
        tasks.push(tokio::spawn(async move { worker.run(token).await }));
    }
    // Both loops pass at least twice: each pass either led or skipped, never both led.
    let mut outcomes: Vec<Vec<bool>> = vec![Vec::new(), Vec::new()];
    for (events, outcomes) in events.iter_mut().zip(outcomes.iter_mut()) {
        while outcomes.len() < 3 {
            match within(events.recv()).await.unwrap() {
                WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(DeadLetterReport { .. }), .. } => {
                    outcomes.push(true);
                }
                WorkerEvent::PassSucceeded { outcome: PassOutcome::NotLeader, .. } => outcomes.push(false),
                WorkerEvent::PassFailed { .. } => panic!("a pass failed"),
                _ => {}
            }
        }
    }
    shutdown.cancel();
    for task in tasks {
        within(task).await.unwrap();
    }
    let leaders = outcomes.iter().filter(|led| led.iter().all(|l| *l)).count();
    let followers = outcomes.iter().filter(|led| led.iter().all(|l| !*l)).count();
    assert_eq!((leaders, followers), (1, 1), "{outcomes:?}");
    assert_eq!(in_queue(&client, &db, "orders").await, 5);
}

/// LDR-5: a lease may lead the pass instead: while one owner holds it, another skips.
#[tokio::test]
async fn a_lease_can_lead_the_pass_instead_ldr_5() {
    let (db, client) = setup().await;
    send(&db, "orders", 2, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 2).await;
    let rule = DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY));
    let leased = |owner: &'static str| {
        let db = &db;
        let rule = rule.clone();
        async move {
            DeadLetterWorker::new(
                source(db, 1).await,
                db.namespace().clone(),
                DeadLetterPolicies::new([rule]).unwrap(),
                DeadLetterOptions::default(),
                Leadership::lease(relayer_dead_letters::LEASE_JOB, owner, Duration::from_secs(30)),
            )
        }
    };
    let (a, b) = (leased("a").await, leased("b").await);
    let first = a.run_once(&mut a.source().open().await.unwrap()).await.unwrap();
    assert!(first.led);
    assert_eq!(first.redriven, 2);
    let second = b.run_once(&mut b.source().open().await.unwrap()).await.unwrap();
    assert!(!second.led && second.redriven == 0, "{second:?}");
    assert!(
        a.run_once(&mut a.source().open().await.unwrap()).await.unwrap().led,
        "the holder renews its lease"
    );
}

/// RES-4: a worker started before its namespace has a schema does not end: each pass fails
/// and is retried with backoff, and once the schema is applied the worker runs and moves
/// dead letters.
#[tokio::test]
async fn a_worker_started_before_its_schema_keeps_retrying_and_then_runs_res_4() {
    let db = relayer_test_support::TestDb::new().await;
    let rule = DeadLetterRule::queue("orders", "dead", redrive(Duration::ZERO, DAY));
    let worker = worker(&db, vec![rule], 10).await;
    let mut events = worker.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(worker.run(shutdown.clone()));
    let mut failures = 0;
    while failures < 2 {
        match within(events.recv()).await.unwrap() {
            WorkerEvent::PassFailed { .. } => failures += 1,
            WorkerEvent::PassSucceeded { .. } => panic!("a pass succeeded without a schema"),
            WorkerEvent::Stopped => panic!("the worker stopped"),
            _ => {}
        }
    }
    assert!(!task.is_finished(), "a failed start must not end the worker");

    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    send(&db, "orders", 3, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 3).await;
    let mut redriven = 0;
    while redriven < 3 {
        if let WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } =
            within(events.recv()).await.unwrap()
        {
            redriven += report.redriven;
        }
    }
    assert_eq!(in_queue(&client, &db, "orders").await, 3);
    shutdown.cancel();
    within(task).await.unwrap();
}
