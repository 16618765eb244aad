//! Retention cleanup against a real PostgreSQL (RET-1..5, LDR-2, LDR-6, LIF-1, LIF-2, RES-1).
//!
//! Messages enter through relayer's own writer and lane statements. Dead and inbox rows, and
//! old outbox timestamps, are written by hand: no component produces a row that is already
//! weeks old.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer_cleanup::{Cleanup, CleanupReport, LEASE_JOB};
use relayer_core::{CleanupOptions, Delivery, NewMessage, Retention, StoreSource, Uuid};
use relayer_postgres::{
    HeadFailure, LaneStatements, LeaseStatements, OutboxWriter, PgPool, PgSession, PgSource, connect_pool,
    migrate,
};
use relayer_test_support::{TestDb, within};
use relayer_worker::{Leadership, PassOutcome, WorkerEvent};
use tokio::sync::broadcast;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

const DAY: Duration = Duration::from_secs(86_400);

/// A migrated namespace and a connection of the test's own.
async fn setup() -> (TestDb, Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

/// A cleaner of the test's namespace on `pool`.
fn cleaner(pool: PgPool, db: &TestDb, options: CleanupOptions, leadership: Leadership) -> Cleanup<PgSource> {
    Cleanup::new(PgSource::new(pool, db.namespace()), db.namespace().clone(), options, leadership)
}

/// A session of the cleaner's own source, for `run_once`.
async fn session(cleanup: &Cleanup<PgSource>) -> PgSession {
    cleanup.source().open().await.unwrap()
}

/// Batches of `batch_size`, one-day retentions, and a fast schedule so loops cycle quickly.
fn options(batch_size: u32) -> CleanupOptions {
    CleanupOptions::builder()
        .batch_size(batch_size)
        .dead_retention(Retention::After(DAY))
        .inbox_retention(Retention::After(DAY))
        .cleanup_interval(Duration::from_millis(100))
        .max_backoff(Duration::from_millis(400))
        .build()
        .unwrap()
}

/// A pool whose sessions carry `application_name` `{schema}_{name}`, checked out without a
/// health check (so a killed connection is seen by the pass that uses it).
async fn pool(db: &TestDb, name: &str, size: u32) -> (PgPool, String) {
    let application_name = format!("{}_{name}", db.schema());
    let mut config = db.config();
    config.application_name(&application_name);
    (connect_pool(config, size).await.unwrap(), application_name)
}

fn lease(owner: &str) -> Leadership {
    Leadership::lease(LEASE_JOB, owner, Duration::from_secs(30))
}

async fn insert_dead(client: &Client, db: &TestDb, first_seq: i64, count: i64, age: &str) {
    let dead = db.namespace().table("dead");
    client
        .execute(
            &format!(
                "INSERT INTO {dead} (seq, message_id, transport, destination, body, created_at, failed_at, attempts) \
                 SELECT n, gen_random_uuid(), 'queue', 'orders', '\\x00', now() - $3::text::interval - interval '1 day', \
                        now() - $3::text::interval, 3 \
                 FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) AS n"
            ),
            &[&first_seq, &count, &age],
        )
        .await
        .unwrap();
}

async fn insert_inbox(client: &Client, db: &TestDb, count: i64, age: &str) {
    let inbox = db.namespace().table("inbox");
    client
        .execute(
            &format!(
                "INSERT INTO {inbox} (consumer, message_id, processed_at) \
                 SELECT 'billing', gen_random_uuid(), now() - $2::text::interval FROM generate_series(1, $1::bigint)"
            ),
            &[&count, &age],
        )
        .await
        .unwrap();
}

async fn count(client: &Client, db: &TestDb, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table(table)), &[])
        .await
        .unwrap()
        .get(0)
}

/// The next pass outcome (success or failure), skipping `PassStarted`.
async fn next_outcome(
    events: &mut broadcast::Receiver<WorkerEvent<CleanupReport>>,
) -> WorkerEvent<CleanupReport> {
    within(async {
        loop {
            match events.recv().await.unwrap() {
                WorkerEvent::PassStarted { .. } => {}
                other => return other,
            }
        }
    })
    .await
}

/// Waits for the next pass this instance led.
async fn next_led(events: &mut broadcast::Receiver<WorkerEvent<CleanupReport>>) -> CleanupReport {
    loop {
        if let WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } =
            next_outcome(events).await
        {
            return report;
        }
    }
}

