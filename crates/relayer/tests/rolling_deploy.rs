//! A rolling deploy that adds a transport (TRN-6), through the public API only.
//!
//! Two hosts of the old version run a dispatcher and a recovery sweeper with the queue
//! transport alone while the new version's writer already writes rows for transport `x`:
//! unordered ones, an ordered lane of them, and a lane whose head is an `x` row with a
//! queue row behind it. The old hosts deliver the queue rows written after them, and lead
//! sweeper passes over the `x` rows, yet claim, count, bury and reorder nothing of `x`;
//! `status` names `x` as waiting on a transport no live instance registers. Then a host of
//! the new version, with `x`, delivers every one of them, first attempts all, lanes in order.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use relayer::postgres::{OutboxWriter, namespace_status};
use relayer::{DispatcherOptions, NewMessage, Relayer, RelayerHost, SweeperOptions};
use relayer_test_support::{FaultyTransport, TestDb, eventually, within};
use tokio_postgres::Client;

const FAST: Duration = Duration::from_millis(50);

async fn migrated() -> (TestDb, Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

/// A host with a dispatcher and a sweeper judging every row old enough at once; with the
/// queue transport, and `extra` when given.
async fn host(db: &TestDb, name: &str, extra: Option<Arc<FaultyTransport>>) -> RelayerHost {
    let mut builder = Relayer::builder(db.config(), db.namespace().clone())
        .instance_id(name)
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(FAST).build().unwrap())
        .sweeper(
            SweeperOptions::builder().sweep_interval(FAST).recovery_delay(Duration::ZERO).build().unwrap(),
        );
    if let Some(transport) = extra {
        builder = builder.transport(transport);
    }
    builder.start().await.unwrap()
}

async fn scalar(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// When the sweeper's lease was last renewed: once per pass its holder led.
async fn sweeper_renewed_at(client: &Client, db: &TestDb) -> Option<SystemTime> {
    let sql = format!("SELECT renewed_at FROM {} WHERE job = 'sweeper'", db.namespace().table("leases"));
    client.query_opt(&sql, &[]).await.unwrap().map(|row| row.get(0))
}

#[tokio::test]
async fn old_hosts_without_a_transport_leave_its_rows_to_a_new_host_that_delivers_them_all_trn_6() {
    let (db, mut client) = migrated().await;
    let (outbox, dead, queue) =
        (db.namespace().table("outbox"), db.namespace().table("dead"), db.namespace().table("queue"));
    let old = [host(&db, "old-1", None).await, host(&db, "old-2", None).await];

    // The new version's writer: it knows `x` already.
    let writer = OutboxWriter::new(db.namespace(), ["queue", "x"]);
    let mut rows: Vec<NewMessage> =
        (0..30).map(|n| NewMessage::new("x", "x-dest", format!("x-{n}").into_bytes())).collect();
    rows.extend(
        (0..5).map(|n| NewMessage::new("x", "x-dest", format!("lane-x-{n}").into_bytes()).lane("lane-x")),
    );
    rows.push(NewMessage::new("x", "x-dest", b"mixed-head".to_vec()).lane("mixed"));
    rows.push(NewMessage::new("queue", "orders", b"mixed-behind".to_vec()).lane("mixed"));
    let tx = client.transaction().await.unwrap();
    writer.enqueue(&tx, &rows).await.unwrap();
    tx.commit().await.unwrap();
    // Queue rows written after them, due after them: the old hosts' claims meet `x` first.
    let later: Vec<NewMessage> =
        (0..20).map(|n| NewMessage::new("queue", "orders", format!("q-{n}").into_bytes())).collect();
    let tx = client.transaction().await.unwrap();
    writer.enqueue(&tx, &later).await.unwrap();
    tx.commit().await.unwrap();

    let delivered = format!("SELECT count(*) FROM {queue} WHERE queue = 'orders'");
    eventually("the old hosts deliver the 20 unordered queue rows", || async {
        scalar(&client, &delivered).await == 20
    })
    .await;
    // Three sweeper passes led since: each read a page over the `x` rows.
    within(async {
        let (mut passes, mut last) = (0, sweeper_renewed_at(&client, &db).await);
        while passes < 3 {
            tokio::time::sleep(FAST).await;
            let now = sweeper_renewed_at(&client, &db).await;
            if now.is_some() && now != last {
                passes += 1;
                last = now;
            }
        }
    })
    .await;

    let untouched = format!(
        "SELECT count(*) FROM {outbox} WHERE transport = 'x' AND attempts = 0 AND last_error IS NULL \
         AND claim_token IS NULL"
    );
    assert_eq!(scalar(&client, &untouched).await, 36, "every x row waits, never claimed or counted");
    assert_eq!(scalar(&client, &format!("SELECT count(*) FROM {dead}")).await, 0, "nothing is dead");
    assert_eq!(
        scalar(&client, &format!("SELECT count(*) FROM {queue} WHERE body = 'mixed-behind'")).await,
        0,
        "the queue row behind an x head waits for it"
    );
    let parked =
        format!("SELECT count(*) FROM {} WHERE parked_at IS NOT NULL", db.namespace().table("lanes"));
    assert_eq!(scalar(&client, &parked).await, 0, "no lane is parked");
    let status = namespace_status(&client, db.namespace()).await.unwrap();
    assert_eq!(status.unserved.len(), 1, "{:?}", status.unserved);
    let waiting = &status.unserved[0];
    assert_eq!((waiting.transport.as_str(), waiting.pending), ("x", 36));
    assert!(waiting.oldest_age.is_some());
    assert!(
        status.instances.iter().any(|i| i.worker == "sweeper" && i.transports == ["queue"]),
        "{:?}",
        status.instances
    );

    // The new version arrives; the old hosts keep running beside it.
    let x = Arc::new(FaultyTransport::new("x"));
    let new = host(&db, "new-1", Some(Arc::clone(&x))).await;
    let pending = format!("SELECT count(*) FROM {outbox}");
    eventually("the new host delivers every x row", || async { scalar(&client, &pending).await == 0 }).await;

    let accepted = x.accepted();
    let mut bodies: Vec<String> =
        accepted.iter().map(|(_, e)| String::from_utf8(e.body.clone()).unwrap()).collect();
    assert!(accepted.iter().all(|(_, e)| e.attempts == 0), "each was a first attempt");
    let lane_x: Vec<&String> = bodies.iter().filter(|b| b.starts_with("lane-x-")).collect();
    let expected: Vec<String> = (0..5).map(|n| format!("lane-x-{n}")).collect();
    assert_eq!(lane_x, expected.iter().collect::<Vec<_>>(), "the lane in order");
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 36, "every x row, the mixed lane's head included");
    assert_eq!(scalar(&client, &format!("SELECT count(*) FROM {dead}")).await, 0, "nothing is dead");
    assert_eq!(
        scalar(&client, &format!("SELECT count(*) FROM {queue} WHERE body = 'mixed-behind'")).await,
        1,
        "the row behind the head follows it"
    );
    assert!(namespace_status(&client, db.namespace()).await.unwrap().unserved.is_empty());

    within(async {
        new.shutdown().await;
        for host in old {
            host.shutdown().await;
        }
    })
    .await;
}
