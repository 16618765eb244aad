//! A silent network never stalls a worker past a bound (RES-5): a host whose every connection
//! goes through a proxy that stops forwarding without closing anything — the black hole a
//! half-open connection or a dropped route makes.
//!
//! No timing is asserted: each step waits, within a generous deadline, for an outcome (a
//! failed pass, a lease held by the other instance, a delivered message, a returned
//! shutdown).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::net::SocketAddr;
use std::time::Duration;

use relayer::tokio_postgres::{Client, Config};
use relayer::{NewMessage, Relayer, RelayerHost, SweeperOptions};
use relayer_test_support::{TcpProxy, TestDb, eventually, within};
use relayer_worker::WorkerEvent;

/// The sweeper's lease: short, so it passes while the test waits; the host's statement
/// timeout is half of it.
const LEASE: Duration = Duration::from_secs(4);

/// The test database's TCP address (the proxy's upstream).
async fn upstream(db: &TestDb) -> SocketAddr {
    let config = db.config();
    let host = match config.get_hosts().first() {
        Some(relayer::tokio_postgres::config::Host::Tcp(name)) => name.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    tokio::net::lookup_host((host.as_str(), port)).await.unwrap().next().unwrap()
}

/// The test database's settings, reached through `proxy` instead.
fn through(db: &TestDb, proxy: &TcpProxy) -> Config {
    let direct = db.config();
    let mut config = Config::new();
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
    config.application_name("relayer-black-holed");
    config
}

/// A host named `instance` on `config` with the queue transport and a lease-led sweeper
/// that recovers nothing within the test (recovery delay 1 h), and a dispatcher if asked.
async fn host(db: &TestDb, config: Config, instance: &str, dispatcher: bool) -> RelayerHost {
    let sweeper = SweeperOptions::builder()
        .sweep_interval(Duration::from_millis(200))
        .lease_duration(LEASE)
        .recovery_delay(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let builder = Relayer::builder(config, db.namespace().clone())
        .instance_id(instance)
        .queue_transport()
        .sweeper(sweeper);
    let builder =
        if dispatcher { builder.dispatcher(relayer::DispatcherOptions::default()) } else { builder };
    builder.start().await.unwrap()
}

/// The owner of the sweeper's live lease, on the database clock.
async fn sweeper_lease_owner(client: &Client, db: &TestDb) -> Option<String> {
    let sql =
        format!("SELECT owner FROM {} WHERE job = $1 AND expires_at > now()", db.namespace().table("leases"));
    let rows = client.query(&sql, &[&relayer::sweeper::LEASE_JOB]).await.unwrap();
    rows.first().map(|row| row.get(0))
}

async fn queued(client: &Client, db: &TestDb) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table("queue"));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// RES-5: host A reaches PostgreSQL through a proxy that goes silent. A's dispatcher
/// notices (a pass fails on its statement timeout instead of hanging), A's sweeper lease
/// passes to host B, and when the path returns A delivers again. Then, black-holed once
/// more, A's `shutdown_within` returns, naming the worker it abandoned.
#[tokio::test]
async fn a_black_holed_host_notices_hands_over_its_lease_recovers_and_shuts_down_res_5() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let proxy = TcpProxy::start(upstream(&db).await).await;

    let a = host(&db, through(&db, &proxy), "host-a", true).await;
    let mut dispatcher_events = a.dispatcher().unwrap().subscribe();
    eventually("host A leads the sweeper", || async {
        sweeper_lease_owner(&client, &db).await.as_deref() == Some(a.lease_owner())
    })
    .await;

    proxy.stall();
    // The dispatcher's next pass gets no answer: it fails within its statement timeout
    // and is retried, instead of waiting for the kernel.
    within(async {
        loop {
            if let WorkerEvent::PassFailed { .. } = dispatcher_events.recv().await.unwrap() {
                return;
            }
        }
    })
    .await;
    // Another instance takes the lease A can no longer renew.
    let b = host(&db, db.config(), "host-b", false).await;
    eventually("host B takes over the sweeper lease", || async {
        sweeper_lease_owner(&client, &db).await.as_deref() == Some(b.lease_owner())
    })
    .await;

    // The path returns: A's dispatcher (the only one) delivers what is written now.
    proxy.restore();
    let tx = client.transaction().await.unwrap();
    a.writer().enqueue(&tx, &[NewMessage::new("queue", "orders", b"{}".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
    eventually("host A delivers again once the network is back", || async {
        queued(&client, &db).await == 1
    })
    .await;

    // Black-holed again, shutdown still returns: what could not stop in time is abandoned
    // and named (the sweeper's lease release can never be answered).
    proxy.stall();
    let report = within(a.shutdown_within(Duration::from_millis(200))).await;
    assert!(report.abandoned.iter().any(|worker| worker == "sweeper"), "{report:?}");
    assert!(!report.is_clean());
    // The other instance is untouched and still leads.
    assert_eq!(sweeper_lease_owner(&client, &db).await.as_deref(), Some(b.lease_owner()));
    within(b.shutdown()).await;
}

/// RES-5: even the default `shutdown()` returns while every connection is black-holed:
/// workers stuck on the network are abandoned after the shutdown bound.
#[tokio::test]
async fn shutdown_returns_while_the_network_is_black_holed_res_5() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let proxy = TcpProxy::start(upstream(&db).await).await;
    let a = host(&db, through(&db, &proxy), "host-a", true).await;
    eventually("host A leads the sweeper", || async {
        sweeper_lease_owner(&client, &db).await.as_deref() == Some(a.lease_owner())
    })
    .await;
    proxy.stall();
    let report = within(a.shutdown()).await;
    // Whatever it abandoned, it returned; a second call is harmless and returns at once.
    let again = within(a.shutdown()).await;
    assert!(again.is_clean(), "{report:?} then {again:?}");
}
