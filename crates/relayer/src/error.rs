//! Why a host did not start. Whatever the error, nothing was started (OPT-5).

use relayer_core::{DuplicateTransport, error_chain};
use relayer_postgres::StorageError;

/// Why [`RelayerBuilder::start`](crate::RelayerBuilder::start) refused to start the host.
/// Nothing was started: no worker runs, no lease or instance row was written.
///
/// The message says what failed, where and why — the whole cause chain, each cause once,
/// e.g. `relayer could not connect to PostgreSQL: connecting to PostgreSQL at host=db
/// port=5432 …: database error: … Connection refused` — so logging it with `%` is enough.
/// It has no [`source`](std::error::Error::source), so a chain printer (`anyhow`'s `{:#}`,
/// [`error_chain`](crate::error_chain)) says nothing twice; the typed cause is the
/// variant's field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A worker that sends messages is configured but no transport is registered.
    #[error(
        "relayer setup: the {workers} needs a transport but none is registered; add one with `.transport(…)`"
    )]
    NoTransport {
        /// The workers that need one, e.g. `dispatcher and sweeper`.
        workers: String,
    },
    /// Two transports were registered under one name.
    #[error("relayer setup: two transports are named {:?}; transport names must be unique", .0.0)]
    DuplicateTransport(DuplicateTransport),
    /// A builder setting cannot be used as given, or not with the others (a pool size of
    /// zero, a size for a pool the host does not open); the message names the setting.
    #[error("relayer setup: {setting}: {reason}")]
    Setting {
        /// The setting, as the builder method that sets it is named (`dispatcher_pool_size`).
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Options that are valid alone do not fit together, e.g. the dispatcher's
    /// `send_timeout` and the sweeper's `lease_duration` (TRN-5); the message names both.
    #[error("relayer setup: {}", error_chain(.0))]
    Options(relayer_core::OptionsError),
    /// A queue subscription does not fit the host (OPT-5).
    #[cfg(feature = "consumer")]
    #[error("relayer setup: queue {queue:?} {reason}")]
    Subscription {
        /// The subscribed queue.
        queue: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The subscriptions' dead-letter (or invalid-message) queues lead back to a queue they
    /// came from, so a dead-lettered message would move between them forever (QUE-2).
    #[cfg(feature = "consumer")]
    #[error(
        "relayer setup: dead-letter queues form a cycle: {cycle}; a message dead-lettered there would move between them forever — give one of them a dead-letter queue no subscription here consumes"
    )]
    DeadLetterCycle {
        /// The queues of the cycle in order, the first repeated at the end (`"a" → "b" → "a"`).
        cycle: String,
    },
    /// The instance id is empty.
    #[error(
        "relayer setup: instance_id: must not be empty (it is this instance's lease owner and fingerprint key)"
    )]
    EmptyInstanceId,
    /// PostgreSQL could not be reached.
    #[error("relayer could not connect to PostgreSQL: {}", error_chain(.0))]
    Connect(StorageError),
    /// No pooled connection could be had while starting.
    #[error("relayer could not get a pooled connection while starting: {}", error_chain(.0))]
    Pool(StorageError),
    /// The namespace's schema is missing or older than this build needs (NS-3).
    #[error("relayer cannot start: {}", error_chain(.0))]
    Schema(StorageError),
    /// The dispatcher refused its setup.
    #[cfg(feature = "dispatcher")]
    #[error("relayer could not set up the dispatcher: {}", error_chain(.0))]
    Dispatcher(relayer_worker::WorkerError),
    /// The dead-letter policies do not fit the host's subscriptions (DLP-6).
    #[cfg(feature = "dead-letters")]
    #[error("relayer setup: {}", error_chain(.0))]
    DeadLetters(relayer_core::DeadLetterSetupError),
    /// An outbox dead-letter policy names a transport the host does not register (OPT-5).
    #[cfg(feature = "dead-letters")]
    #[error(
        "relayer setup: a dead-letter policy redrives into transport {transport:?}, which this host does not register"
    )]
    DeadLetterTransport {
        /// The transport named by the policy.
        transport: String,
    },
    /// Recording this instance's settings fingerprints failed (OPT-4).
    #[error("relayer could not record this instance's settings fingerprints: {}", error_chain(.0))]
    Fingerprints(StorageError),
}
