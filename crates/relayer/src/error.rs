//! Why a host did not start. Whatever the error, nothing was started (OPT-5).

use relayer_core::DuplicateTransport;
use relayer_postgres::StorageError;
use relayer_worker::WorkerKind;

/// Why [`RelayerBuilder::start`](crate::RelayerBuilder::start) refused to start the host.
/// Nothing was started: no worker runs, no lease or instance row was written.
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
    DuplicateTransport(#[source] DuplicateTransport),
    /// Leadership was set for a worker that cannot use it.
    #[error("relayer setup: leadership was set for the {worker}, {reason}")]
    Leadership {
        /// The worker named in `.leadership(…)`.
        worker: WorkerKind,
        /// Why it cannot be used, e.g. `which this host does not run`.
        reason: &'static str,
    },
    /// The instance id is empty.
    #[error("relayer setup: the instance id must not be empty")]
    EmptyInstanceId,
    /// PostgreSQL could not be reached.
    #[error("relayer could not connect to PostgreSQL")]
    Connect(#[source] StorageError),
    /// No pooled connection could be had while starting.
    #[error("relayer could not get a pooled connection while starting")]
    Pool(#[source] bb8::RunError<tokio_postgres::Error>),
    /// The namespace's schema is missing or older than this build needs (NS-3).
    #[error("relayer cannot start: {0}")]
    Schema(#[source] StorageError),
    /// The dispatcher refused its setup.
    #[cfg(feature = "dispatcher")]
    #[error("relayer could not set up the dispatcher")]
    Dispatcher(#[source] relayer_dispatcher::DispatchError),
    /// The dead-letter policies do not fit the host's subscriptions (DLP-6).
    #[cfg(feature = "dead-letters")]
    #[error("relayer setup: {0}")]
    DeadLetters(#[source] relayer_core::DeadLetterSetupError),
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
    #[error("relayer could not record this instance's settings fingerprints")]
    Fingerprints(#[source] StorageError),
}
