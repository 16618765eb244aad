//! Workers outlive a database that stops and comes back (RES-1, RES-2, §15): PostgreSQL — a
//! cluster each test owns, never the shared server — is stopped in immediate mode (as in a
//! crash) and started again while the workers run. None of them ends; each resumes within
//! its backoff, with no process restart.
//!
//! Messages enter through relayer's own writer; expired inbox rows are written by hand,
//! since no component writes a row that is already weeks old.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer::{CleanupOptions, DispatcherOptions, NewMessage, Relayer, Retention, SweeperOptions};
use relayer_test_support::{OwnedCluster, TestDb, eventually, within};
use tokio_postgres::{Client, NoTls};

const DAY: Duration = Duration::from_secs(86_400);

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A connection once the server answers (it may still be starting).
async fn connect(db: &TestDb) -> Client {
    within(async {
        loop {
            if let Ok((client, connection)) = db.config().connect(NoTls).await {
                tokio::spawn(connection);
                return client;
            }
            tokio::time::sleep(ms(50)).await;
        }
    })
    .await
}

async fn count(client: &Client, db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table(table));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

async fn insert_expired_inbox(client: &Client, db: &TestDb) {
    let inbox = db.namespace().table("inbox");
    client
        .execute(
            &format!(
                "INSERT INTO {inbox} (consumer, message_id, processed_at) \
                 VALUES ('billing', gen_random_uuid(), now() - interval '40 days')"
            ),
            &[],
        )
        .await
        .unwrap();
}

/// Whether the lease of `job` was renewed since the server (re)started: its holder has
/// led a pass on the database as it is now.
async fn renewed_since_server_start(client: &Client, db: &TestDb, job: &str) -> bool {
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {} WHERE job = $1 AND renewed_at > pg_postmaster_start_time())",
        db.namespace().table("leases")
    );
    client.query_one(&sql, &[&job]).await.unwrap().get(0)
}

fn sweeper_options() -> SweeperOptions {
    SweeperOptions::builder()
        .recovery_delay(Duration::ZERO)
        .sweep_interval(ms(100))
        .max_backoff(ms(500))
        .build()
        .unwrap()
}

fn cleanup_options() -> CleanupOptions {
    CleanupOptions::builder()
        .cleanup_interval(ms(100))
        .max_backoff(ms(500))
        .inbox_retention(Retention::After(DAY))
        .build()
        .unwrap()
}

/// RES-1, RES-2: the database stops under a running host (dispatcher, sweeper, cleanup) and
/// comes back. Afterwards the dispatcher delivers a new message, the sweeper and cleanup
/// lead passes again (their leases are renewed on the restarted server) and cleanup deletes
/// an expired row — all in the same process.
#[tokio::test]
async fn a_database_that_stops_and_returns_under_a_running_host_resumes_every_worker_res_1() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let mut client = connect(&db).await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(ms(100)).max_backoff(ms(500)).build().unwrap())
        .sweeper(sweeper_options())
        .cleanup(cleanup_options())
        .start()
        .await
        .unwrap();
    for job in ["sweeper", "cleanup"] {
        eventually("the led workers ran a pass", || async {
            renewed_since_server_start(&client, &db, job).await
        })
        .await;
    }

    cluster.stop_immediately().await;
    // Let every worker meet the stopped server (their passes fail and back off).
    tokio::time::sleep(ms(500)).await;
    cluster.start_again().await;

    let mut client = connect(&db).await;
    for job in ["sweeper", "cleanup"] {
        eventually("the led workers lead again on the restarted server", || async {
            renewed_since_server_start(&client, &db, job).await
        })
        .await;
    }
    insert_expired_inbox(&client, &db).await;
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[NewMessage::new("queue", "orders", b"after".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the message written after the restart is delivered", || async {
        count(&client, &db, "outbox").await == 0 && count(&client, &db, "queue").await >= 1
    })
    .await;
    eventually("cleanup deletes the expired row", || async { count(&client, &db, "inbox").await == 0 }).await;
    within(host.shutdown()).await;
}
