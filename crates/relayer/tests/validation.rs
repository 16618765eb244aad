//! The setup checks that come before any I/O (OPT-5): each refusal names the setting,
//! worker or transport at fault. Every host here points at an address where nothing
//! listens, so a check that needed the database would fail to connect instead.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::postgres::{PgConnectionManager, StatementMode};
use relayer::{
    CleanupOptions, ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule,
    DispatcherOptions, Namespace, Relayer, RelayerBuilder, StartError, SweeperOptions,
};

/// Port 9 (discard) on loopback: nothing listens there on a test machine.
fn unreachable() -> relayer::tokio_postgres::Config {
    "host=127.0.0.1 port=9 user=app dbname=orders".parse().unwrap()
}

fn builder() -> RelayerBuilder {
    Relayer::builder(unreachable(), Namespace::default())
}

struct Ignore;

#[relayer::async_trait]
impl Handler for Ignore {
    async fn handle(&self, _: &QueueMessage) -> Outcome {
        Outcome::Ack
    }
}

async fn refusal(builder: RelayerBuilder) -> StartError {
    let error = builder.start().await.unwrap_err();
    assert!(!matches!(error, StartError::Connect(_) | StartError::Pool(_)), "checked after I/O: {error}");
    error
}

/// Each setup error is refused before the database is reached, and its message names the
/// builder setting (or the worker, transport, queue) at fault.
#[tokio::test]
async fn every_setup_error_is_refused_before_any_io_naming_its_setting_opt_5() {
    let dead_letters = DeadLetterPolicies::new([DeadLetterRule::outbox(
        "nats",
        "orders",
        DeadLetterPolicy::expire(Duration::from_secs(60)),
    )])
    .unwrap();
    let subscription = || Subscription::new("orders", ConsumerOptions::default()).unwrap();
    // A pool that has not connected yet: lending one needs no database.
    let lent = relayer::bb8::Pool::builder()
        .build_unchecked(PgConnectionManager::new(unreachable(), StatementMode::Prepared));
    let cases: Vec<(RelayerBuilder, &str)> = vec![
        (
            builder().cleanup(CleanupOptions::default()).instance_id(" "),
            "relayer setup: instance_id: must not be empty (it is this instance's lease owner and fingerprint key)",
        ),
        (
            builder().dispatcher(DispatcherOptions::default()),
            "relayer setup: the dispatcher needs a transport but none is registered; add one with `.transport(…)`",
        ),
        (
            builder()
                .queue_transport()
                .dispatcher(
                    DispatcherOptions::builder().send_timeout(Some(Duration::from_secs(12))).build().unwrap(),
                )
                .sweeper(SweeperOptions::builder().lease_duration(Duration::from_secs(20)).build().unwrap()),
            "relayer setup: dispatcher.send_timeout: 12s must be at most half of sweeper.lease_duration (20s)",
        ),
        (
            builder().consumer(subscription(), Arc::new(Ignore)).consumer(subscription(), Arc::new(Ignore)),
            "relayer setup: queue \"orders\" has two subscriptions on this host; raise its concurrency instead",
        ),
        (
            builder().queue_transport().dead_letters(dead_letters, DeadLetterOptions::default()),
            "relayer setup: a dead-letter policy redrives into transport \"nats\", which this host does not register",
        ),
        (
            builder().queue_transport().dispatcher(DispatcherOptions::default()).dispatcher_pool_size(0),
            "relayer setup: dispatcher_pool_size: 0 connections; a pool needs at least one",
        ),
        (
            builder().cleanup(CleanupOptions::default()).maintenance_pool_size(0),
            "relayer setup: maintenance_pool_size: 0 connections; a pool needs at least one",
        ),
        (
            builder().queue_transport().queue_pool_size(0),
            "relayer setup: queue_pool_size: 0 connections; a pool needs at least one",
        ),
        (
            builder().cleanup(CleanupOptions::default()).dispatcher_pool_size(4),
            "relayer setup: dispatcher_pool_size: set, but this host runs no dispatcher",
        ),
        (
            builder().cleanup(CleanupOptions::default()).queue_pool_size(4),
            "relayer setup: queue_pool_size: set, but this host does not register the queue transport (`queue_transport()`)",
        ),
        (
            builder().pool(lent).cleanup(CleanupOptions::default()).maintenance_pool_size(2),
            "relayer setup: maintenance_pool_size: set, but the maintenance work runs on the application's \
             pool (`pool(…)`), which the host does not size",
        ),
    ];
    for (builder, expected) in cases {
        assert_eq!(refusal(builder).await.to_string(), expected);
    }
}

/// A setup that passes every check goes on to the database, where the unreachable address
/// is what fails: the checks above refused for their own reason, not for lack of one.
#[tokio::test]
async fn a_sound_setup_goes_on_to_connect() {
    let sound = builder()
        .queue_transport()
        .dispatcher(DispatcherOptions::default())
        .dispatcher_pool_size(3)
        .queue_pool_size(2)
        .cleanup(CleanupOptions::default())
        .maintenance_pool_size(1);
    let error = sound.start().await.unwrap_err();
    assert!(matches!(error, StartError::Connect(_)), "{error:?}");
}