/// RET-1: pending, scheduled and lane rows — a parked lane included — never expire, however
/// old, while expired dead and inbox rows around them go.
#[tokio::test]
async fn cleanup_never_deletes_pending_scheduled_or_parked_outbox_rows_ret_1() {
    let (db, client) = setup().await;
    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    let messages = vec![
        NewMessage::new("queue", "orders", b"pending".to_vec()),
        NewMessage::new("queue", "orders", b"scheduled".to_vec()).delivery(Delivery::After(30 * DAY)),
        NewMessage::new("queue", "orders", b"lane head".to_vec()).lane("customer-7"),
        NewMessage::new("queue", "orders", b"lane tail".to_vec()).lane("customer-7"),
        NewMessage::new("queue", "orders", b"other lane".to_vec()).lane("customer-8"),
    ];
    let written = writer.enqueue(&client, &messages).await.unwrap();
    let lanes = LaneStatements::new(db.namespace());
    let token = Uuid::new_v4();
    lanes.claim(&client, token, Duration::from_secs(30), 10, "", 40, &[]).await.unwrap();
    let parked = lanes
        .fail_head(&client, "customer-7", token, written[2].seq, HeadFailure::Park { error: "poison" })
        .await
        .unwrap();
    assert!(parked);
    // Far older than any retention.
    client
        .execute(
            &format!(
                "UPDATE {} SET created_at = now() - interval '400 days'",
                db.namespace().table("outbox")
            ),
            &[],
        )
        .await
        .unwrap();
    insert_dead(&client, &db, 1, 5, "40 days").await;
    insert_inbox(&client, &db, 5, "40 days").await;

    let (pool, _) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options(100), lease("a"));
    let report = cleanup.run_once(&mut session(&cleanup).await).await.unwrap();
    assert_eq!((report.dead_deleted, report.inbox_deleted), (5, 5));
    assert_eq!(count(&client, &db, "outbox").await, 5, "no outbox row was deleted");
    assert_eq!(lanes.parked_lanes(&client).await.unwrap().len(), 1, "the lane is still parked");
}

/// RET-2: only rows strictly past retention go, `batch_size` at a time, until a batch
/// comes back short.
#[tokio::test]
async fn deletes_expired_dead_and_inbox_rows_in_batches_until_the_backlog_is_gone_ret_2() {
    let (db, client) = setup().await;
    insert_dead(&client, &db, 1, 25, "40 days").await;
    insert_dead(&client, &db, 100, 3, "1 hour").await;
    insert_inbox(&client, &db, 12, "8 days").await;
    insert_inbox(&client, &db, 2, "1 minute").await;
    let (pool, _) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options(10), lease("a"));

    let report = cleanup.run_once(&mut session(&cleanup).await).await.unwrap();
    assert!(report.led);
    assert_eq!((report.dead_deleted, report.inbox_deleted), (25, 12));
    assert_eq!(report.batches, 3 + 2, "dead: 10, 10, 5; inbox: 10, 2");
    assert!(!report.stopped_early && !report.lease_lost);
    assert_eq!((count(&client, &db, "dead").await, count(&client, &db, "inbox").await), (3, 2));

    let again = cleanup.run_once(&mut session(&cleanup).await).await.unwrap();
    assert_eq!((again.dead_deleted, again.inbox_deleted, again.batches), (0, 0, 2));
}

/// RET-3: `infinite` disables deletion for its table only.
#[tokio::test]
async fn an_infinite_retention_keeps_its_table_ret_3() {
    let (db, client) = setup().await;
    insert_dead(&client, &db, 1, 4, "400 days").await;
    insert_inbox(&client, &db, 4, "400 days").await;
    let (pool, _) = pool(&db, "cleaner", 1).await;
    let options: CleanupOptions = options(100).to_builder().dead_retention(Retention::Keep).build().unwrap();
    let cleanup = cleaner(pool, &db, options, Leadership::EveryInstance);
    let report = cleanup.run_once(&mut session(&cleanup).await).await.unwrap();
    assert_eq!((report.dead_deleted, report.inbox_deleted, report.batches), (0, 4, 1));
    assert_eq!(count(&client, &db, "dead").await, 4);
}

