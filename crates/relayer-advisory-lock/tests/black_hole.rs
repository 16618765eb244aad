//! A lock session whose network goes silent (RES-5): a proxy between the lock and
//! PostgreSQL stops forwarding without closing anything. No wait on the session lasts past
//! the lock's call timeout; once the path returns the lock passes to another instance.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::time::Duration;

use relayer_advisory_lock::PgAdvisoryLock;
use relayer_core::{DistributedLock, LockErrorKind};
use relayer_test_support::{TcpProxy, TestDb, eventually, within};

/// The test database's settings, reached through `proxy`.
async fn through(db: &TestDb) -> (TcpProxy, tokio_postgres::Config) {
    let direct = db.config();
    let host = match direct.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = direct.get_ports().first().copied().unwrap_or(5432);
    let upstream = tokio::net::lookup_host((host.as_str(), port)).await.unwrap().next().unwrap();
    let proxy = TcpProxy::start(upstream).await;
    let mut config = tokio_postgres::Config::new();
    config.host(proxy.address().ip().to_string()).port(proxy.address().port());
    if let Some(user) = direct.get_user() {
        config.user(user);
    }
    if let Some(password) = direct.get_password() {
        config.password(password);
    }
    if let Some(dbname) = direct.get_dbname() {
        config.dbname(dbname);
    }
    config.application_name(common::app_name(db, "black-holed"));
    (proxy, config)
}

/// RES-5: the holder's check before a pass, a new attempt and a release each fail within
/// the call timeout while the network is silent (the check reports the lock lost), and
/// once the path returns the lock passes to another instance.
#[tokio::test]
async fn a_black_holed_lock_session_fails_within_its_call_timeout_and_the_lock_passes_on_res_5() {
    let db = TestDb::new().await;
    let resource = common::resource(&db, "black-hole");
    let (proxy, config) = through(&db).await;
    let lock = PgAdvisoryLock::new(config).with_call_timeout(Duration::from_secs(1));
    let mut guard = lock.try_lock(&resource).await.unwrap().expect("a free resource");
    guard.ensure_held().await.unwrap();

    proxy.stall();
    let lost = within(guard.ensure_held()).await.unwrap_err();
    assert_eq!(lost.kind(), LockErrorKind::Lost, "{lost:?}");
    let refused = within(lock.try_lock(&resource)).await.unwrap_err();
    assert_eq!(refused.kind(), LockErrorKind::Database, "{refused:?}");
    assert!(relayer_core::error_chain(&refused).contains("no answer"), "{refused:?}");
    within(guard.release()).await.unwrap_err();

    // The path returns: the sessions the holder closed end on the server, and another
    // instance takes the lock.
    proxy.restore();
    let other = common::lock(&db, "other");
    let taken = within(common::lock_eventually(&other, &resource)).await;
    taken.release().await.unwrap();
    // The black-holed instance works again too, on a fresh session.
    eventually("the black-holed instance locks again", || async {
        matches!(lock.try_lock(&resource).await, Ok(Some(_)))
    })
    .await;
}
