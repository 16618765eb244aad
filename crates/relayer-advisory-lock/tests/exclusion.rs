//! One holder at a time, across instances, processes and server-killed sessions (LDR-3,
//! LDR-6).
//!
//! Holders count themselves in a table of the test schema: a holder increments `current` (and
//! raises `max_seen`) right after it is granted the lock, holds it briefly, and decrements
//! before releasing. `max_seen` above 1 would mean two holders at once.

mod common;

use std::time::Duration;

use relayer_advisory_lock::PgAdvisoryLock;
use relayer_core::{DistributedLock, LockErrorKind, advisory_lock_key};
use relayer_test_support::TestDb;

/// Environment of the child-process contender (see [`child_contender`]).
const CHILD_URL: &str = "RELAYER_LOCK_TEST_CHILD_URL";
const CHILD_SCHEMA: &str = "RELAYER_LOCK_TEST_CHILD_SCHEMA";
const CHILD_RESOURCE: &str = "RELAYER_LOCK_TEST_CHILD_RESOURCE";

/// Acquisitions each contender makes before it stops.
const ACQUISITIONS: i32 = 15;
/// A bound on attempts, so a contender that never wins ends (and the test fails) instead of
/// hanging.
const MAX_ATTEMPTS: u32 = 20_000;

async fn create_counter(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".lock_holders (id int PRIMARY KEY, current int NOT NULL, max_seen int NOT NULL);
             INSERT INTO \"{schema}\".lock_holders VALUES (1, 0, 0);
             CREATE TABLE \"{schema}\".lock_wins (contender text PRIMARY KEY, wins int NOT NULL);"
        ))
        .await
        .expect("counter tables");
}