/// RET-2, SWP-1: replicas side by side on their own pools. Under a lease one leads and the
/// other skips its turn; without leadership both delete, and SKIP LOCKED keeps every row to
/// one of them. Neither ever waits for the other.
#[tokio::test]
async fn two_cleaners_never_delete_a_row_twice_and_do_not_block_each_other_ret_2() {
    let (db, client) = setup().await;
    insert_dead(&client, &db, 1, 300, "40 days").await;
    insert_inbox(&client, &db, 300, "40 days").await;

    // Both leaderless, deleting in small batches at the same time.
    let (pool_a, _) = pool(&db, "cleaner_a", 1).await;
    let (pool_b, _) = pool(&db, "cleaner_b", 1).await;
    let a = cleaner(pool_a.clone(), &db, options(7), Leadership::EveryInstance);
    let b = cleaner(pool_b.clone(), &db, options(7), Leadership::EveryInstance);
    let (mut conn_a, mut conn_b) = (session(&a).await, session(&b).await);
    let (report_a, report_b) =
        within(async { tokio::join!(a.run_once(&mut conn_a), b.run_once(&mut conn_b)) }).await;
    let (report_a, report_b) = (report_a.unwrap(), report_b.unwrap());
    assert_eq!(report_a.dead_deleted + report_b.dead_deleted, 300, "each row deleted exactly once");
    assert_eq!(report_a.inbox_deleted + report_b.inbox_deleted, 300);
    assert_eq!((count(&client, &db, "dead").await, count(&client, &db, "inbox").await), (0, 0));
    drop((conn_a, conn_b));

    // Both under the cleanup lease, running their loops side by side.
    insert_dead(&client, &db, 1_000, 50, "40 days").await;
    let a = cleaner(pool_a, &db, options(7), lease("a"));
    let b = cleaner(pool_b, &db, options(7), lease("b"));
    let (mut events_a, mut events_b) = (a.subscribe(), b.subscribe());
    let shutdown = CancellationToken::new();
    let tasks = [tokio::spawn(a.run(shutdown.clone())), tokio::spawn(b.run(shutdown.clone()))];
    let mut deleted = 0;
    let mut outcomes = Vec::new();
    for events in [&mut events_a, &mut events_b] {
        for _ in 0..3 {
            match next_outcome(events).await {
                WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } => {
                    deleted += report.dead_deleted;
                    outcomes.push(true);
                }
                WorkerEvent::PassSucceeded { outcome: PassOutcome::NotLeader, .. } => outcomes.push(false),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    shutdown.cancel();
    for task in tasks {
        within(task).await.unwrap();
    }
    // The leader may sit out a turn (NotLeader) when the other's probe holds the lease row
    // at that moment (SKIP LOCKED: neither waits for the other); the other never leads.
    let (led_a, led_b) = (outcomes[..3].iter().any(|led| *led), outcomes[3..].iter().any(|led| *led));
    assert!(led_a != led_b, "exactly one of them leads while its lease is live: {outcomes:?}");
    assert_eq!(deleted, 50);
    assert_eq!(count(&client, &db, "dead").await, 0);
}

/// LIF-2: a pass needs one connection for everything it does.
#[tokio::test]
async fn a_pool_of_one_connection_is_enough_lif_2() {
    let (db, client) = setup().await;
    insert_dead(&client, &db, 1, 30, "40 days").await;
    insert_inbox(&client, &db, 30, "40 days").await;
    let (pool, _) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options(10), lease("a"));
    let mut events = cleanup.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(cleanup.run(shutdown.clone()));
    let report = next_led(&mut events).await;
    assert_eq!((report.dead_deleted, report.inbox_deleted, report.term), (30, 30, Some(1)));
    shutdown.cancel();
    within(task).await.unwrap();
}

/// RES-1, RES-2: the cleaner's connection is killed by the server; the next pass fails, is
/// logged, backs off, and the one after works on a fresh connection.
#[tokio::test]
async fn a_killed_connection_is_logged_backed_off_and_recovered_res_1() {
    let (db, client) = setup().await;
    let (pool, application_name) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options(10), lease("a"));
    let backoff = cleanup.options().pass_backoff();
    let mut events = cleanup.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(cleanup.run(shutdown.clone()));
    next_led(&mut events).await;

    assert_eq!(db.terminate_backends(&application_name).await, 1);
    insert_dead(&client, &db, 1, 15, "40 days").await;
    let failure = loop {
        match next_outcome(&mut events).await {
            WorkerEvent::PassFailed { consecutive, next_wait, .. } => break (consecutive, next_wait),
            // A pass that ran before the kill took effect.
            WorkerEvent::PassSucceeded { .. } => {}
            WorkerEvent::PassStarted { .. } | WorkerEvent::Stopped => unreachable!(),
        }
    };
    assert_eq!(failure, (1, backoff.wait_after(1)));
    let mut recovered = 0;
    while recovered < 15 {
        recovered += next_led(&mut events).await.dead_deleted;
    }
    assert_eq!(count(&client, &db, "dead").await, 0);
    shutdown.cancel();
    within(task).await.unwrap();
}

