//! Each led worker is led as its own builder call says (LDR-5): a lease, an advisory lock,
//! or the application's own lock, on that worker's job and no other. (That a leadership
//! cannot be given to a worker that is not led is a compile-time shape: see the `Led`
//! docs' `compile_fail` examples.)
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer::advisory_lock::PgAdvisoryLock;
use relayer::core::{LockError, LockGuard};
use relayer::{
    CleanupOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, DistributedLock,
    LeaderElection, Led, Relayer, SweeperOptions,
};
use relayer_test_support::{TestDb, eventually, within};

/// The application's own lock: PostgreSQL advisory locks, recording every resource asked.
struct Recording {
    inner: PgAdvisoryLock,
    asked: Mutex<Vec<String>>,
}

#[relayer::async_trait]
impl DistributedLock for Recording {
    async fn try_lock(&self, resource: &str) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        self.asked.lock().unwrap().push(resource.to_owned());
        self.inner.try_lock(resource).await
    }
}

/// The sweeper led by an advisory lock, cleanup by the application's lock and the
/// dead-letter policies by a lease (each not its default): only the dead-letter policies
/// take a lease row, the application's lock is asked for cleanup's resource alone, and
/// the sweeper's advisory lock is held on its own resource.
#[tokio::test]
async fn each_led_worker_is_led_by_the_election_given_with_it_ldr_5() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let ms = Duration::from_millis;
    let own = Arc::new(Recording { inner: PgAdvisoryLock::new(db.config()), asked: Mutex::default() });
    let policies = DeadLetterPolicies::new([DeadLetterRule::queue(
        "orders",
        "orders.dead",
        DeadLetterPolicy::expire(Duration::from_secs(3_600)),
    )])
    .unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .sweeper(Led::new(
            SweeperOptions::builder().sweep_interval(ms(100)).build().unwrap(),
            LeaderElection::AdvisoryLock,
        ))
        .cleanup(Led::new(
            CleanupOptions::builder().cleanup_interval(ms(100)).build().unwrap(),
            LeaderElection::Lock(Arc::clone(&own) as Arc<dyn DistributedLock>),
        ))
        .dead_letters(
            policies,
            Led::new(DeadLetterOptions::builder().interval(ms(100)).build().unwrap(), LeaderElection::Lease),
        )
        .start()
        .await
        .unwrap();

    let (schema, prefix) = (db.namespace().schema(), db.namespace().prefix());
    let leases = format!("SELECT job FROM {} ORDER BY job", db.namespace().table("leases"));
    eventually("the dead-letter policies lead by a lease", || async {
        !client.query(&leases, &[]).await.unwrap().is_empty()
    })
    .await;
    eventually("cleanup asks the application's lock", || async { !own.asked.lock().unwrap().is_empty() })
        .await;
    // The sweeper's advisory lock session carries the host's application_name.
    let held = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
                WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1";
    eventually("the sweeper and cleanup hold their advisory locks", || async {
        client.query_one(held, &[&db.schema()]).await.unwrap().get::<_, i64>(0) == 2
    })
    .await;

    let jobs: Vec<String> = client.query(&leases, &[]).await.unwrap().iter().map(|row| row.get(0)).collect();
    assert_eq!(jobs, [relayer::dead_letters::LEASE_JOB], "only the lease-led worker takes a lease row");
    let asked = own.asked.lock().unwrap().clone();
    let cleanup_resource = format!("{}:{schema}.{prefix}", relayer::cleanup::LEASE_JOB);
    assert!(asked.iter().all(|resource| *resource == cleanup_resource), "{asked:?}");

    within(host.shutdown()).await;
    eventually("both locks are released", || async {
        client.query_one(held, &[&db.schema()]).await.unwrap().get::<_, i64>(0) == 0
    })
    .await;
}
