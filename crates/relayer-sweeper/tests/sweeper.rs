//! The recovery sweeper against a real PostgreSQL (§6, LAN-4, LDR-2, LDR-6, RES-1, LIF-2,
//! LIF-3).
//!
//! Messages enter through relayer's own writer and reach a small real test transport. Rows
//! are edited by hand only to make them old (`created_at`), which no component can do.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    Sink, count, database, dispatch_options, eventually, lease, message, next_led, next_not_leader,
    next_outcome, options, pool, registry, session, sweeper, transport, within,
};
use relayer_core::{MessageId, NewMessage, Timestamp};
use relayer_dispatcher::Dispatcher;
use relayer_postgres::{LeaseStatements, OutboxWriter, PgSource};
use relayer_sweeper::LEASE_JOB;
use relayer_test_support::TestDb;
use relayer_worker::{Leadership, PassOutcome, WorkerEvent};
use tokio_util::sync::CancellationToken;

fn writer(db: &TestDb) -> OutboxWriter {
    OutboxWriter::new(db.namespace(), ["test"])
}

/// Spawns `sweeper.run` and returns its shutdown token and task.
fn spawn(
    sweeper: relayer_sweeper::Sweeper<relayer_postgres::PgSource>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(sweeper.run(shutdown.clone()));
    (shutdown, task)
}

async fn stop(shutdown: CancellationToken, task: tokio::task::JoinHandle<()>) {
    shutdown.cancel();
    within(task).await.unwrap();
}

/// SWP-4, SWP-5, DSP-3: rows whose commit-triggered dispatch failed are recovered by the
/// sweeper alone (no dispatcher loop runs), sent with the identity, body, headers and
/// creation context they were written with, and deleted.
#[tokio::test]
async fn recovery_resends_rows_whose_direct_dispatch_failed_preserving_the_envelope_swp_4_swp_5() {
    let db = database().await;
    let client = db.connect().await;
    let sink = Sink::default();
    let transport = Arc::new(transport(sink.clone()));
    // The commit-triggered sends (one per destination) fail, and so does one of the
    // sweeper's first sends.
    transport.fail_first_calls.store(3, Ordering::SeqCst);
    let dispatch_pool =
        relayer_postgres::connect_pool(relayer_postgres::asynchronous_commit(db.config()), 1).await.unwrap();
    let registry = registry(transport.clone());
    let source = PgSource::new(dispatch_pool, db.namespace()).with_transports(registry.names());
    let dispatcher =
        Dispatcher::new(source, db.namespace().clone(), dispatch_options(), Arc::clone(&registry)).unwrap();
    let chosen_id = MessageId::new();
    let messages = vec![
        message("orders", 0).id(chosen_id).header("kind", "created").trace_context("00-trace-span-01"),
        message("orders", 1).header("kind", "updated"),
        message("invoices", 2).trace_context("00-other-span-01"),
    ];
    let written =
        OutboxWriter::for_registry(db.namespace(), &registry).enqueue(&client, &messages).await.unwrap();
    assert_eq!(written[0].id, chosen_id);
    let direct = dispatcher.dispatch_now(&written).await.unwrap();
    assert_eq!((direct.sent, direct.failed), (0, 3), "direct dispatch failed");
    let outbox = db.namespace().table("outbox");
    let stored: BTreeMap<MessageId, (i32, Timestamp)> = client
        .query(&format!("SELECT message_id, attempts, created_at FROM {outbox}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| {
            let created: std::time::SystemTime = row.get(2);
            (MessageId::from_uuid(row.get(0)), (row.get(1), Timestamp::from_system_time(created)))
        })
        .collect();
    assert!(stored.values().all(|(attempts, _)| *attempts == 1), "{stored:?}");

    let (pool, _) = pool(&db, "sweeper", 2).await;
    let sweeper = sweeper(pool, &db, options(10), transport.clone(), lease("a", Duration::from_secs(30)));
    let mut events = sweeper.subscribe();
    let (shutdown, task) = spawn(sweeper);
    let mut recovered = 0;
    while recovered < 3 {
        recovered += next_led(&mut events).await.sent;
    }
    stop(shutdown, task).await;

    assert_eq!(count(&client, &db, "outbox").await, 0, "recovered rows are deleted");
    let delivered: BTreeMap<MessageId, (String, relayer_core::Envelope)> = transport
        .accepted()
        .into_iter()
        .map(|(destination, envelope)| (envelope.id, (destination, envelope)))
        .collect();
    assert_eq!((delivered.len(), transport.accepted().len()), (3, 3), "each message once: {delivered:?}");
    for (expected, row) in messages.iter().zip(&written) {
        let (destination, envelope) = &delivered[&row.id];
        assert_eq!(destination, expected.destination());
        assert_eq!(envelope.id, row.id, "identity preserved");
        assert_eq!(envelope.body, expected.body(), "body preserved");
        assert_eq!(&envelope.headers, expected.header_map(), "headers preserved");
        assert_eq!(
            envelope.trace_context.as_deref(),
            expected.creation_context(),
            "creation context preserved"
        );
        assert_eq!(envelope.created_at, stored[&row.id].1, "created_at preserved");
        assert_eq!(envelope.lane, None);
    }
}

