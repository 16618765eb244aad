//! The host against a real PostgreSQL (LIF-1, LIF-4, OPT-4, OPT-5).
//!
//! Messages enter through the host's own writer and leave through relayer's queue
//! transport; nothing is written by hand.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer::{
    CleanupOptions, DeadLetterOptions, DispatcherOptions, NewMessage, Relayer, RelayerBuilder, Retention,
    StartError, SweeperOptions,
};
use relayer_test_support::{TestDb, Warnings, eventually, within};
use tokio_postgres::Client;

async fn migrated() -> (TestDb, Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

fn builder(db: &TestDb) -> RelayerBuilder {
    Relayer::builder(db.config(), db.namespace().clone())
}

/// Every worker, on short intervals so their first passes come quickly.
fn every_worker(builder: RelayerBuilder) -> RelayerBuilder {
    builder
        .dispatcher(DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap())
        .sweeper(SweeperOptions::builder().sweep_interval(Duration::from_millis(100)).build().unwrap())
        .cleanup(CleanupOptions::builder().cleanup_interval(Duration::from_millis(100)).build().unwrap())
}

async fn count(client: &Client, db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table(table));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

async fn enqueue(client: &mut Client, host: &relayer::RelayerHost, message: NewMessage) {
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[message]).await.unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn start_fails_on_a_missing_schema_and_starts_nothing_opt_5() {
    let db = TestDb::new().await; // no migrate
    let client = db.connect().await;
    let error = every_worker(builder(&db).queue_transport()).start().await.unwrap_err();
    assert!(matches!(error, StartError::Schema(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains(db.schema()) && text.contains("relayer schema not found"), "{text}");
    // Workers never create tables (NS-3): nothing exists that a started worker would write.
    for table in ["leases", "instances"] {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&db.namespace().table(table)])
            .await
            .unwrap()
            .get(0);
        assert!(!exists, "{table} was created");
    }
}

#[tokio::test]
async fn start_fails_without_a_transport_and_writes_nothing_opt_5() {
    let (db, client) = migrated().await;
    let error = every_worker(builder(&db)).start().await.unwrap_err();
    assert!(matches!(error, StartError::NoTransport { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "relayer setup: the dispatcher and recovery sweeper needs a transport but none is registered; \
         add one with `.transport(…)`"
    );
    assert_eq!((count(&client, &db, "leases").await, count(&client, &db, "instances").await), (0, 0));
}

/// Leadership cannot be misplaced any more (each led worker takes its own, see the
/// `Led` docs); a pool size still can be, and is refused like a duplicate transport.
#[tokio::test]
async fn start_refuses_duplicate_transports_and_misplaced_pool_sizes_opt_5() {
    let (db, client) = migrated().await;
    let pool = relayer::postgres::connect_pool(db.config(), 1).await.unwrap();
    let queue = std::sync::Arc::new(relayer::queue::PgQueueTransport::new(pool, db.namespace()));
    let error = builder(&db).queue_transport().transport(queue).start().await.unwrap_err();
    assert!(error.to_string().contains("two transports are named \"queue\""), "{error}");

    let error = builder(&db)
        .queue_transport()
        .cleanup(CleanupOptions::default())
        .dispatcher_pool_size(4)
        .start()
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "relayer setup: dispatcher_pool_size: set, but this host runs no dispatcher"
    );
    assert_eq!((count(&client, &db, "leases").await, count(&client, &db, "instances").await), (0, 0));
}

#[tokio::test]
async fn a_host_with_a_dispatcher_and_the_queue_transport_delivers_an_enqueued_message_lif_1() {
    let (db, mut client) = migrated().await;
    let options = DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap();
    let host = builder(&db).queue_transport().dispatcher(options.clone()).start().await.unwrap();
    assert_eq!(host.options().dispatcher(), Some(&options));
    assert!(host.dispatcher().is_some());

    let message = NewMessage::new("queue", "orders", b"{\"order\":1}".to_vec());
    let id = *message.message_id().as_uuid();
    enqueue(&mut client, &host, message).await;
    let queue = db.namespace().table("queue");
    within(async {
        loop {
            let sql = format!("SELECT count(*) FROM {queue} WHERE message_id = $1 AND queue = 'orders'");
            let delivered: i64 = client.query_one(&sql, &[&id]).await.unwrap().get(0);
            if delivered == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    host.shutdown().await;
    assert_eq!(count(&client, &db, "outbox").await, 0);
}

/// LIF-2: a sweeper pass sends while it holds a connection of the host's pool; the queue
/// transport must not need a second one from that pool, or a pool of one waits forever.
#[tokio::test]
async fn a_sweeper_with_the_queue_transport_recovers_on_a_pool_of_one_lif_2() {
    let (db, mut client) = migrated().await;
    let sweeper = SweeperOptions::builder()
        .sweep_interval(Duration::from_millis(100))
        .recovery_delay(Duration::ZERO)
        .build()
        .unwrap();
    let host = builder(&db)
        .queue_transport()
        .sweeper(sweeper)
        .maintenance_pool_size(1)
        .queue_pool_size(1)
        .start()
        .await
        .unwrap();
    for n in 0..3 {
        enqueue(&mut client, &host, NewMessage::new("queue", "orders", vec![n])).await;
    }
    let queue = db.namespace().table("queue");
    within(async {
        while count(&client, &db, "outbox").await > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let delivered: i64 =
        client.query_one(&format!("SELECT count(*) FROM {queue}"), &[]).await.unwrap().get(0);
    assert_eq!(delivered, 3);
    host.shutdown().await;
}

/// Behind a transaction-mode pooler the host's pools send every statement unnamed
/// (`StatementMode::Unnamed`); dispatch and recovery work the same.
#[tokio::test]
async fn a_host_with_unnamed_statements_dispatches_and_recovers() {
    let (db, mut client) = migrated().await;
    let sweeper = SweeperOptions::builder()
        .sweep_interval(Duration::from_millis(100))
        .recovery_delay(Duration::ZERO)
        .build()
        .unwrap();
    let host = builder(&db)
        .queue_transport()
        .dispatcher(DispatcherOptions::default())
        .sweeper(sweeper)
        .statement_mode(relayer::postgres::StatementMode::Unnamed)
        .start()
        .await
        .unwrap();
    for n in 0..5 {
        enqueue(&mut client, &host, NewMessage::new("queue", "orders", vec![n])).await;
    }
    within(async {
        while count(&client, &db, "outbox").await > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(count(&client, &db, "queue").await, 5);
    host.shutdown().await;
}

#[tokio::test]
async fn shutdown_twice_is_harmless_and_releases_the_leases_lif_1() {
    let (db, client) = migrated().await;
    let host = every_worker(builder(&db).queue_transport()).instance_id("host-a").start().await.unwrap();
    let leases = db.namespace().table("leases");
    // Both led workers have taken their lease once their first pass ran.
    within(async {
        loop {
            let sql = format!("SELECT count(*) FROM {leases} WHERE owner = $1 AND expires_at > now()");
            let live: i64 = client.query_one(&sql, &[&host.lease_owner()]).await.unwrap().get(0);
            if live == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(count(&client, &db, "instances").await, 3, "dispatcher, sweeper and cleanup recorded");

    within(host.shutdown()).await;
    within(host.shutdown()).await;

    let sql = format!("SELECT job, expires_at <= now() FROM {leases} ORDER BY job");
    let released: Vec<(String, bool)> =
        client.query(&sql, &[]).await.unwrap().iter().map(|row| (row.get(0), row.get(1))).collect();
    assert_eq!(released, [("cleanup".to_owned(), true), ("sweeper".to_owned(), true)]);
    assert_eq!(count(&client, &db, "instances").await, 0, "a stopped instance leaves no fingerprint");
}

/// LDR-2: two hosts given the same instance id (a copied configuration) are two lease
/// owners. While the first leads, the second never takes its lease: over many passes of
/// both, the row keeps the first's owner and term. Released at the first's shutdown, the
/// lease goes to the second as a new owner, with the next term.
#[tokio::test]
async fn two_hosts_given_the_same_instance_id_never_both_lead_ldr_2() {
    let (db, client) = migrated().await;
    let options = || {
        CleanupOptions::builder()
            .cleanup_interval(Duration::from_millis(50))
            .lease_duration(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    let sql = format!(
        "SELECT owner, term, renewed_at FROM {} WHERE job = 'cleanup'",
        db.namespace().table("leases")
    );
    let lease = || async {
        client.query_opt(&sql, &[]).await.unwrap().map(|row| {
            (row.get::<_, String>(0), row.get::<_, i64>(1), row.get::<_, std::time::SystemTime>(2))
        })
    };
    let first = builder(&db).cleanup(options()).instance_id("twin").start().await.unwrap();
    eventually("the first host leads", || async {
        lease().await.is_some_and(|(owner, ..)| owner == first.lease_owner())
    })
    .await;
    let second = builder(&db).cleanup(options()).instance_id("twin").start().await.unwrap();
    assert_eq!((first.instance_id(), second.instance_id()), ("twin", "twin"));
    assert_ne!(first.lease_owner(), second.lease_owner());
    assert!(second.lease_owner().starts_with("twin#"), "{}", second.lease_owner());

    // Both run passes every 50ms; the first renews its lease at each of its own.
    let renewals = std::sync::Mutex::new(std::collections::HashSet::new());
    eventually("the first host renews its lease five times while the second runs", || async {
        let (owner, term, renewed_at) = lease().await.unwrap();
        assert_eq!((owner.as_str(), term), (first.lease_owner(), 1), "the second host took the lease");
        let mut seen = renewals.lock().unwrap();
        seen.insert(renewed_at);
        seen.len() >= 5
    })
    .await;

    within(first.shutdown()).await;
    eventually("the second host takes the released lease", || async {
        lease().await.is_some_and(|(owner, term, _)| owner == second.lease_owner() && term == 2)
    })
    .await;
    within(second.shutdown()).await;
}

#[tokio::test]
async fn two_hosts_with_different_cleanup_settings_report_a_disagreement_opt_4() {
    let (db, _client) = migrated().await;
    let first = builder(&db).cleanup(CleanupOptions::default()).instance_id("host-a").start().await.unwrap();
    let other_retention = Retention::After(Duration::from_secs(86_400));
    let second = builder(&db)
        .cleanup(CleanupOptions::builder().dead_retention(other_retention).build().unwrap())
        .instance_id("host-b")
        .start()
        .await
        .unwrap();

    let disagreements = second.disagreements();
    assert_eq!(disagreements.len(), 1, "{disagreements:?}");
    let disagreement = &disagreements[0];
    assert_eq!(disagreement.worker, "cleanup");
    assert_eq!(
        (disagreement.this_instance.as_str(), disagreement.other_instance.as_str()),
        ("host-b", "host-a")
    );
    let differing: Vec<_> = disagreement
        .differences
        .iter()
        .map(|d| (d.setting.as_str(), d.ours.as_deref(), d.theirs.as_deref()))
        .collect();
    assert_eq!(differing, [("dead_retention", Some("1d"), Some("30d"))]);
    assert!(first.disagreements().is_empty(), "the first host compared before the second existed");

    // Hosts that agree report nothing.
    let third = builder(&db).cleanup(CleanupOptions::default()).instance_id("host-c").start().await.unwrap();
    let reported: Vec<_> = third.disagreements().into_iter().map(|d| d.other_instance).collect();
    assert_eq!(reported, ["host-b"]);

    for host in [first, second, third] {
        host.shutdown().await;
    }
}

#[tokio::test]
async fn a_host_without_a_dispatcher_does_not_dispatch_lif_4() {
    let (db, mut client) = migrated().await;
    let host = builder(&db)
        .queue_transport()
        .cleanup(CleanupOptions::builder().cleanup_interval(Duration::from_millis(100)).build().unwrap())
        .start()
        .await
        .unwrap();
    assert!(host.dispatcher().is_none());
    assert_eq!(host.options().dispatcher(), None);
    enqueue(&mut client, &host, NewMessage::new("queue", "orders", b"{}".to_vec())).await;
    // Proving an absence needs a wait: a dispatcher would have sent it within milliseconds
    // (commit-triggered wake-up), and cleanup passes every 100 ms meanwhile.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!((count(&client, &db, "outbox").await, count(&client, &db, "queue").await), (1, 0));
    host.shutdown().await;
}

/// LDR-5, DLP-1: dead-letter policies run led by an advisory lock by default; after a
/// shutdown the lock is released.
#[tokio::test]
async fn dead_letter_policies_run_under_an_advisory_lock_by_default_ldr_5() {
    use relayer::{DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule};
    let (db, client) = migrated().await;
    let policy = DeadLetterPolicy::redrive(Duration::ZERO, Duration::from_secs(86_400)).unwrap();
    let policies = DeadLetterPolicies::new([
        DeadLetterRule::queue("orders", "orders.dead", policy),
        DeadLetterRule::outbox("queue", "orders", policy),
    ])
    .unwrap();
    let host = builder(&db)
        .queue_transport()
        .dead_letters(
            policies,
            DeadLetterOptions::builder().interval(Duration::from_millis(100)).build().unwrap(),
        )
        .start()
        .await
        .unwrap();
    assert_eq!(host.options().dead_letter().unwrap().interval(), Duration::from_millis(100));
    let held = || async {
        let sql = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
                   WHERE l.locktype = 'advisory' AND a.application_name = $1";
        client.query_one(sql, &[&db.schema()]).await.unwrap().get::<_, i64>(0)
    };
    relayer_test_support::eventually("the dead-letter pass holds its advisory lock", || async {
        held().await == 1
    })
    .await;
    within(host.shutdown()).await;
    relayer_test_support::eventually("the lock is released", || async { held().await == 0 }).await;
}

/// OPT-5: an outbox dead-letter policy naming a transport the host does not register is
/// refused at start.
#[tokio::test]
async fn start_refuses_dead_letter_policies_for_an_unknown_transport_opt_5() {
    use relayer::{DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule};
    let (db, client) = migrated().await;
    let policies = DeadLetterPolicies::new([DeadLetterRule::outbox(
        "nats",
        "orders",
        DeadLetterPolicy::expire(Duration::ZERO),
    )])
    .unwrap();
    let error = builder(&db)
        .queue_transport()
        .dead_letters(policies, DeadLetterOptions::default())
        .start()
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "relayer setup: a dead-letter policy redrives into transport \"nats\", which this host does not register"
    );
    assert_eq!(count(&client, &db, "instances").await, 0);
}

/// OPT-4: replicas applying different dead-letter policies to one namespace are told apart.
#[tokio::test]
async fn two_hosts_with_different_dead_letter_policies_report_a_disagreement_opt_4() {
    use relayer::{DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule};
    let (db, _client) = migrated().await;
    let policies = |after: u64| {
        let policy = DeadLetterPolicy::expire(Duration::from_secs(after));
        DeadLetterPolicies::new([DeadLetterRule::queue("orders", "orders.dead", policy)]).unwrap()
    };
    let options = DeadLetterOptions::default();
    let first =
        builder(&db).dead_letters(policies(60), options.clone()).instance_id("host-a").start().await.unwrap();
    let second =
        builder(&db).dead_letters(policies(120), options).instance_id("host-b").start().await.unwrap();
    let disagreements = second.disagreements();
    assert_eq!(disagreements.len(), 1, "{disagreements:?}");
    assert_eq!(disagreements[0].worker, "dead_letter");
    let differing: Vec<_> = disagreements[0].differences.iter().map(|d| d.setting.as_str()).collect();
    assert_eq!(differing, ["policies"]);
    for host in [first, second] {
        within(host.shutdown()).await;
    }
}

/// A transport that only declares broker-side deduplication; it is never sent to here.
struct Deduplicating;

#[relayer::async_trait]
impl relayer::Transport for Deduplicating {
    fn name(&self) -> &str {
        "deduplicating"
    }

    fn batch_limit(&self) -> std::num::NonZeroUsize {
        std::num::NonZeroUsize::MIN
    }

    fn capabilities(&self) -> relayer::Capabilities {
        relayer::Capabilities::NONE.with_deduplication()
    }

    async fn send(
        &self,
        _: &str,
        batch: &[relayer::Envelope],
    ) -> Result<Vec<relayer::SendOutcome>, relayer::TransportError> {
        Ok(vec![relayer::SendOutcome::Accepted; batch.len()])
    }
}

/// TRN-1, DSP-7: the start line names each transport with what it declares, so an operator
/// reads there whether a resend can reach consumers twice.
#[tokio::test]
async fn the_start_line_names_each_transport_with_its_declared_capabilities_trn_1() {
    let logs = Warnings::default();
    let _capture = logs.capture_from(tracing::Level::INFO);
    let (db, _client) = migrated().await;
    let host =
        builder(&db).queue_transport().transport(std::sync::Arc::new(Deduplicating)).start().await.unwrap();
    host.shutdown().await;
    let text = logs.text();
    let started: Vec<&str> = text.lines().filter(|line| line.contains("relayer host started")).collect();
    assert_eq!(started.len(), 1, "{text}");
    assert!(
        started[0].contains(
            r#"transports=["deduplicating (deduplicates by id)", "queue (no optional capability)"]"#
        ),
        "{text}"
    );
}
