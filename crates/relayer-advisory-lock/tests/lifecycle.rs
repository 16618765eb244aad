//! The life of one lock: never stacking, shutdown, database errors, drop and reuse (LDR-3,
//! LDR-4, LDR-6).

mod common;

use relayer_advisory_lock::PgAdvisoryLock;
use relayer_core::{DistributedLock, LockErrorKind, advisory_lock_key};
use relayer_test_support::TestDb;
use tokio_util::sync::CancellationToken;

/// LDR-6: a second acquire of a held resource from the same lock instance is refused at once,
/// and does not stack: one release leaves the lock free for a third, independent session.
#[tokio::test]
async fn acquire_twice_on_one_instance_release_once_leaves_the_lock_free() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let resource = common::resource(&db, "twice");
    let key = advisory_lock_key(&resource);
    let lock = common::lock(&db, "one");

    let guard = lock.try_lock(&resource).await.expect("first try").expect("free resource");
    assert!(lock.try_lock(&resource).await.expect("second try").is_none(), "second acquire refused");
    assert_eq!(common::holders(&client, key).await.len(), 1);

    guard.release().await.expect("release");
    assert!(common::holders(&client, key).await.is_empty());
    assert!(common::independent_session_can_take(&db, key).await, "one release freed the lock");
}

/// LDR-6: the same across two lock instances of one process.
#[tokio::test]
async fn acquire_twice_on_two_instances_release_once_leaves_the_lock_free() {
    let db = TestDb::new().await;
    let resource = common::resource(&db, "twice");
    let key = advisory_lock_key(&resource);
    let (first, second) = (common::lock(&db, "first"), common::lock(&db, "second"));

    let guard = first.try_lock(&resource).await.expect("first try").expect("free resource");
    assert!(second.try_lock(&resource).await.expect("second try").is_none(), "second acquire refused");
    guard.release().await.expect("release");

    assert!(common::independent_session_can_take(&db, key).await, "one release freed the lock");
    let again = second.try_lock(&resource).await.expect("retry").expect("free after release");
    again.release().await.expect("release");
}

/// LDR-3: a lock held elsewhere is `Ok(None)` at once, never a wait.
#[tokio::test]
async fn a_lock_held_by_another_session_is_refused_without_waiting() {
    let db = TestDb::new().await;
    let resource = common::resource(&db, "busy");
    let key = advisory_lock_key(&resource);
    let other = db.connect().await;
    let taken: bool = other.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await.expect("lock").get(0);
    assert!(taken);

    // No timer: if try_lock waited, this would hang until the other session unlocks, which it
    // only does afterwards.
    let lock = common::lock(&db, "waiter");
    assert!(lock.try_lock(&resource).await.expect("try_lock").is_none());

    let freed: bool = other.query_one("SELECT pg_advisory_unlock($1)", &[&key]).await.expect("unlock").get(0);
    assert!(freed);
    let guard = lock.try_lock(&resource).await.expect("try_lock").expect("free now");
    guard.release().await.expect("release");
}

/// LDR-4: once shutdown has begun, no new lock is granted; a guard taken before can still be
/// released.
#[tokio::test]
async fn locks_are_refused_once_shutdown_begins() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (held, refused) = (common::resource(&db, "held"), common::resource(&db, "refused"));
    let lock = common::lock(&db, "stopping");

    let guard = lock.try_lock(&held).await.expect("try_lock").expect("free resource");
    lock.begin_shutdown();
    lock.begin_shutdown(); // harmless twice

    let error = lock.try_lock(&refused).await.expect_err("refused after shutdown");
    assert_eq!(error.kind(), LockErrorKind::ShuttingDown);
    assert_eq!(error.resource(), refused);
    assert!(common::holders(&client, advisory_lock_key(&refused)).await.is_empty(), "nothing granted");
    let error = lock.try_lock(&held).await.expect_err("refused after shutdown");
    assert_eq!(error.kind(), LockErrorKind::ShuttingDown);

    guard.release().await.expect("release after shutdown began");
    assert!(common::holders(&client, advisory_lock_key(&held)).await.is_empty());
}