/// SWP-1, LDR-2: two sweepers on separate pools never run a pass at the same time, even
/// with slow sends that take most of the send step's time (half the lease; a send cannot
/// outlive that, TRN-5, so a pass never outlives its lease). Counted twice: send calls in
/// flight at once in the shared transport, and lease terms (a term belongs to one owner).
#[tokio::test]
async fn two_sweepers_never_overlap_a_pass_swp_1_ldr_2() {
    let db = database().await;
    let client = db.connect().await;
    let mut transport = transport(Sink::default());
    // Most of the send step's budget (half the 1 s lease).
    transport.delay = Duration::from_millis(400);
    let transport = Arc::new(transport);
    let messages: Vec<NewMessage> = (0..12).map(|n| message("orders", n)).collect();
    writer(&db).enqueue(&client, &messages).await.unwrap();

    let second = Duration::from_secs(1);
    let (pool_a, _) = pool(&db, "sweeper_a", 1).await;
    let (pool_b, _) = pool(&db, "sweeper_b", 1).await;
    let a = sweeper(pool_a, &db, options(3).lease_duration(second), transport.clone(), lease("a", second));
    let b = sweeper(pool_b, &db, options(3).lease_duration(second), transport.clone(), lease("b", second));
    let (mut events_a, mut events_b) = (a.subscribe(), b.subscribe());
    let (shutdown_a, task_a) = spawn(a);
    let (shutdown_b, task_b) = spawn(b);

    let mut terms: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    let mut not_leader = 0;
    let mut sent = 0;
    while sent < 12 {
        let (who, event) = tokio::select! {
            event = next_outcome(&mut events_a) => ("a", event),
            event = next_outcome(&mut events_b) => ("b", event),
        };
        match event {
            WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } => {
                assert!(report.sent <= 3);
                sent += report.sent;
                terms.entry(report.term.unwrap()).or_default().insert(who);
            }
            WorkerEvent::PassSucceeded { outcome: PassOutcome::NotLeader, .. } => not_leader += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    stop(shutdown_a, task_a).await;
    stop(shutdown_b, task_b).await;

    assert_eq!(transport.max_in_flight.load(Ordering::SeqCst), 1, "two passes sent at the same time");
    assert!(terms.values().all(|owners| owners.len() == 1), "a term had two owners: {terms:?}");
    assert!(not_leader > 0, "the other sweeper was turned away while a pass ran");
    assert_eq!(count(&client, &db, "outbox").await, 0);
    let ids: BTreeSet<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!(ids.len(), 12, "every message delivered");
}

/// LDR-2, LIF-1: graceful shutdown releases the lease, so the other sweeper leads on its
/// next pass with the next term — long before the (10-minute) lease could have expired.
#[tokio::test]
async fn graceful_shutdown_releases_the_lease_and_the_other_sweeper_leads_at_once_ldr_2() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    let long = Duration::from_secs(600);
    let (pool_a, _) = pool(&db, "sweeper_a", 1).await;
    let (pool_b, _) = pool(&db, "sweeper_b", 1).await;
    let a = sweeper(pool_a, &db, options(10).lease_duration(long), transport.clone(), lease("a", long));
    let b = sweeper(pool_b, &db, options(10).lease_duration(long), transport.clone(), lease("b", long));
    let (mut events_a, mut events_b) = (a.subscribe(), b.subscribe());

    let (shutdown_a, task_a) = spawn(a);
    assert_eq!(next_led(&mut events_a).await.term, Some(1));
    let (shutdown_b, task_b) = spawn(b);
    next_not_leader(&mut events_b).await;

    stop(shutdown_a, task_a).await;
    let leases = LeaseStatements::new(db.namespace());
    let released = leases.current(&client, LEASE_JOB).await.unwrap().unwrap();
    assert_eq!((released.owner.as_str(), released.term), ("a", 1));

    let report = next_led(&mut events_b).await;
    assert_eq!(report.term, Some(2), "a new holder gets the next term");
    writer(&db).enqueue(&client, &[message("orders", 0)]).await.unwrap();
    eventually("the new leader sends", || async { count(&client, &db, "outbox").await == 0 }).await;
    stop(shutdown_b, task_b).await;
    assert_eq!(transport.accepted().len(), 1);
}

