//! relayer: reliable messaging on PostgreSQL.
//!
//! # The model
//!
//! A service writes messages into an outbox table inside its own transaction
//! ([`RelayerHost::writer`]); background workers, hosted as tokio tasks by a
//! [`RelayerHost`], keep them moving: the **dispatcher** sends committed rows to their
//! transports, the **recovery sweeper** finds rows nobody sent (a crash, an expired claim),
//! **retention cleanup** keeps the dead and inbox tables bounded, and **dead-letter
//! policies** redrive or expire dead letters per message type. You describe the host
//! once with [`Relayer::builder`] — the database, the namespace, the transports and the
//! workers it runs, each with its options — and [`start`](RelayerBuilder::start) it.
//!
//! Starting checks the whole setup first and starts *nothing* when something is wrong
//! (OPT-5): a missing or old schema, a dispatcher or sweeper without a transport, two
//! transports with one name. Any worker may be left out (LIF-4): a test host that must not
//! dispatch simply does not add the dispatcher. A led worker — the sweeper, cleanup, the
//! dead-letter policies — takes its [`LeaderElection`] with its options ([`Led`]); the
//! dispatcher and the consumers run on every instance and take none. Each pool the host
//! opens is sized on its own from what its workers run at once, or as set (see
//! `docs/connections.md`). Options are fixed once the host runs and
//! readable from it ([`RelayerHost::options`]); a change means a restart. Every instance
//! records a fingerprint of each worker's settings in the namespace's `instances` table and
//! compares it with the other live instances'; replicas that disagree on timing or
//! retention are logged at WARN and listed by [`RelayerHost::disagreements`] (OPT-4).
//!
//! [`RelayerHost::shutdown`] cancels the workers, waits for passes in flight, releases
//! leases and locks, and returns; calling it twice is harmless (LIF-1). **Shut the host
//! down before dropping it or stopping the runtime**: dropping it only cancels the workers
//! without waiting, and leases are then left to expire instead of being released.
//!
//! ```no_run
//! # #[cfg(all(feature = "dispatcher", feature = "cleanup", feature = "queue"))]
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use relayer::{CleanupOptions, DispatcherOptions, Namespace, NewMessage, Relayer};
//!
//! let config: tokio_postgres::Config = "host=127.0.0.1 user=postgres dbname=app".parse()?;
//! let host = Relayer::builder(config.clone(), Namespace::default())
//!     .queue_transport() // relayer's PostgreSQL queue, registered as "queue"
//!     .dispatcher(DispatcherOptions::default())
//!     .cleanup(CleanupOptions::default())
//!     .start()
//!     .await?;
//!
//! let (mut client, connection) = config.connect(tokio_postgres::NoTls).await?;
//! tokio::spawn(connection);
//! let tx = client.transaction().await?;
//! // … the service's own writes on `tx` …
//! host.writer().enqueue(&tx, &[NewMessage::new("queue", "orders.created", b"{}".to_vec())]).await?;
//! tx.commit().await?; // delivered at least once from here on
//!
//! host.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! The facade re-exports the pieces behind cargo features, so a service that wants
//! everything writes one dependency, and one that wants a single piece depends on that
//! sub-crate alone (the crate map is in the repository README).
//!
//! | feature | brings |
//! |---|---|
//! | `postgres` (default) | [`postgres`]: schema, migrations, every SQL statement; the host builder |
//! | `dispatcher` | [`dispatcher`] and [`RelayerBuilder::dispatcher`] |
//! | `sweeper` | [`sweeper`] and [`RelayerBuilder::sweeper`] |
//! | `cleanup` | [`cleanup`] and [`RelayerBuilder::cleanup`] |
//! | `queue` | [`queue`] and [`RelayerBuilder::queue_transport`] |
//! | `consumer` | [`consumer`] and [`RelayerBuilder::consumer`] |
//! | `advisory-lock` | [`advisory_lock`] and [`LeaderElection::AdvisoryLock`] |
//! | `dead-letters` | [`dead_letters`] and [`RelayerBuilder::dead_letters`] (brings `advisory-lock`) |
//! | `tls-rustls` | TLS through rustls for every connection: `postgres::rustls_tls`, `postgres::connector_from_url` (libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey`); any other tokio-postgres TLS connector works without it, through [`RelayerBuilder::tls`] |
//! | `metrics` | worker counters, pass durations and gauges through the `metrics` facade (OBS-2; see the `metrics` module docs in the source for every name) |
//! | `nats` | [`nats`]: the NATS JetStream transport |
//! | `rabbitmq` | [`rabbitmq`]: the RabbitMQ transport |
//! | `full` | all of the above but the broker transports |
#![deny(missing_docs)]

// The repository README's examples, compiled with the features its `[dependencies]` line
// names (the self dev-dependency enables `full`, a superset).
#[cfg(all(doctest, feature = "dispatcher", feature = "sweeper", feature = "cleanup", feature = "queue"))]
#[doc = include_str!("../../../README.md")]
mod readme {}

