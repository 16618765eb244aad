//! `relayer doctor`'s checks against a real PostgreSQL (OBS-6): each test creates the
//! condition — a held snapshot, a replication slot, a prepared transaction, a parked lane,
//! dead letters, a stalled worker, instances that disagree, rows of an unserved transport,
//! a table without the recommended autovacuum settings — and checks the finding names it.
//!
//! Server-wide objects (sessions, slots, prepared transactions) are made on a throwaway
//! cluster of the test's own, so a failed test cannot leave them on the shared server, and
//! another test's sessions cannot crowd them out of the report; each is also removed by the
//! test itself. Every other test works in its own schema on the shared server.
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

use std::time::Duration;

use relayer_core::consumer::RejectionReason;
use relayer_core::{NewMessage, Uuid};
use relayer_postgres::doctor::{DoctorOptions, Finding, Report, Severity, diagnose};
use relayer_postgres::{
    Connector, ConsumeStatements, DeadLetter, HeadFailure, InstanceStatements, LaneStatements,
    LeaseStatements, OutboxWriter, QueueWriter, migrate,
};
use relayer_test_support::{OwnedCluster, PoolMode, TestDb, eventually, pgbouncer};

async fn setup(db: &TestDb) -> tokio_postgres::Client {
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    client
}

async fn doctor(db: &TestDb, options: &DoctorOptions) -> Report {
    diagnose(&Connector::from(db.config()), db.namespace(), options).await.unwrap()
}

/// Options under which anything held, parked or dead at all is past every threshold.
fn impatient() -> DoctorOptions {
    let mut options = DoctorOptions::default();
    options.horizon_warning = Duration::ZERO;
    options.horizon_critical = Duration::ZERO;
    options.stuck_after = Duration::ZERO;
    options
}

/// The one finding of `code` about `subject`, or a panic listing the report.
fn finding<'r>(report: &'r Report, code: &str, subject: &str) -> &'r Finding {
    report
        .with_code(code)
        .find(|f| f.subject == subject)
        .unwrap_or_else(|| panic!("no {code} finding about {subject:?} in {report:#?}"))
}

/// A second session, named `application`, on `db`'s database.
async fn session(db: &TestDb, application: &str) -> tokio_postgres::Client {
    let mut config = db.config();
    config.application_name(application);
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn pid(client: &tokio_postgres::Client) -> i32 {
    client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn the_session_holding_a_snapshot_is_named_with_its_pid_application_and_state_obs_6() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let _client = setup(&db).await;
    let holder = session(&db, "nightly-report").await;
    holder
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM {}",
            db.namespace().table("queue")
        ))
        .await
        .unwrap();
    let holder_pid = pid(&holder).await;

    let report = doctor(&db, &impatient()).await;
    let held = finding(&report, "xmin.session", &format!("pid {holder_pid}"));
    assert_eq!(held.severity, Severity::Critical, "{held:?}");
    assert!(held.message.contains("\"nightly-report\""), "{}", held.message);
    assert!(held.message.contains("idle in transaction"), "{}", held.message);
    assert!(held.advice.contains(&format!("pg_terminate_backend({holder_pid})")), "{}", held.advice);
    assert_eq!(report.severity(), Severity::Critical);

    // Within the default thresholds the holder is still shown, as the oldest snapshot.
    let report = doctor(&db, &DoctorOptions::default()).await;
    let shown = finding(&report, "xmin.session", &format!("pid {holder_pid}"));
    assert_eq!(shown.severity, Severity::Ok, "{shown:?}");

    holder.batch_execute("ROLLBACK").await.unwrap();
    let report = doctor(&db, &impatient()).await;
    assert!(
        report.with_code("xmin.session").all(|f| f.subject != format!("pid {holder_pid}")),
        "{report:#?}"
    );
}