/// LIF-3, LDR-2: a leader that dies without releasing (it simply never runs again) is
/// replaced once its lease expires on the database clock; the new leader recovers the rows.
#[tokio::test]
async fn a_dead_leader_is_replaced_after_its_lease_expires_lif_3() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    let (pool_a, _) = pool(&db, "sweeper_a", 1).await;
    let (pool_b, _) = pool(&db, "sweeper_b", 1).await;
    let second = Duration::from_secs(1);
    let a = sweeper(
        pool_a.clone(),
        &db,
        options(10).lease_duration(second),
        transport.clone(),
        lease("a", second),
    );
    let first = a.run_once(&mut session(&a).await).await.unwrap();
    assert_eq!((first.led, first.term), (true, Some(1)));
    drop(a); // crashed: no release

    writer(&db).enqueue(&client, &(0..5).map(|n| message("orders", n)).collect::<Vec<_>>()).await.unwrap();
    let b = sweeper(pool_b, &db, options(10), transport.clone(), lease("b", Duration::from_secs(30)));
    let mut events = b.subscribe();
    let (shutdown, task) = spawn(b);
    let report = next_led(&mut events).await;
    assert_eq!((report.term, report.sent), (Some(2), 5));
    stop(shutdown, task).await;
    assert_eq!(count(&client, &db, "outbox").await, 0);
}