/// LDR-4: the host's cancellation token stops the lock the same way.
#[tokio::test]
async fn locks_are_refused_once_the_shutdown_token_is_cancelled() {
    let db = TestDb::new().await;
    let resource = common::resource(&db, "token");
    let token = CancellationToken::new();
    let mut config = db.config();
    config.application_name(common::app_name(&db, "token"));
    let lock = PgAdvisoryLock::new(config).with_shutdown(token.clone());

    let guard = lock.try_lock(&resource).await.expect("try_lock").expect("free resource");
    guard.release().await.expect("release");
    token.cancel();
    let error = lock.try_lock(&resource).await.expect_err("refused after cancel");
    assert_eq!(error.kind(), LockErrorKind::ShuttingDown);
}

/// LDR-4: a database that cannot be reached is an error, never "held by someone else".
#[tokio::test]
async fn an_unreachable_database_is_an_error_not_a_busy_lock() {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(1).user("postgres").dbname("test");
    let lock = PgAdvisoryLock::new(config);
    let error = lock.try_lock("unreachable").await.expect_err("connect refused is an error");
    assert_eq!(error.kind(), LockErrorKind::Database);
    assert!(std::error::Error::source(&error).is_some(), "the cause is attached");
}

/// LDR-4: a statement the server refuses is an error too (here: a database that does not
/// exist, refused at session start).
#[tokio::test]
async fn a_refused_session_is_an_error_not_a_busy_lock() {
    let db = TestDb::new().await;
    let mut config = db.config();
    config.dbname("relayer_no_such_database");
    let lock = PgAdvisoryLock::new(config);
    let error = lock.try_lock(&common::resource(&db, "nodb")).await.expect_err("an error");
    assert_eq!(error.kind(), LockErrorKind::Database);
}

/// LDR-3: dropping a guard without release closes its session, which frees the lock.
#[tokio::test]
async fn dropping_a_guard_without_release_frees_the_lock() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let resource = common::resource(&db, "dropped");
    let key = advisory_lock_key(&resource);
    let (first, second) = (common::lock(&db, "dropper"), common::lock(&db, "taker"));

    let guard = first.try_lock(&resource).await.expect("try_lock").expect("free resource");
    assert!(second.try_lock(&resource).await.expect("try_lock").is_none());
    drop(guard);

    // The session closes asynchronously: retry (bounded) until the server has freed it.
    let taken = common::lock_eventually(&second, &resource).await;
    let holders = common::holders(&client, key).await;
    assert_eq!(holders.len(), 1);
    assert_eq!(common::application_of(&client, holders[0]).await, Some(common::app_name(&db, "taker")));
    taken.release().await.expect("release");
}

/// A released session (whose unlock succeeded) is reused for the next acquire.
#[tokio::test]
async fn a_released_session_is_reused() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let resource = common::resource(&db, "reuse");
    let key = advisory_lock_key(&resource);
    let lock = common::lock(&db, "reuse");

    let guard = lock.try_lock(&resource).await.expect("try_lock").expect("free resource");
    let first_pid = common::holders(&client, key).await;
    guard.release().await.expect("release");
    let guard = lock.try_lock(&resource).await.expect("try_lock").expect("free resource");
    assert_eq!(common::holders(&client, key).await, first_pid, "same backend");
    guard.release().await.expect("release");
}

/// An idle session the server killed is not reused: the next acquire opens a fresh one and
/// succeeds, rather than reporting the dead session's error.
#[tokio::test]
async fn an_idle_session_killed_by_the_server_is_replaced() {
    let db = TestDb::new().await;
    let resource = common::resource(&db, "idle-killed");
    let lock = common::lock(&db, "idle");

    let guard = lock.try_lock(&resource).await.expect("try_lock").expect("free resource");
    guard.release().await.expect("release");
    assert!(db.terminate_backends(&common::app_name(&db, "idle")).await >= 1, "the idle session");

    let guard = lock.try_lock(&resource).await.expect("a fresh session").expect("free resource");
    guard.release().await.expect("release");
}

/// `ensure_held` succeeds while the lock is held, and a guard's resource is its name.
#[tokio::test]
async fn ensure_held_confirms_a_held_lock() {
    let db = TestDb::new().await;
    let resource = common::resource(&db, "held");
    let lock = common::lock(&db, "check");
    let mut guard = lock.try_lock(&resource).await.expect("try_lock").expect("free resource");
    assert_eq!(guard.resource(), resource);
    assert_eq!(guard.term(), None, "advisory locks have no term");
    guard.ensure_held().await.expect("held");
    guard.ensure_held().await.expect("still held");
    guard.release().await.expect("release");
}