/// LIF-1, LDR-2: graceful shutdown releases the lease, so another instance leads at once
/// instead of after expiry.
#[tokio::test]
async fn graceful_shutdown_releases_the_lease_lif_1() {
    let (db, client) = setup().await;
    let (pool_a, _) = pool(&db, "cleaner_a", 1).await;
    let first = cleaner(pool_a, &db, options(10), lease("a"));
    let mut events = first.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(first.run(shutdown.clone()));
    assert_eq!(next_led(&mut events).await.term, Some(1));

    let (pool_b, _) = pool(&db, "cleaner_b", 1).await;
    let second = cleaner(pool_b, &db, options(10), lease("b"));
    assert!(!second.run_once(&mut session(&second).await).await.unwrap().led, "the lease is live");
    shutdown.cancel();
    shutdown.cancel();
    within(task).await.unwrap();
    assert_eq!(events.recv().await.unwrap(), WorkerEvent::Stopped);

    let report = second.run_once(&mut session(&second).await).await.unwrap();
    assert_eq!((report.led, report.term), (true, Some(2)));
    let lease = LeaseStatements::new(db.namespace()).current(&client, LEASE_JOB).await.unwrap().unwrap();
    assert_eq!((lease.owner.as_str(), lease.term), ("b", 2));
}

/// RES-1, NS-3: a cleaner started on a namespace whose schema is not there yet (a database
/// being migrated) fails its passes, saying why, and backs off; once the schema appears it
/// cleans, with no restart.
#[tokio::test]
async fn a_missing_schema_is_a_failed_pass_retried_until_it_is_migrated_res_1() {
    let db = TestDb::new().await; // not migrated yet
    let (pool, _) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options(10), lease("a"));
    let error = cleanup.run_once(&mut session(&cleanup).await).await.unwrap_err();
    let chain = relayer_core::error_chain(&error);
    assert!(!error.is_transient() && chain.contains("does not exist"), "{chain}");
    let mut events = cleanup.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(cleanup.run(shutdown.clone()));
    for consecutive in 1..=2 {
        let WorkerEvent::PassFailed { consecutive: failed, .. } = next_outcome(&mut events).await else {
            panic!("a pass without its schema succeeded");
        };
        assert_eq!(failed, consecutive);
    }
    assert!(!task.is_finished(), "the worker ended instead of retrying");

    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    insert_dead(&client, &db, 1, 5, "40 days").await;
    let mut deleted = 0;
    while deleted < 5 {
        deleted += next_led(&mut events).await.dead_deleted;
    }
    shutdown.cancel();
    within(task).await.unwrap();
}