/// LDR-2, LDR-6, SWP-4: a deposed leader's late statements change nothing.
///
/// Leader A's pass is stuck in a send. B is turned away: A's open transaction holds the
/// lease row (no overlap). Then the server ends A's session (as after a network
/// partition): A's transaction — its claims and its lease — rolls back, and once A's lease
/// expires B takes over with the next term, recovers A's rows and deletes them. When A's
/// send ends (its deadline, TRN-5, or the transport answering) its completion and commit
/// reach nothing: no row is touched, B keeps the lease, and A's next pass is not leader.
#[tokio::test]
async fn a_deposed_leaders_late_completion_changes_nothing_ldr_6() {
    let db = database().await;
    let client = db.connect().await;
    let sink = Sink::default();
    let slow = Arc::new(transport(sink.clone()));
    let quick = Arc::new(transport(sink.clone()));
    let second = Duration::from_secs(1);
    let (pool_a, application_a) = pool(&db, "leader_a", 1).await;
    let (pool_b, _) = pool(&db, "leader_b", 1).await;
    let a = Arc::new(sweeper(
        pool_a.clone(),
        &db,
        options(10).lease_duration(second),
        slow.clone(),
        lease("a", second),
    ));
    let b = sweeper(pool_b.clone(), &db, options(10), quick.clone(), lease("b", Duration::from_secs(30)));
    let leases = LeaseStatements::new(db.namespace());

    // A leads (term 1, committed), then starts a pass that gets stuck in its send.
    assert_eq!(a.run_once(&mut session(&a).await).await.unwrap().term, Some(1));
    let written = writer(&db)
        .enqueue(&client, &(0..3).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();
    slow.gated.store(true, Ordering::SeqCst);
    let late_pass = tokio::spawn({
        let a = a.clone();
        async move { a.run_once(&mut session(&a).await).await }
    });
    within(slow.entered.notified()).await;
    let mut conn_b = session(&b).await;
    assert!(!b.run_once(&mut conn_b).await.unwrap().led, "no overlap with a running pass");

    assert_eq!(db.terminate_backends(&application_a).await, 1);
    let mut takeover = b.run_once(&mut conn_b).await.unwrap();
    while !takeover.led {
        // A's lease runs out on the database clock (LIF-3); until then B is not leader.
        takeover = within(b.run_once(&mut conn_b)).await.unwrap();
    }
    assert_eq!((takeover.led, takeover.term, takeover.sent), (true, Some(2), 3));
    assert_eq!(count(&client, &db, "outbox").await, 0);

    // A wakes up: its transport answers, its completion and commit find no session.
    slow.open_gate();
    let late = within(late_pass).await.unwrap();
    assert!(late.is_err(), "the deposed pass cannot complete: {late:?}");
    assert_eq!((count(&client, &db, "outbox").await, count(&client, &db, "dead").await), (0, 0));
    let current = leases.current(&client, LEASE_JOB).await.unwrap().unwrap();
    assert_eq!((current.owner.as_str(), current.term), ("b", 2), "B keeps the lease");
    assert!(!a.run_once(&mut session(&a).await).await.unwrap().led);
    let ids: BTreeSet<MessageId> = sink.lock().unwrap().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!(
        ids,
        written.iter().map(|w| w.id).collect(),
        "each message delivered (A's late send is a duplicate)"
    );
}

/// RES-1, RES-2, §15: the sweeper's connection is killed in the middle of a pass. The pass
/// fails and is logged, the loop backs off, and a later pass delivers the rows.
#[tokio::test]
async fn a_connection_killed_mid_pass_fails_the_pass_and_a_later_pass_recovers_res_1() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    transport.gated.store(true, Ordering::SeqCst);
    let written = writer(&db)
        .enqueue(&client, &(0..4).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();
    let (pool, application_name) = pool(&db, "victim", 1).await;
    let sweeper = sweeper(pool, &db, options(10), transport.clone(), lease("a", Duration::from_secs(30)));
    let mut events = sweeper.subscribe();
    let (shutdown, task) = spawn(sweeper);

    within(transport.entered.notified()).await;
    assert_eq!(db.terminate_backends(&application_name).await, 1);
    transport.open_gate();
    match next_outcome(&mut events).await {
        WorkerEvent::PassFailed { consecutive, .. } => assert_eq!(consecutive, 1),
        other => panic!("expected the killed pass to fail, got {other:?}"),
    }
    let report = next_led(&mut events).await;
    assert_eq!(report.sent, 4, "the next pass recovers the rolled-back rows");
    stop(shutdown, task).await;
    assert_eq!(count(&client, &db, "outbox").await, 0);
    let ids: BTreeSet<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!(ids, written.iter().map(|w| w.id).collect());
}

/// SWP-3: while new rows keep arriving, older rows behind the cursor whose destination
/// keeps failing are retried on every traversal (the cursor wraps), and are delivered once
/// their destination recovers — new traffic never starves them.
#[tokio::test]
async fn continuous_new_traffic_cannot_starve_failed_rows_behind_the_cursor_swp_3() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    transport.failing_destinations.lock().unwrap().insert("early".to_owned());
    let early =
        writer(&db).enqueue(&client, &(0..5).map(|n| message("early", n)).collect::<Vec<_>>()).await.unwrap();

    let inserting = CancellationToken::new();
    let inserter = tokio::spawn({
        let (inserting, late_writer, client) = (inserting.clone(), writer(&db), db.connect().await);
        async move {
            let mut n = 0;
            while !inserting.is_cancelled() {
                late_writer.enqueue(&client, &[message("late", n)]).await.unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            n
        }
    });
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let sweeper = sweeper(pool, &db, options(4), transport.clone(), lease("a", Duration::from_secs(30)));
    let mut events = sweeper.subscribe();
    let (shutdown, task) = spawn(sweeper);

    let outbox = db.namespace().table("outbox");
    let early_attempts =
        format!("SELECT coalesce(min(attempts), -1) FROM {outbox} WHERE destination = 'early'");
    let mut wrapped = 0;
    while wrapped < 3 {
        if next_led(&mut events).await.wrapped {
            wrapped += 1;
        }
    }
    eventually("every early row was retried on a later traversal", || async {
        client.query_one(&early_attempts, &[]).await.unwrap().get::<_, i32>(0) >= 2
    })
    .await;
    transport.failing_destinations.lock().unwrap().clear();
    let early_left = format!("SELECT count(*) FROM {outbox} WHERE destination = 'early'");
    eventually("the early rows are delivered while new rows keep coming", || async {
        client.query_one(&early_left, &[]).await.unwrap().get::<_, i64>(0) == 0
    })
    .await;
    assert!(!inserter.is_finished(), "new traffic was still arriving");

    inserting.cancel();
    let late = within(inserter).await.unwrap();
    eventually("the backlog drains", || async { count(&client, &db, "outbox").await == 0 }).await;
    stop(shutdown, task).await;
    let ids: BTreeSet<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert!(early.iter().all(|w| ids.contains(&w.id)));
    assert_eq!(ids.len(), early.len() + late);
}

/// LIF-2: with a pool of one connection, the application borrows that connection between
/// passes for its own work; nothing deadlocks and every row is delivered.
#[tokio::test]
async fn a_pool_of_one_connection_is_shared_with_application_work_lif_2() {
    let db = database().await;
    let transport = Arc::new(transport(Sink::default()));
    let (pool, _) = pool(&db, "shared", 1).await;
    let sweeper =
        sweeper(pool.clone(), &db, options(5), transport.clone(), lease("a", Duration::from_secs(30)));
    let mut events = sweeper.subscribe();
    let (shutdown, task) = spawn(sweeper);
    let writer = writer(&db);

    within(async {
        for round in 0..20 {
            // The application's own transaction on the sweeper's only connection.
            let mut conn = pool.get().await.unwrap();
            let tx = conn.transaction().await.unwrap();
            let batch: Vec<NewMessage> = (0..3).map(|n| message("orders", round * 3 + n)).collect();
            writer.enqueue(&tx, &batch).await.unwrap();
            tx.commit().await.unwrap();
            drop(conn);
            next_outcome(&mut events).await;
        }
        eventually("every row is delivered", || async {
            let conn = pool.get().await.unwrap();
            count(&conn, &db, "outbox").await == 0
        })
        .await;
    })
    .await;
    stop(shutdown, task).await;
    assert_eq!(transport.accepted().len(), 60);
}

/// LAN-4: lane rows are never read, claimed or sent by the sweeper, however old and due.
#[tokio::test]
async fn the_sweeper_never_sends_lane_rows_lan_4() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    let messages = vec![
        message("orders", 0).lane("customer-1"),
        message("orders", 1).lane("customer-1"),
        message("orders", 2),
        message("orders", 3).lane("customer-2"),
    ];
    let written = writer(&db).enqueue(&client, &messages).await.unwrap();
    let outbox = db.namespace().table("outbox");
    // Old enough for any recovery delay: no component writes a day-old row.
    client.execute(&format!("UPDATE {outbox} SET created_at = now() - interval '1 day'"), &[]).await.unwrap();

    let (pool, _) = pool(&db, "sweeper", 1).await;
    let default_delay = options(10).recovery_delay(Duration::from_secs(30));
    let sweeper =
        sweeper(pool.clone(), &db, default_delay, transport.clone(), lease("a", Duration::from_secs(30)));
    let mut conn = session(&sweeper).await;
    let mut scanned = 0;
    for _ in 0..4 {
        scanned += sweeper.run_once(&mut conn).await.unwrap().scanned;
    }
    assert_eq!(scanned, 1, "only the unordered row is ever read");
    let sent: Vec<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!(sent, vec![written[2].id]);
    let untouched: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {outbox} WHERE lane IS NOT NULL AND attempts = 0 AND claim_token IS NULL"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(untouched, 3);
}