#[tokio::test]
async fn a_replication_slot_is_named_with_what_it_holds_obs_6() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let client = setup(&db).await;
    let slot = format!("doctor_{}", Uuid::new_v4().simple());
    // A physical slot reserving WAL now: with wal_level=replica (the default), no standby.
    client.execute("SELECT pg_create_physical_replication_slot($1, true)", &[&slot]).await.unwrap();

    let report = doctor(&db, &DoctorOptions::default()).await;
    client.execute("SELECT pg_drop_replication_slot($1)", &[&slot]).await.unwrap();
    let found = finding(&report, "xmin.slot", &format!("slot {slot}"));
    assert_eq!(found.severity, Severity::Warning, "{found:?}");
    assert!(found.message.contains("physical slot, inactive"), "{}", found.message);
    assert!(found.message.contains("of WAL"), "{}", found.message);
    assert!(found.advice.contains(&format!("pg_drop_replication_slot('{slot}')")), "{}", found.advice);

    let report = doctor(&db, &DoctorOptions::default()).await;
    assert_eq!(finding(&report, "xmin.slot", "server").severity, Severity::Ok);
}

#[tokio::test]
async fn a_prepared_transaction_is_named_with_its_gid_and_how_to_end_it_obs_6() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let client = setup(&db).await;
    let allowed: String = client.query_one("SHOW max_prepared_transactions", &[]).await.unwrap().get(0);
    if allowed == "0" {
        eprintln!(
            "SKIPPED a_prepared_transaction_is_named_with_its_gid_and_how_to_end_it_obs_6: the cluster allows no \
             prepared transactions (max_prepared_transactions = 0)"
        );
        return;
    }
    let gid = format!("doctor-{}", Uuid::new_v4().simple());
    let preparer = session(&db, "two-phase").await;
    preparer
        .batch_execute(&format!(
            "BEGIN; INSERT INTO {} (actor, action, subject) VALUES ('test', 'test', 'doctor'); \
             PREPARE TRANSACTION '{gid}'",
            db.namespace().table("audit")
        ))
        .await
        .unwrap();

    let report = doctor(&db, &DoctorOptions::default()).await;
    client.batch_execute(&format!("ROLLBACK PREPARED '{gid}'")).await.unwrap();
    let found = finding(&report, "xmin.prepared", &format!("prepared transaction {gid:?}"));
    assert_eq!(found.severity, Severity::Warning, "a prepared transaction is never ok: {found:?}");
    assert!(found.advice.contains(&format!("ROLLBACK PREPARED '{gid}'")), "{}", found.advice);

    let report = doctor(&db, &DoctorOptions::default()).await;
    assert_eq!(finding(&report, "xmin.prepared", "server").severity, Severity::Ok);
}

#[tokio::test]
async fn a_parked_lane_is_a_warning_and_critical_once_stuck_lan_2_obs_6() {
    let db = TestDb::new().await;
    let client = setup(&db).await;
    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    let batch = [
        NewMessage::new("queue", "orders", b"head".to_vec()).lane("account-7"),
        NewMessage::new("queue", "orders", b"next".to_vec()).lane("account-7"),
    ];
    let written = writer.enqueue(&client, &batch).await.unwrap();
    let lanes = LaneStatements::new(db.namespace());
    let token = Uuid::new_v4();
    let claim = Duration::from_secs(30);
    assert_eq!(lanes.claim(&client, token, claim, 10, "", 40, &[]).await.unwrap().lanes, ["account-7"]);
    let park = HeadFailure::Park { error: "poison: the broker refused it" };
    assert!(lanes.fail_head(&client, "account-7", token, written[0].seq, park).await.unwrap());

    let report = doctor(&db, &DoctorOptions::default()).await;
    let parked = finding(&report, "lanes.parked", "lane account-7");
    assert_eq!(parked.severity, Severity::Warning, "{parked:?}");
    assert!(parked.message.contains(&format!("head seq {}", written[0].seq)), "{}", parked.message);
    assert!(parked.message.contains("2 rows waiting"), "{}", parked.message);
    assert!(parked.message.contains("poison: the broker refused it"), "{}", parked.message);
    assert!(parked.advice.contains("relayer lanes release account-7"), "{}", parked.advice);

    let report = doctor(&db, &impatient()).await;
    assert_eq!(finding(&report, "lanes.parked", "lane account-7").severity, Severity::Critical);
}

