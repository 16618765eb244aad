//! The lane loop in a namespace that has never had a lane row: it claims nothing and stays
//! quiet through a database outage (the unordered loops report it, once); the first lane
//! row wakes it for good.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::{FaultyTransport, database, options, writer};
use relayer_core::{NewMessage, TransportRegistry};
use relayer_dispatcher::{Dispatcher, PassReport};
use relayer_postgres::{PgSource, asynchronous_commit};
use relayer_test_support::{TcpProxy, within};
use relayer_worker::{PassOutcome, WorkerEvent};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn the_lane_loop_stays_quiet_until_the_namespace_has_a_lane_row() {
    let db = database().await;
    let config = db.config();
    let upstream = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(tokio_postgres::config::Host::Tcp(host)), Some(port)) => {
            format!("{host}:{port}").parse::<SocketAddr>().unwrap()
        }
        other => panic!("the test database is not on TCP: {other:?}"),
    };
    let proxy = TcpProxy::start(upstream).await;
    let mut through_proxy = tokio_postgres::Config::new();
    through_proxy
        .host("127.0.0.1")
        .port(proxy.address().port())
        .user(config.get_user().unwrap())
        .dbname(config.get_dbname().unwrap());
    if let Some(name) = config.get_application_name() {
        through_proxy.application_name(name);
    }

    let transport = Arc::new(FaultyTransport::new("test"));
    let registry = Arc::new(TransportRegistry::new().with(transport.clone()).unwrap());
    let pool = relayer_postgres::connect_pool(asynchronous_commit(through_proxy), 2).await.unwrap();
    let source = PgSource::new(pool, db.namespace()).with_transports(registry.names());
    let dispatcher =
        Dispatcher::new(source, db.namespace().clone(), options().concurrency(1).build().unwrap(), registry)
            .unwrap();
    let mut events = dispatcher.subscribe();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await }
    });

    within(async { while !matches!(events.recv().await.unwrap(), WorkerEvent::PassSucceeded { .. }) {} })
        .await;
    // The database goes away: one unordered loop fails its passes; the lane loop, which
    // has never seen a lane row, keeps passing empty without reporting a failure.
    proxy.cut();
    within(async {
        let (mut failed, mut quiet) = (0, 0);
        while failed < 1 || quiet < 2 {
            match events.recv().await.unwrap() {
                WorkerEvent::PassFailed { .. } => failed += 1,
                WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } if failed > 0 => {
                    assert_eq!(
                        report,
                        PassReport::default(),
                        "no pass can do anything while the database is away"
                    );
                    quiet += 1;
                }
                _ => {}
            }
        }
    })
    .await;

    // Back, with a lane row: the lane loop finds it and delivers it.
    proxy.restore();
    let client = db.connect().await;
    writer(&dispatcher)
        .enqueue(&client, &[NewMessage::new("test", "orders", b"in a lane".to_vec()).lane("customer-1")])
        .await
        .unwrap();
    within(async {
        loop {
            if let WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. } =
                events.recv().await.unwrap()
                && report.lanes > 0
                && report.sent > 0
            {
                break;
            }
        }
    })
    .await;
    assert_eq!(transport.accepted().len(), 1);
    shutdown.cancel();
    within(task).await.unwrap().unwrap();
}