/// A pass sends its page read together with its lease acquisition, and the read takes
/// nothing unless the lease is held. On a namespace's very first pass the lease row does not
/// exist yet when the page is read: the pass creates the lease, reads again and sweeps in
/// that same pass. A contender's pass does not lead and sends nothing; the read's own lease
/// check is pinned in `relayer-postgres` `tests/prepared.rs` (LDR-2, SWP-2).
#[tokio::test]
async fn the_first_pass_creates_the_lease_and_sweeps_in_that_same_pass_ldr_2() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    writer(&db).enqueue(&client, &[message("orders", 0), message("orders", 1)]).await.unwrap();
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let a = sweeper(pool.clone(), &db, options(10), transport.clone(), lease("a", Duration::from_secs(30)));
    let report = a.run_once(&mut session(&a).await).await.unwrap();
    assert_eq!((report.led, report.term, report.scanned, report.sent), (true, Some(1), 2, 2));

    writer(&db).enqueue(&client, &[message("orders", 2)]).await.unwrap();
    let b = sweeper(pool.clone(), &db, options(10), transport.clone(), lease("b", Duration::from_secs(30)));
    let report = b.run_once(&mut session(&b).await).await.unwrap();
    assert_eq!((report.led, report.scanned, report.claimed), (false, 0, 0), "{report:?}");
    assert_eq!(transport.accepted().len(), 2);
    assert_eq!(count(&client, &db, "outbox").await, 1, "left for the leader");
}