#[tokio::test]
async fn dead_letters_nobody_acted_on_are_stuck_dlp_5_obs_6() {
    let db = TestDb::new().await;
    let client = setup(&db).await;
    let writer = QueueWriter::new(db.namespace(), "queue");
    writer.enqueue(&client, &[NewMessage::new("queue", "orders", b"order".to_vec())]).await.unwrap();
    let consume = ConsumeStatements::new(db.namespace());
    let received = consume.receive(&client, "orders", 10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(received.len(), 1);
    let dead = DeadLetter {
        receipt: received[0].receipt,
        queue: "orders.dead_letters".to_owned(),
        reason: RejectionReason::Rejected,
        message: "rejected by the test".to_owned(),
        handled: true,
    };
    assert_eq!(consume.dead_letter(&client, &[dead]).await.unwrap().len(), 1);

    let report = doctor(&db, &DoctorOptions::default()).await;
    let young = finding(&report, "dead_letters.stuck", "queue");
    assert_eq!(young.severity, Severity::Ok, "a fresh dead letter is not stuck: {young:?}");
    assert!(young.message.starts_with("1 dead letters"), "{}", young.message);

    let report = doctor(&db, &impatient()).await;
    let stuck = finding(&report, "dead_letters.stuck", "dead-letter queue orders.dead_letters (from orders)");
    assert_eq!(stuck.severity, Severity::Warning, "{stuck:?}");
    assert!(stuck.message.starts_with("1 dead letters of \"orders\""), "{}", stuck.message);
    assert!(
        stuck.advice.contains("relayer dead-letters redrive --queue orders.dead_letters --topic orders"),
        "{}",
        stuck.advice
    );
}

#[tokio::test]
async fn a_worker_whose_lease_was_not_renewed_for_long_is_stalled_obs_2_obs_6() {
    let db = TestDb::new().await;
    let mut client = setup(&db).await;
    let leases = LeaseStatements::new(db.namespace());
    let tx = client.transaction().await.unwrap();
    let lease = leases.acquire(&tx, "sweeper", "instance-a", Duration::from_secs(30)).await.unwrap().unwrap();
    leases.renew(&tx, &lease, Duration::from_secs(30)).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    let report = doctor(&db, &DoctorOptions::default()).await;
    assert_eq!(finding(&report, "workers.stalled", "workers").severity, Severity::Ok, "{report:#?}");

    // An hour without a renewal: a state no component produces on demand, written by hand.
    client
        .execute(
            &format!(
                "UPDATE {} SET renewed_at = now() - interval '1 hour', expires_at = now() - interval '59 minutes'",
                db.namespace().table("leases")
            ),
            &[],
        )
        .await
        .unwrap();
    let report = doctor(&db, &DoctorOptions::default()).await;
    let stalled = finding(&report, "workers.stalled", "worker sweeper");
    assert_eq!(stalled.severity, Severity::Critical, "{stalled:?}");
    assert!(stalled.message.starts_with("its lease was last renewed 1h"), "{}", stalled.message);
}

#[tokio::test]
async fn instances_with_different_settings_are_a_disagreement_naming_the_setting_opt_4_obs_6() {
    let db = TestDb::new().await;
    let client = setup(&db).await;
    let instances = InstanceStatements::new(db.namespace());
    let settings = |interval: &str| serde_json::json!({ "sweep_interval": interval, "batch_size": "100" });
    instances.record(&client, "sweeper", "host-a", "print-5s", &settings("5s"), &[]).await.unwrap();
    let report = doctor(&db, &DoctorOptions::default()).await;
    assert_eq!(finding(&report, "settings.disagreement", "instances").severity, Severity::Ok);

    instances.record(&client, "sweeper", "host-b", "print-10s", &settings("10s"), &[]).await.unwrap();
    let report = doctor(&db, &DoctorOptions::default()).await;
    let differ = finding(&report, "settings.disagreement", "worker sweeper");
    assert_eq!(differ.severity, Severity::Warning, "{differ:?}");
    assert!(differ.message.contains("(sweep_interval)"), "{}", differ.message);
    assert!(differ.message.contains("print-5s: host-a") && differ.message.contains("print-10s: host-b"));
}

#[tokio::test]
async fn rows_of_a_transport_no_live_instance_registers_are_named_trn_6_obs_6() {
    let db = TestDb::new().await;
    let client = setup(&db).await;
    let writer = OutboxWriter::new(db.namespace(), ["queue", "nats"]).without_notify();
    let rows: Vec<NewMessage> = (0..3)
        .map(|n| NewMessage::new("nats", "orders.created", format!("{n}").into_bytes()))
        .chain([NewMessage::new("queue", "orders", b"served".to_vec())])
        .collect();
    writer.enqueue(&client, &rows).await.unwrap();
    let instances = InstanceStatements::new(db.namespace());
    let settings = serde_json::json!({ "poll_interval": "1s" });
    instances.record(&client, "dispatcher", "sidecar-1", "print", &settings, &["queue"]).await.unwrap();

    let report = doctor(&db, &DoctorOptions::default()).await;
    let waiting = finding(&report, "transport.unserved", "transport nats");
    assert_eq!(waiting.severity, Severity::Warning, "{waiting:?}");
    assert!(waiting.message.starts_with("3 outbox rows of transport \"nats\""), "{}", waiting.message);
    assert_eq!(
        report.with_code("transport.unserved").count(),
        1,
        "the queue transport is served: {report:#?}"
    );
    let report = doctor(&db, &impatient()).await;
    assert_eq!(finding(&report, "transport.unserved", "transport nats").severity, Severity::Critical);

    instances.record(&client, "dispatcher", "service-1", "print", &settings, &["nats"]).await.unwrap();
    let report = doctor(&db, &DoctorOptions::default()).await;
    assert_eq!(finding(&report, "transport.unserved", "outbox").severity, Severity::Ok, "{report:#?}");
}

#[tokio::test]
async fn the_churning_tables_are_checked_against_step_5s_autovacuum_settings_obs_6() {
    let db = TestDb::new().await;
    let client = setup(&db).await;
    let (queue, outbox) = (db.namespace().table("queue"), db.namespace().table("outbox"));
    let report = doctor(&db, &DoctorOptions::default()).await;
    for table in ["relayer_queue", "relayer_outbox"] {
        let settings = finding(&report, "vacuum.settings", &format!("table {table}"));
        assert_eq!(settings.severity, Severity::Ok, "{settings:?}");
        assert!(settings.message.contains("once 1000 + 0 × live rows are dead"), "{}", settings.message);
    }

    client
        .batch_execute(&format!(
            "ALTER TABLE {queue} RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold); \
             ALTER TABLE {outbox} SET (autovacuum_enabled = false)"
        ))
        .await
        .unwrap();
    let report = doctor(&db, &DoctorOptions::default()).await;
    let lax = finding(&report, "vacuum.settings", "table relayer_queue");
    assert_eq!(lax.severity, Severity::Warning, "{lax:?}");
    assert!(lax.advice.contains("relayer schema apply"), "{}", lax.advice);
    assert!(lax.advice.contains("autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000"));
    let disabled = report
        .with_code("vacuum.settings")
        .find(|f| f.subject == "table relayer_outbox" && f.severity == Severity::Critical)
        .unwrap_or_else(|| panic!("autovacuum_enabled = false not reported: {report:#?}"));
    assert!(disabled.advice.contains("RESET (autovacuum_enabled)"), "{}", disabled.advice);
}

#[tokio::test]
async fn dead_tuples_that_no_vacuum_removed_are_a_warning_obs_6() {
    let db = TestDb::new().await;
    let client = setup(&db).await;
    let writer = QueueWriter::new(db.namespace(), "queue");
    let consume = ConsumeStatements::new(db.namespace());
    // No autovacuum may come between (a server with it on): the table's own switch.
    let queue = db.namespace().table("queue");
    client.batch_execute(&format!("ALTER TABLE {queue} SET (autovacuum_enabled = false)")).await.unwrap();
    // 20,000 messages written, received and acked: two dead versions each, in a table no
    // vacuum has visited.
    for _ in 0..4 {
        let batch: Vec<NewMessage> =
            (0..5_000).map(|n| NewMessage::new("queue", "orders", format!("{n}").into_bytes())).collect();
        writer.enqueue(&client, &batch).await.unwrap();
        let received = consume.receive(&client, "orders", 5_000, Duration::from_secs(30)).await.unwrap();
        let receipts: Vec<_> = received.iter().map(|r| r.receipt).collect();
        assert_eq!(consume.ack(&client, &receipts).await.unwrap().len(), 5_000);
    }
    // The statistics arrive when the writing session reports them (within a second or so).
    let subject = "table relayer_queue".to_owned();
    eventually("the doctor reports the queue's dead tuples", || async {
        doctor(&db, &DoctorOptions::default())
            .await
            .with_code("vacuum.dead_tuples")
            .any(|f| f.subject == subject)
    })
    .await;
    let report = doctor(&db, &DoctorOptions::default()).await;
    let dead = finding(&report, "vacuum.dead_tuples", "table relayer_queue");
    assert_eq!(dead.severity, Severity::Warning, "{dead:?}");
    assert!(dead.message.contains("never vacuumed"), "{}", dead.message);
    assert!(dead.advice.contains("dead but not yet removable"), "{}", dead.advice);

    client.batch_execute(&format!("VACUUM {queue}")).await.unwrap();
    eventually("after a vacuum, the queue's dead tuples are no longer reported", || async {
        !doctor(&db, &DoctorOptions::default())
            .await
            .with_code("vacuum.dead_tuples")
            .any(|f| f.subject == subject)
    })
    .await;
}

#[tokio::test]
async fn every_check_reports_even_when_it_finds_nothing_obs_6() {
    let db = TestDb::new().await;
    let _client = setup(&db).await;
    let report = doctor(&db, &DoctorOptions::default()).await;
    for code in [
        "schema.version",
        "xmin.session",
        "xmin.slot",
        "xmin.prepared",
        "xmin.standby",
        "vacuum.autovacuum",
        "vacuum.settings",
        "notify.queue",
        "pooler.transaction_mode",
        "transport.unserved",
        "lanes.parked",
        "dead_letters.stuck",
        "dead.outbox",
        "workers.stalled",
        "settings.disagreement",
    ] {
        assert!(report.with_code(code).next().is_some(), "no {code} finding: {report:#?}");
    }
    assert_eq!(
        finding(&report, "schema.version", &format!("namespace {}", db.namespace())).severity,
        Severity::Ok
    );
    assert_eq!(
        finding(&report, "pooler.transaction_mode", &Connector::from(db.config()).target()).severity,
        Severity::Ok
    );
    let json = report.to_json();
    assert_eq!(json["namespace"], db.namespace().to_string());
    assert_eq!(json["exit_code"], report.severity().exit_code());
    for f in json["findings"].as_array().unwrap() {
        for key in ["severity", "code", "subject", "message", "advice"] {
            assert!(f[key].is_string(), "{key} of {f}");
        }
    }
}

#[tokio::test]
async fn a_namespace_without_schema_is_critical_and_the_server_checks_still_run_obs_6() {
    let db = TestDb::new().await;
    let report = doctor(&db, &DoctorOptions::default()).await;
    let missing = finding(&report, "schema.version", &format!("namespace {}", db.namespace()));
    assert_eq!(missing.severity, Severity::Critical, "{missing:?}");
    assert!(missing.advice.contains("relayer schema apply"), "{}", missing.advice);
    assert!(report.with_code("xmin.session").next().is_some());
    assert!(report.with_code("notify.queue").next().is_some());
    assert!(report.with_code("lanes.parked").next().is_none(), "no namespace to read: {report:#?}");
}

#[tokio::test]
async fn a_transaction_mode_pooler_in_front_is_critical_and_a_session_pool_is_not_ldr_6_obs_6() {
    let db = TestDb::new().await;
    let _client = setup(&db).await;
    let test = "a_transaction_mode_pooler_in_front_is_critical_and_a_session_pool_is_not_ldr_6_obs_6";
    let Some(transaction) = pgbouncer(&db, PoolMode::Transaction, test).await else { return };
    let Some(session) = pgbouncer(&db, PoolMode::Session, test).await else { return };
    let connector = Connector::from(transaction);
    let report = diagnose(&connector, db.namespace(), &DoctorOptions::default()).await.unwrap();
    let pooled = finding(&report, "pooler.transaction_mode", &connector.target());
    assert_eq!(pooled.severity, Severity::Critical, "{pooled:?}");
    assert!(pooled.message.contains("transaction-mode pooler"), "{}", pooled.message);
    let connector = Connector::from(session);
    let report = diagnose(&connector, db.namespace(), &DoctorOptions::default()).await.unwrap();
    assert_eq!(finding(&report, "pooler.transaction_mode", &connector.target()).severity, Severity::Ok);
}