#[cfg(all(
    doctest,
    feature = "dispatcher",
    feature = "sweeper",
    feature = "cleanup",
    feature = "queue",
    feature = "advisory-lock",
    feature = "tls-rustls"
))]
#[doc = include_str!("../../../docs/connections.md")]
mod connections {}

pub use relayer_core as core;
pub use relayer_core::{
    Capabilities, CleanupOptions, ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy,
    DeadLetterRule, Delivery, DispatcherOptions, DistributedLock, Envelope, Headers, LockGuard, MessageId,
    Namespace, NewMessage, Retention, SendOutcome, SweeperOptions, Timestamp, Transport, TransportError,
    TransportRegistry, async_trait, error_chain,
};

#[cfg(feature = "postgres")]
mod builder;
#[cfg(feature = "postgres")]
mod connect;
#[cfg(feature = "consumer")]
mod consumers;
#[cfg(feature = "dead-letters")]
mod dead_letters_setup;
#[cfg(feature = "postgres")]
mod error;
#[cfg(feature = "postgres")]
mod fingerprints;
#[cfg(feature = "postgres")]
mod host;
#[cfg(feature = "postgres")]
mod instance_id;
#[cfg(feature = "postgres")]
mod leader_election;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "postgres")]
mod options;
#[cfg(feature = "postgres")]
mod pool_sizes;
#[cfg(feature = "postgres")]
mod settings_record;
#[cfg(feature = "postgres")]
mod start;
#[cfg(feature = "postgres")]
mod validate;
#[cfg(feature = "postgres")]
mod workers;
#[cfg(feature = "postgres")]
mod writer;

#[cfg(feature = "postgres")]
pub use builder::{Relayer, RelayerBuilder};
#[cfg(feature = "postgres")]
pub use error::StartError;
#[cfg(feature = "postgres")]
pub use fingerprints::{SettingDifference, SettingsDisagreement};
#[cfg(feature = "postgres")]
pub use host::{DEFAULT_SHUTDOWN_TIMEOUT, RelayerHost, SHUTDOWN_MARGIN, ShutdownReport};
#[cfg(feature = "postgres")]
pub use leader_election::{LeaderElection, Led};
#[cfg(feature = "postgres")]
pub use options::RelayerOptions;
#[cfg(feature = "postgres")]
pub use relayer_postgres::{EnqueueError, Enqueued, OutboxWriter};
#[cfg(feature = "postgres")]
pub use relayer_worker::{Leadership, WorkerError, WorkerKind};
#[cfg(feature = "postgres")]
pub use writer::{QUEUE_TRANSPORT, writer};

/// The PostgreSQL driver relayer is built on, at the version relayer uses: name its
/// `Config`, `Client` and `Transaction` through it rather than guessing a matching version.
#[cfg(feature = "postgres")]
pub use tokio_postgres;

/// The connection pool of the host's workers (`bb8`): [`postgres::PgPool`] is a `bb8::Pool`.
#[cfg(feature = "postgres")]
pub use bb8;

/// PostgreSQL storage (`relayer-postgres`).
#[cfg(feature = "postgres")]
pub use relayer_postgres as postgres;

/// The dispatcher worker (`relayer-dispatcher`).
#[cfg(feature = "dispatcher")]
pub use relayer_dispatcher as dispatcher;

/// The send path the dispatcher and the sweeper share (`relayer-delivery`): build a
/// sweeper's [`SendPath`](relayer_delivery::SendPath) from it.
#[cfg(any(feature = "dispatcher", feature = "sweeper"))]
pub use relayer_delivery as delivery;

/// The recovery sweeper (`relayer-sweeper`).
#[cfg(feature = "sweeper")]
pub use relayer_sweeper as sweeper;

/// Retention cleanup (`relayer-cleanup`).
#[cfg(feature = "cleanup")]
pub use relayer_cleanup as cleanup;

/// relayer's PostgreSQL queue transport (`relayer-queue`).
#[cfg(feature = "queue")]
pub use relayer_queue as queue;

/// Dead-letter policies (`relayer-dead-letters`).
#[cfg(feature = "dead-letters")]
pub use relayer_dead_letters as dead_letters;

/// Session advisory locks (`relayer-advisory-lock`).
#[cfg(feature = "advisory-lock")]
pub use relayer_advisory_lock as advisory_lock;

/// relayer's queue consumer: subscriptions, handlers, the inbox boundary.
#[cfg(feature = "consumer")]
pub use relayer_consumer as consumer;

/// The NATS JetStream transport (`relayer-nats`).
#[cfg(feature = "nats")]
pub use relayer_nats as nats;

/// The RabbitMQ transport (`relayer-rabbitmq`).
#[cfg(feature = "rabbitmq")]
pub use relayer_rabbitmq as rabbitmq;