/// RES-1, NS-3: a sweeper started on a namespace whose schema is not there yet (a database
/// being migrated) fails its passes with an error saying why and backs off; once the schema
/// appears it sweeps, with no restart.
#[tokio::test]
async fn a_missing_schema_is_a_failed_pass_retried_until_it_is_migrated_res_1() {
    let db = TestDb::new().await; // not migrated yet
    let mut client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let sweeper = sweeper(pool, &db, options(10), transport.clone(), Leadership::EveryInstance);
    let mut events = sweeper.subscribe();
    let (shutdown, task) = spawn(sweeper);
    for consecutive in 1..=2 {
        let WorkerEvent::PassFailed { consecutive: failed, .. } = next_outcome(&mut events).await else {
            panic!("a pass without its schema succeeded");
        };
        assert_eq!(failed, consecutive);
    }
    assert!(!task.is_finished(), "the worker ended instead of retrying");

    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    writer(&db).enqueue(&client, &[message("orders", 0)]).await.unwrap();
    eventually("the row is swept once the schema is there", || async {
        count(&client, &db, "outbox").await == 0
    })
    .await;
    stop(shutdown, task).await;
    assert_eq!(transport.accepted().len(), 1);
}

/// LDR-3, LDR-5: under an advisory lock, one of two sweepers leads and every row is sent once.
#[tokio::test]
async fn advisory_leadership_lets_one_sweeper_lead_ldr_5() {
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    writer(&db).enqueue(&client, &(0..30).map(|n| message("orders", n)).collect::<Vec<_>>()).await.unwrap();
    let resource = format!("sweeper:{}", db.schema());
    let advisory = |name: &str| {
        let mut config = db.config();
        config.application_name(format!("{}_{name}", db.schema()));
        Leadership::Advisory(Arc::new(relayer_advisory_lock::PgAdvisoryLock::new(config)), resource.clone())
    };
    let (pool_a, _) = pool(&db, "sweeper_a", 1).await;
    let (pool_b, _) = pool(&db, "sweeper_b", 1).await;
    let a = sweeper(pool_a, &db, options(5), transport.clone(), advisory("lock_a"));
    let b = sweeper(pool_b, &db, options(5), transport.clone(), advisory("lock_b"));
    let (shutdown_a, task_a) = spawn(a);
    let (shutdown_b, task_b) = spawn(b);
    eventually("every row is delivered", || async { count(&client, &db, "outbox").await == 0 }).await;
    stop(shutdown_a, task_a).await;
    stop(shutdown_b, task_b).await;
    let ids: BTreeSet<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!((ids.len(), transport.accepted().len()), (30, 30), "each row sent exactly once");
}

