//! relayer behind a real PgBouncer, in both pool modes (DRV-1b, LDR-6).
//!
//! `.ci/run` starts the poolers (see `relayer_test_support::pgbouncer`); without one, each
//! test reports itself SKIPPED by name and returns.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer::advisory_lock::PgAdvisoryLock;
use relayer::core::LockErrorKind;
use relayer::postgres::{Executor, PgClient, Prepared, StatementMode};
use relayer::{
    CleanupOptions, DispatcherOptions, DistributedLock, LeaderElection, Led, NewMessage, QUEUE_TRANSPORT,
    Relayer, SweeperOptions,
};
use relayer_test_support::{HeldServers, PoolMode, TestDb, Warnings, eventually, pgbouncer};
use relayer_worker::WorkerEvent;
use tokio::sync::broadcast::error::TryRecvError;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls};

async fn migrated() -> (TestDb, Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

async fn connect(config: &Config) -> Client {
    let (client, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn count(client: &Client, db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table(table));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// A writer's enqueue is one statement in the caller's transaction: it works through
/// either pool mode, and a rollback still writes nothing (OUT-1).
#[tokio::test]
async fn writers_enqueue_through_pgbouncer_in_both_pool_modes_out_1() {
    let (db, direct) = migrated().await;
    let writer = relayer::writer(db.namespace(), [QUEUE_TRANSPORT]);
    let mut expected = 0;
    for mode in [PoolMode::Transaction, PoolMode::Session] {
        let Some(config) =
            pgbouncer(&db, mode, "writers_enqueue_through_pgbouncer_in_both_pool_modes_out_1").await
        else {
            return;
        };
        let mut client = connect(&config).await;
        for round in 0..3 {
            let batch: Vec<_> = (0..5)
                .map(|n| {
                    NewMessage::new(QUEUE_TRANSPORT, "orders", format!("{mode}-{round}-{n}").into_bytes())
                })
                .collect();
            let tx = client.transaction().await.unwrap();
            writer.enqueue(&tx, &batch).await.unwrap();
            tx.commit().await.unwrap();
            expected += 5;
            let tx = client.transaction().await.unwrap();
            writer.enqueue(&tx, &batch[..1]).await.unwrap();
            tx.rollback().await.unwrap();
        }
        assert_eq!(count(&direct, &db, "outbox").await, expected, "{mode} mode");
    }
}

/// DRV-1b: a host whose every connection goes through a transaction-mode pooler, with
/// unnamed statements, dispatches, sweeps and cleans, and none of its passes fails while
/// the pooler keeps moving its transactions to other server connections: between rounds,
/// other clients hold server connections in open transactions. A failed pass (a
/// statement lost on another server connection, even if retried) or a statement cache
/// that gives up logs a WARN and fails the test.
#[tokio::test]
async fn workers_pass_with_unnamed_statements_behind_a_transaction_mode_pooler_drv_1b() {
    let warnings = Warnings::default();
    let _capture = warnings.capture();
    let (db, direct) = migrated().await;
    let test = "workers_pass_with_unnamed_statements_behind_a_transaction_mode_pooler_drv_1b";
    let Some(config) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    let fast = Duration::from_millis(100);
    let host = Relayer::builder(config.clone(), db.namespace().clone())
        .statement_mode(StatementMode::Unnamed)
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(fast).build().unwrap())
        .sweeper(
            SweeperOptions::builder().sweep_interval(fast).recovery_delay(Duration::ZERO).build().unwrap(),
        )
        .cleanup(CleanupOptions::builder().cleanup_interval(fast).build().unwrap())
        .start()
        .await
        .unwrap();
    let mut events = host.dispatcher().unwrap().subscribe();
    let mut client = connect(&config).await;
    let writer = host.writer();
    // The sweeper (no recovery delay) may send a row before the dispatcher does: at least
    // once, so count distinct messages.
    let distinct = format!("SELECT count(DISTINCT message_id) FROM {}", db.namespace().table("queue"));
    let mut held_pids = Vec::new();
    for round in 0..10_i64 {
        // 0 to 3 server connections held by others during the round.
        let held = HeldServers::hold(&config, usize::try_from(round % 4).unwrap()).await;
        held_pids.extend_from_slice(held.pids());
        let batch: Vec<_> = (0..10)
            .map(|n| NewMessage::new(QUEUE_TRANSPORT, "orders", format!("{round}-{n}").into_bytes()))
            .collect();
        let tx = client.transaction().await.unwrap();
        writer.enqueue(&tx, &batch).await.unwrap();
        tx.commit().await.unwrap();
        eventually("the round's messages are in the queue and the outbox is empty", || async {
            let queued: i64 = direct.query_one(&distinct, &[]).await.unwrap().get(0);
            queued == 10 * (round + 1) && count(&direct, &db, "outbox").await == 0
        })
        .await;
        drop(held);
    }
    held_pids.sort_unstable();
    held_pids.dedup();
    assert!(held_pids.len() >= 2, "the pooler handed out a single server connection: {held_pids:?}");
    // The led workers ran passes through the pooler too: their leases exist.
    eventually("the sweeper and cleanup hold leases", || async { count(&direct, &db, "leases").await >= 2 })
        .await;
    host.shutdown().await;
    loop {
        match events.try_recv() {
            Ok(WorkerEvent::PassFailed { consecutive, .. }) => {
                panic!("a dispatcher pass failed ({consecutive} in a row):\n{}", warnings.text())
            }
            Ok(_) | Err(TryRecvError::Lagged(_)) => {}
            Err(TryRecvError::Empty | TryRecvError::Closed) => break,
        }
    }
    let text = warnings.text();
    assert!(text.is_empty(), "the host warned behind the pooler:\n{text}");
}

/// The control of the test above: behind a transaction-mode pooler that does not track
/// prepared statements, a connection that prepares its statements fails as soon as its
/// transaction lands on another server connection than the one that prepared them, while
/// one with unnamed statements keeps working. Another client holds the server connection
/// of the last transaction, so the next one cannot land there.
#[tokio::test]
async fn prepared_statements_fail_and_unnamed_ones_work_behind_a_transaction_mode_pooler_drv_1b() {
    let db = TestDb::new().await;
    let test = "prepared_statements_fail_and_unnamed_ones_work_behind_a_transaction_mode_pooler_drv_1b";
    let Some(config) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    // A transaction running one cached statement; the backend it ran on.
    async fn pass(client: &mut PgClient) -> Result<i32, tokio_postgres::Error> {
        let (client, statements) = client.split();
        let tx = client.transaction().await?;
        let rows = Prepared::new(&tx, statements).rows("SELECT pg_backend_pid()", &[]).await?;
        tx.commit().await?;
        Ok(rows[0].get(0))
    }
    for mode in [StatementMode::Prepared, StatementMode::Unnamed] {
        let mut client = PgClient::with_mode(connect(&config).await, mode);
        let mut last = pass(&mut client).await.unwrap();
        let mut moved = 0;
        let mut failure = None;
        for _ in 0..10 {
            let (held, holds) = HeldServers::hold_backend(&config, last, 3).await;
            moved += usize::from(holds);
            match pass(&mut client).await {
                Ok(pid) => last = pid,
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
            drop(held);
        }
        match mode {
            StatementMode::Prepared => {
                let error = failure.expect("prepared statements survived a change of server connection");
                assert_eq!(error.code(), Some(&SqlState::INVALID_SQL_STATEMENT_NAME), "{error}");
            }
            StatementMode::Unnamed => {
                assert!(failure.is_none(), "{failure:?}");
                assert!(client.statements().is_empty());
                assert!(moved >= 1, "no transaction was moved to another server connection");
            }
        }
    }
}

/// LDR-6: advisory-lock leadership refuses a transaction-mode pooler with an error that
/// names it, and works through a session-mode pooler, where a second contender is refused
/// while the first holds the lock.
#[tokio::test]
async fn advisory_locks_refuse_transaction_mode_and_work_in_session_mode_ldr_6() {
    let db = TestDb::new().await;
    let test = "advisory_locks_refuse_transaction_mode_and_work_in_session_mode_ldr_6";
    let Some(transaction) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    let Some(session) = pgbouncer(&db, PoolMode::Session, test).await else {
        return;
    };
    let resource = format!("pooler-test:{}", db.schema());

    let Err(error) = PgAdvisoryLock::new(transaction).try_lock(&resource).await else {
        panic!("an advisory lock was granted through a transaction-mode pooler");
    };
    assert_eq!(error.kind(), LockErrorKind::Unsupported, "{error}");
    let text = relayer::error_chain(&error);
    assert!(text.contains("transaction-mode") && text.contains(&resource), "{text}");

    let (first, second) = (PgAdvisoryLock::new(session.clone()), PgAdvisoryLock::new(session));
    let guard = first.try_lock(&resource).await.unwrap().expect("the first contender leads");
    assert!(second.try_lock(&resource).await.unwrap().is_none(), "two leaders at once");
    guard.release().await.unwrap();
    let guard = second.try_lock(&resource).await.unwrap().expect("taken over after release");
    guard.release().await.unwrap();
}

/// LDR-6: a host whose every connection goes through a session-mode pooler leads cleanup
/// with an advisory lock, and releases it at shutdown.
#[tokio::test]
async fn a_host_leads_with_an_advisory_lock_through_a_session_mode_pooler_ldr_6() {
    let (db, direct) = migrated().await;
    let test = "a_host_leads_with_an_advisory_lock_through_a_session_mode_pooler_ldr_6";
    let Some(config) = pgbouncer(&db, PoolMode::Session, test).await else {
        return;
    };
    let host = Relayer::builder(config, db.namespace().clone())
        .cleanup(Led::new(
            CleanupOptions::builder().cleanup_interval(Duration::from_millis(100)).build().unwrap(),
            LeaderElection::AdvisoryLock,
        ))
        .start()
        .await
        .unwrap();
    // The lock's session connects with the host's application_name: the test schema.
    let held = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
                WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1";
    let locks = || async { direct.query_one(held, &[&db.schema()]).await.unwrap().get::<_, i64>(0) };
    eventually("cleanup holds its advisory lock", || async { locks().await == 1 }).await;
    host.shutdown().await;
    eventually("the lock is released at shutdown", || async { locks().await == 0 }).await;
}