/// Contends for `resource` until it has won [`ACQUISITIONS`] times (or gives up after
/// [`MAX_ATTEMPTS`]), counting holders as the module docs describe; records its wins.
async fn contend(
    lock: PgAdvisoryLock,
    counter: tokio_postgres::Client,
    schema: &str,
    resource: &str,
    name: &str,
) {
    let enter = format!(
        "UPDATE \"{schema}\".lock_holders SET current = current + 1, max_seen = GREATEST(max_seen, current + 1) \
         WHERE id = 1 RETURNING current"
    );
    let leave = format!("UPDATE \"{schema}\".lock_holders SET current = current - 1 WHERE id = 1");
    let mut wins = 0;
    for _ in 0..MAX_ATTEMPTS {
        if wins >= ACQUISITIONS {
            break;
        }
        match lock.try_lock(resource).await.expect("try_lock") {
            Some(mut guard) => {
                guard.ensure_held().await.expect("held right after acquire");
                let current: i32 = counter.query_one(&enter, &[]).await.expect("enter").get(0);
                assert_eq!(current, 1, "{name}: another holder at the same time");
                tokio::time::sleep(Duration::from_millis(3)).await;
                counter.execute(&leave, &[]).await.expect("leave");
                guard.release().await.expect("release");
                wins += 1;
                // Give the others a turn.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            None => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
    counter
        .execute(&format!("INSERT INTO \"{schema}\".lock_wins VALUES ($1, $2)"), &[&name, &wins])
        .await
        .expect("record wins");
}

/// Not a test of its own: the entry point of the child process that
/// [`two_instances_and_a_child_process_never_hold_at_once`] starts (it re-runs this test
/// binary with only this test selected). Without the child's environment it does nothing.
#[tokio::test]
async fn child_contender() {
    let (Ok(url), Ok(schema), Ok(resource)) =
        (std::env::var(CHILD_URL), std::env::var(CHILD_SCHEMA), std::env::var(CHILD_RESOURCE))
    else {
        return;
    };
    let mut config: tokio_postgres::Config = url.parse().expect("child url");
    let (counter, connection) =
        config.connect(tokio_postgres::NoTls).await.expect("child counter connection");
    tokio::spawn(connection);
    config.application_name(format!("{schema}_child"));
    contend(PgAdvisoryLock::new(config), counter, &schema, &resource, "child").await;
}

/// LDR-3: two lock instances in this process and a third in another process contend for one
/// resource; each wins it, and never are two holders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_and_a_child_process_never_hold_at_once() {
    let db = TestDb::new().await;
    let setup = db.connect().await;
    create_counter(&setup, db.schema()).await;
    let resource = common::resource(&db, "exclusive");

    let exe = std::env::current_exe().expect("test binary path");
    let child = tokio::process::Command::new(exe)
        .args(["child_contender", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, db.url())
        .env(CHILD_SCHEMA, db.schema())
        .env(CHILD_RESOURCE, &resource)
        .kill_on_drop(true)
        .output();

    let here_a = contend(common::lock(&db, "a"), db.connect().await, db.schema(), &resource, "a");
    let here_b = contend(common::lock(&db, "b"), db.connect().await, db.schema(), &resource, "b");
    let (child, (), ()) = tokio::join!(child, here_a, here_b);
    let child = child.expect("child process ran");
    assert!(
        child.status.success(),
        "child contender failed: {}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );

    let schema = db.schema();
    let row = setup
        .query_one(&format!("SELECT current, max_seen FROM \"{schema}\".lock_holders WHERE id = 1"), &[])
        .await
        .expect("counter");
    let (current, max_seen): (i32, i32) = (row.get(0), row.get(1));
    assert_eq!(max_seen, 1, "never two holders at once");
    assert_eq!(current, 0);
    let wins = setup
        .query(&format!("SELECT contender, wins FROM \"{schema}\".lock_wins ORDER BY contender"), &[])
        .await
        .expect("wins");
    let wins: Vec<(String, i32)> = wins.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(wins.len(), 3, "every contender reported: {wins:?}");
    for (contender, won) in &wins {
        assert!(*won >= 1, "{contender} never got the lock: {wins:?}");
    }
}

/// LDR-6: the server kills the holder's session. The holder learns it before its next pass
/// (`ensure_held` is `Lost`), another instance takes over, and there are never two holders.
#[tokio::test]
async fn a_holder_whose_session_is_killed_loses_leadership_and_another_takes_over() {
    let db = TestDb::new().await;
    let observer = db.connect().await;
    let resource = common::resource(&db, "killed");
    let key = advisory_lock_key(&resource);
    let (leader, standby) = (common::lock(&db, "leader"), common::lock(&db, "standby"));

    let mut guard = leader.try_lock(&resource).await.expect("try_lock").expect("free resource");
    guard.ensure_held().await.expect("held before the kill");
    assert!(standby.try_lock(&resource).await.expect("try_lock").is_none());
    assert_eq!(common::holders(&observer, key).await.len(), 1);

    assert!(db.terminate_backends(&common::app_name(&db, "leader")).await >= 1);

    // Before its next pass the old leader finds out, whatever the standby does meanwhile.
    let error = guard.ensure_held().await.expect_err("the killed session no longer holds the lock");
    assert_eq!(error.kind(), LockErrorKind::Lost);
    assert!(common::holders(&observer, key).await.len() <= 1);

    let mut taken = common::lock_eventually(&standby, &resource).await;
    taken.ensure_held().await.expect("the standby leads");
    let holders = common::holders(&observer, key).await;
    assert_eq!(holders.len(), 1, "one holder");
    assert_eq!(common::application_of(&observer, holders[0]).await, Some(common::app_name(&db, "standby")));

    // The deposed leader neither holds nor can retake the lock while the standby has it.
    let error = guard.ensure_held().await.expect_err("still lost");
    assert_eq!(error.kind(), LockErrorKind::Lost);
    assert!(leader.try_lock(&resource).await.expect("try_lock").is_none());
    let error = guard.release().await.expect_err("releasing a lost lock is reported");
    assert_eq!(error.kind(), LockErrorKind::Lost);

    taken.release().await.expect("release");
    assert!(common::holders(&observer, key).await.is_empty());
}

/// LDR-6: a holder killed mid-`release` cannot report success; the lock ends up free.
#[tokio::test]
async fn releasing_on_a_killed_session_is_an_error() {
    let db = TestDb::new().await;
    let observer = db.connect().await;
    let resource = common::resource(&db, "killed-release");
    let key = advisory_lock_key(&resource);
    let leader = common::lock(&db, "leader");

    let guard = leader.try_lock(&resource).await.expect("try_lock").expect("free resource");
    assert!(db.terminate_backends(&common::app_name(&db, "leader")).await >= 1);
    let error = guard.release().await.expect_err("the session is gone");
    assert!(matches!(error.kind(), LockErrorKind::Database | LockErrorKind::Lost), "{error:?}");
    assert!(common::holders(&observer, key).await.is_empty());
    assert!(common::independent_session_can_take(&db, key).await);
}