/// SWP-4: a row a concurrent dispatcher is claiming at that moment is skipped, not waited
/// for and not sent twice; the rest of the page is recovered.
#[tokio::test]
async fn rows_a_concurrent_dispatcher_holds_are_skipped_swp_4() {
    let db = database().await;
    let client = db.connect().await;
    let mut dispatcher_client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    let written = writer(&db)
        .enqueue(&client, &(0..4).map(|n| message("orders", n)).collect::<Vec<_>>())
        .await
        .unwrap();

    // A dispatcher's claim of the first two rows, still in flight (uncommitted).
    let outbox = relayer_postgres::OutboxStatements::new(db.namespace());
    let claim = dispatcher_client.transaction().await.unwrap();
    let held: Vec<i64> = written[..2].iter().map(|w| w.seq).collect();
    let token = relayer_core::Uuid::new_v4();
    assert_eq!(
        outbox.claim_seqs(&claim, token, Duration::from_secs(30), &held).await.unwrap().messages.len(),
        2
    );

    let (pool, _) = pool(&db, "sweeper", 1).await;
    let sweeper =
        sweeper(pool.clone(), &db, options(10), transport.clone(), lease("a", Duration::from_secs(30)));
    let report = within(sweeper.run_once(&mut session(&sweeper).await)).await.unwrap();
    assert_eq!((report.scanned, report.claimed, report.skipped, report.sent), (4, 2, 2, 2));
    claim.rollback().await.unwrap();
    let sent: BTreeSet<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!(sent, written[2..].iter().map(|w| w.id).collect());
    assert_eq!(count(&client, &db, "outbox").await, 2, "the held rows are left to their holder");
}

/// SWP-6: a backlog left with no dispatcher running drains through the running loop at the
/// pace of passes, not of intervals. 20,000 eligible rows, pages of 100, and ten minutes
/// between passes: only passes that follow a full page at once can drain it before the
/// test's patience runs out (at one page per interval it would take 33 hours). Each page is
/// one send call, so the calls count the passes that found work.
#[tokio::test]
async fn a_backlog_drains_at_the_pace_of_passes_not_of_intervals_swp_6() {
    const ROWS: usize = 20_000;
    const BATCH: u32 = 100;
    let db = database().await;
    let client = db.connect().await;
    let transport = Arc::new(transport(Sink::default()));
    let messages: Vec<_> = (0..ROWS).map(|n| message("orders", n)).collect();
    for chunk in messages.chunks(1_000) {
        writer(&db).enqueue(&client, chunk).await.unwrap();
    }

    let (pool, _) = pool(&db, "sweeper", 1).await;
    let minutes =
        options(BATCH).sweep_interval(Duration::from_secs(600)).lease_duration(Duration::from_secs(1_200));
    let sweeper = sweeper(pool, &db, minutes, transport.clone(), lease("a", Duration::from_secs(1_200)));
    let (shutdown, task) = spawn(sweeper);
    eventually("the backlog is drained", || async { count(&client, &db, "outbox").await == 0 }).await;
    stop(shutdown, task).await;

    let ids: BTreeSet<MessageId> = transport.accepted().iter().map(|(_, envelope)| envelope.id).collect();
    assert_eq!((ids.len(), transport.accepted().len()), (ROWS, ROWS), "each row sent exactly once");
    assert_eq!(transport.calls.load(Ordering::SeqCst), 200, "one page of 100 per pass");
}

/// RES-1, RES-2: a sweeper whose very first step meets a stopped server (its pooled
/// connection died with it) does not end: its passes fail and back off, and once the server
/// is back it checks the schema and sweeps, with no restart. On a cluster of the test's own.
#[tokio::test]
async fn a_first_pass_that_meets_a_stopped_server_is_retried_until_it_returns_res_1() {
    let cluster = relayer_test_support::OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    writer(&db).enqueue(&client, &[message("orders", 0)]).await.unwrap();
    let transport = Arc::new(transport(Sink::default()));
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let sweeper = sweeper(pool, &db, options(10), transport.clone(), lease("a", Duration::from_secs(30)));
    let mut events = sweeper.subscribe();

    cluster.stop_immediately().await;
    let (shutdown, task) = spawn(sweeper);
    assert!(matches!(next_outcome(&mut events).await, WorkerEvent::PassFailed { consecutive: 1, .. }));
    assert!(!task.is_finished(), "the worker ended instead of retrying");
    cluster.start_again().await;

    next_led(&mut events).await;
    let client = db.connect().await;
    eventually("the row is swept", || async { count(&client, &db, "outbox").await == 0 }).await;
    stop(shutdown, task).await;
    assert_eq!(transport.accepted().len(), 1);
}