/// LDR-2, LDR-6: two cleaners never overlap a pass, even when a batch outlives the lease.
/// Cleaner A's batch is held in flight (each deleted row waits for an advisory lock the
/// test holds) until A's one-second lease has expired on the database clock; B then finds
/// the lease row locked by that batch and skips its turn, never waiting. Once A goes on,
/// each of its batches renews the lease, and the lease is still A's, at its first term, when
/// its pass ends: nobody took it over in between.
#[tokio::test]
async fn two_cleaners_never_overlap_a_pass_even_past_lease_expiry_ldr_2() {
    let (db, client) = setup().await;
    insert_dead(&client, &db, 1, 30, "40 days").await;
    let key = i64::from_be_bytes(Uuid::new_v4().as_bytes()[..8].try_into().unwrap());
    let (schema, dead) = (db.schema(), db.namespace().table("dead"));
    client
        .batch_execute(&format!(
            "CREATE FUNCTION \"{schema}\".gate() RETURNS trigger LANGUAGE plpgsql AS \
               $$ BEGIN PERFORM pg_advisory_xact_lock_shared({key}); RETURN OLD; END $$; \
             CREATE TRIGGER gate BEFORE DELETE ON {dead} FOR EACH ROW EXECUTE FUNCTION \"{schema}\".gate()"
        ))
        .await
        .unwrap();
    let gate = db.connect().await;
    gate.execute("SELECT pg_advisory_lock($1)", &[&key]).await.unwrap();

    let one_second = |owner| Leadership::lease(LEASE_JOB, owner, Duration::from_secs(1));
    let (pool_a, application_a) = pool(&db, "cleaner_a", 1).await;
    let (pool_b, _) = pool(&db, "cleaner_b", 1).await;
    let a = cleaner(pool_a, &db, options(10), one_second("a"));
    let b = cleaner(pool_b, &db, options(10), one_second("b"));
    let mut conn_a = session(&a).await;
    let pass_a = tokio::spawn(async move { a.run_once(&mut conn_a).await });
    let waiting = format!(
        "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity s USING (pid) \
                        WHERE s.application_name = $1 AND l.locktype = 'advisory' AND NOT l.granted) \
            AND (SELECT expires_at < clock_timestamp() FROM {} WHERE job = $2)",
        db.namespace().table("leases")
    );
    relayer_test_support::eventually("A's batch waits at the gate past its lease's expiry", || async {
        client.query_one(&waiting, &[&application_a, &LEASE_JOB]).await.unwrap().get(0)
    })
    .await;

    let mut conn_b = session(&b).await;
    let report_b = within(b.run_once(&mut conn_b)).await.unwrap();
    assert!(!report_b.led, "B led while A's batch ran: {report_b:?}");
    assert_eq!(count(&client, &db, "dead").await, 30, "nothing deleted yet");

    gate.execute("SELECT pg_advisory_unlock($1)", &[&key]).await.unwrap();
    let report_a = within(pass_a).await.unwrap().unwrap();
    assert_eq!((report_a.led, report_a.term, report_a.lease_lost), (true, Some(1), false), "{report_a:?}");
    assert_eq!((report_a.dead_deleted, report_a.batches), (30, 3 + 1 + 1), "dead 10, 10, 10, 0; inbox 0");
    let lease = LeaseStatements::new(db.namespace()).current(&client, LEASE_JOB).await.unwrap().unwrap();
    assert_eq!((lease.owner.as_str(), lease.term), ("a", 1), "nobody took the lease over during A's pass");
}

/// RES-1, RES-2: a cleaner whose very first step meets a stopped server (its pooled
/// connection died with it) does not end: its passes fail and back off, and once the server
/// is back it checks the schema and cleans, with no restart. On a cluster of the test's own.
#[tokio::test]
async fn a_first_pass_that_meets_a_stopped_server_is_retried_until_it_returns_res_1() {
    let cluster = relayer_test_support::OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    insert_dead(&client, &db, 1, 5, "40 days").await;
    let (pool, _) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options(10), lease("a"));
    let mut events = cleanup.subscribe();

    cluster.stop_immediately().await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(cleanup.run(shutdown.clone()));
    assert!(matches!(next_outcome(&mut events).await, WorkerEvent::PassFailed { consecutive: 1, .. }));
    assert!(!task.is_finished(), "the worker ended instead of retrying");
    cluster.start_again().await;

    let mut deleted = 0;
    while deleted < 5 {
        deleted += next_led(&mut events).await.dead_deleted;
    }
    shutdown.cancel();
    within(task).await.unwrap();
}

/// OPT-3, RET-2: the longest retention the options accept is one PostgreSQL can compute
/// (`now() - retention` stays inside its timestamp range): a pass with it deletes nothing
/// and does not fail. Anything longer is refused when the options are built, naming the field.
#[tokio::test]
async fn the_longest_accepted_retention_runs_and_a_longer_one_is_refused_opt_3() {
    let (db, client) = setup().await;
    insert_dead(&client, &db, 1, 3, "400 days").await;
    insert_inbox(&client, &db, 3, "400 days").await;
    let longest = Retention::After(relayer_core::options::MAX_RETENTION);
    let options = CleanupOptions::builder().dead_retention(longest).inbox_retention(longest).build().unwrap();
    let (pool, _) = pool(&db, "cleaner", 1).await;
    let cleanup = cleaner(pool, &db, options.clone(), lease("a"));
    let report = cleanup.run_once(&mut session(&cleanup).await).await.unwrap();
    assert_eq!((report.dead_deleted, report.inbox_deleted), (0, 0));

    let longer = Retention::After(relayer_core::options::MAX_RETENTION + Duration::from_secs(1));
    let error = options.to_builder().inbox_retention(longer).build().unwrap_err();
    assert_eq!(error.field(), "cleanup.inbox_retention");
    let error = toml::from_str::<CleanupOptions>("dead_retention = \"1000000d\"").unwrap_err().to_string();
    assert!(error.contains("cleanup.dead_retention: 1000000d is longer than the maximum"), "{error}");
}
