//! Helpers shared by the advisory-lock tests.
//!
//! Advisory locks are database-wide, not per schema: every resource name here includes the
//! test's schema, so tests running in parallel on one server never contend for one key.
#![allow(dead_code, reason = "each test file uses a part of these helpers")]

use std::time::Duration;

use relayer_advisory_lock::PgAdvisoryLock;
use relayer_core::{DistributedLock, LockGuard};
use relayer_test_support::TestDb;

/// A resource name unique to this test.
pub(crate) fn resource(db: &TestDb, name: &str) -> String {
    format!("{}:{name}", db.schema())
}

/// The `application_name` of the lock instance `instance` in this test.
pub(crate) fn app_name(db: &TestDb, instance: &str) -> String {
    format!("{}_{instance}", db.schema())
}

/// A lock instance whose sessions are named [`app_name`]`(db, instance)`.
pub(crate) fn lock(db: &TestDb, instance: &str) -> PgAdvisoryLock {
    let mut config = db.config();
    config.application_name(app_name(db, instance));
    PgAdvisoryLock::new(config)
}

/// The pids of the sessions that hold the advisory lock `key`, per `pg_locks`.
pub(crate) async fn holders(client: &tokio_postgres::Client, key: i64) -> Vec<i32> {
    let rows = client
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
             AND ((classid::int8 << 32) | objid::int8) = $1 ORDER BY pid",
            &[&key],
        )
        .await
        .expect("pg_locks query");
    rows.iter().map(|r| r.get(0)).collect()
}

/// The `application_name` of backend `pid`.
pub(crate) async fn application_of(client: &tokio_postgres::Client, pid: i32) -> Option<String> {
    client
        .query_opt("SELECT application_name FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .expect("pg_stat_activity query")
        .map(|r| r.get(0))
}

/// Tries `lock` until it grants `resource`, a bounded number of times (for a lock that is
/// being freed by a session that is closing). Panics if it never does.
pub(crate) async fn lock_eventually(lock: &PgAdvisoryLock, resource: &str) -> Box<dyn LockGuard> {
    for _ in 0..400 {
        if let Some(guard) = lock.try_lock(resource).await.expect("try_lock") {
            return guard;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{resource:?} was never freed");
}

/// Takes `key` on a plain connection of its own (a third, independent session) and unlocks
/// it again; `true` if it could be taken.
pub(crate) async fn independent_session_can_take(db: &TestDb, key: i64) -> bool {
    let client = db.connect().await;
    let taken: bool =
        client.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await.expect("try lock").get(0);
    if taken {
        let freed: bool =
            client.query_one("SELECT pg_advisory_unlock($1)", &[&key]).await.expect("unlock").get(0);
        assert!(freed, "unlock of a lock just taken");
    }
    taken
}
