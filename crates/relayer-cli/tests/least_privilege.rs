//! Least privilege against a real PostgreSQL: the migration role (the test's own, which
//! applied the schema) owns it; a runtime role of the test's own, given only the GRANTs
//! `relayer schema print --grants ROLE` prints, runs every worker — dispatcher, sweeper,
//! cleanup, a consumer and the dead-letter policies — and the binary's read commands, and
//! cannot change the schema.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{relayer, setup};
use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::{
    CleanupOptions, ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule,
    DispatcherOptions, NewMessage, Relayer, SweeperOptions,
};
use relayer_test_support::{TestDb, Warnings, eventually, within};
use tokio_postgres::error::SqlState;

/// A login role of the test's own (random name), dropped with what was granted to it.
struct RuntimeRole {
    name: String,
    admin: tokio_postgres::Config,
}

impl RuntimeRole {
    async fn create(db: &TestDb) -> RuntimeRole {
        let name = format!("relayer_rt_{}", &relayer::core::Uuid::new_v4().simple().to_string()[..12]);
        db.connect().await.batch_execute(&format!("CREATE ROLE \"{name}\" LOGIN")).await.unwrap();
        RuntimeRole { name, admin: db.config() }
    }

    /// `db`'s connection settings, logging in as this role.
    fn config(&self, db: &TestDb) -> tokio_postgres::Config {
        let mut config = db.config();
        config.user(&self.name);
        config
    }

    /// The same as a `key=value` string for the binary.
    fn url(&self, db: &TestDb) -> String {
        let config = db.config();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        };
        format!(
            "host={host} port={} user={} dbname={} application_name={}",
            config.get_ports()[0],
            self.name,
            config.get_dbname().unwrap(),
            db.schema()
        )
    }
}

impl Drop for RuntimeRole {
    fn drop(&mut self) {
        let (name, admin) = (self.name.clone(), self.admin.clone());
        // Dropped from a thread of its own: Drop cannot await on the test's runtime.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let (client, connection) = admin.connect(tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                client.batch_execute(&format!("DROP OWNED BY \"{name}\"; DROP ROLE \"{name}\"")).await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("least_privilege: role {} was left behind: {dropped:?}", self.name);
        }
    }
}

/// Rejects the first message it sees, acknowledges everything after: the rejected one is
/// dead-lettered by the consumer, redriven by the policy, and acknowledged the second time.
#[derive(Default)]
struct RejectOnce {
    rejected: AtomicBool,
    acked: std::sync::Mutex<Vec<Vec<u8>>>,
}

#[relayer::core::async_trait]
impl Handler for RejectOnce {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        if !self.rejected.swap(true, Ordering::SeqCst) {
            return Outcome::Reject { reason: "not yet".to_owned() };
        }
        self.acked.lock().unwrap().push(message.body.clone());
        Outcome::Ack
    }
}

/// NS-3 and the runtime role: under the printed GRANTs alone, every worker and the read
/// commands work; DDL fails for lack of privilege. A bad role name is refused naming it.
#[tokio::test]
async fn the_runtime_role_runs_every_worker_and_the_read_commands_but_no_ddl_ns_3() {
    let warnings = Warnings::default();
    let _capture = warnings.capture();
    let (db, admin) = setup().await;
    let role = RuntimeRole::create(&db).await;

    let refused = relayer(&db, &["schema", "print", "--grants", "app;drop"]).await;
    assert!(!refused.success);
    assert!(refused.stderr.contains("--grants: invalid role \"app;drop\""), "{}", refused.stderr);
    let grants = relayer(&db, &["schema", "print", "--grants", &role.name]).await;
    admin.batch_execute(grants.ok()).await.unwrap();

    // Every worker, connected as the runtime role.
    let ms = Duration::from_millis;
    let handler = Arc::new(RejectOnce::default());
    let subscription =
        Subscription::new("orders", ConsumerOptions::builder().poll_interval(ms(100)).build().unwrap())
            .unwrap();
    let policies = DeadLetterPolicies::new([DeadLetterRule::queue(
        "orders",
        "orders.dead_letters",
        DeadLetterPolicy::redrive(Duration::ZERO, Duration::from_secs(86_400)).unwrap(),
    )])
    .unwrap();
    let host = Relayer::builder(role.config(&db), db.namespace().clone())
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(ms(100)).build().unwrap())
        .sweeper(SweeperOptions::builder().sweep_interval(ms(100)).build().unwrap())
        .cleanup(CleanupOptions::builder().cleanup_interval(ms(100)).build().unwrap())
        .consumer(subscription, Arc::clone(&handler) as Arc<dyn Handler>)
        .dead_letters(policies, DeadLetterOptions::builder().interval(ms(100)).build().unwrap())
        .start()
        .await
        .unwrap();
    let (mut service, connection) = role.config(&db).connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let tx = service.transaction().await.unwrap();
    let messages: Vec<NewMessage> =
        (0..3).map(|n| NewMessage::new("queue", "orders", format!("order {n}").into_bytes())).collect();
    host.writer().enqueue(&tx, &messages).await.unwrap();
    tx.commit().await.unwrap();
    eventually("every message is handled, the rejected one after its redrive", || async {
        handler.acked.lock().unwrap().len() == 3
    })
    .await;
    let leases = format!("SELECT job FROM {} WHERE owner = $1 ORDER BY job", db.namespace().table("leases"));
    eventually("the sweeper and cleanup lead", || async {
        admin.query(&leases, &[&host.lease_owner()]).await.unwrap().len() == 2
    })
    .await;
    within(host.shutdown()).await;
    let text = warnings.text();
    assert!(!text.contains("permission denied"), "{text}");

    // The binary's read commands, as the runtime role.
    let url = role.url(&db);
    for args in [
        &["status", "--json"][..],
        &["schema", "status", "--json"],
        &["dead-letters", "list"],
        &["dead-letters", "list", "--outbox"],
        &["lanes", "list", "--all"],
    ] {
        let ran = common::relayer_with_url(&url, &db, args).await;
        let stdout = ran.ok();
        assert!(!ran.stderr.contains("permission denied"), "{args:?}: {}", ran.stderr);
        assert!(!stdout.is_empty(), "{args:?}");
    }
    let schema_status = common::relayer_with_url(&url, &db, &["schema", "status", "--json"]).await.json();
    assert_eq!(schema_status["state"], "current");

    // No DDL: the runtime role cannot create, alter, drop or truncate.
    let (runtime, connection) = role.config(&db).connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let ns = db.namespace();
    for ddl in [
        format!("CREATE TABLE {} (id int)", ns.table("extra")),
        format!("ALTER TABLE {} ADD COLUMN extra int", ns.table("outbox")),
        format!("CREATE INDEX ON {} (created_at)", ns.table("queue")),
        format!("DROP TABLE {}", ns.table("inbox")),
        format!("TRUNCATE {}", ns.table("audit")),
        format!("DELETE FROM {}", ns.table("audit")),
        format!("UPDATE {} SET version = 99", ns.table("schema_version")),
    ] {
        let error = runtime.batch_execute(&ddl).await.unwrap_err();
        assert_eq!(error.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{ddl}: {error}");
    }
    drop(runtime);
    drop(service);
}
