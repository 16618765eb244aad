//! Why a sweeper pass failed.

use relayer_postgres::StorageError;

/// Why a sweeper pass failed. A running sweeper logs a failed pass with its cause chain and
/// retries with backoff (RES-1); the pass's claims and completions were rolled back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The namespace's schema is missing or too old (NS-3): the worker's first pass checks
    /// it, and retries with backoff until it is there (OPT-5 refuses it at the host's start).
    #[error("recovery sweeper cannot work on this namespace: {0}")]
    Schema(StorageError),
    /// A statement failed or the connection broke.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No pooled connection could be had.
    #[error("recovery sweeper could not get a pooled connection")]
    Pool(#[source] bb8::RunError<tokio_postgres::Error>),
    /// Beginning, rolling back or committing the pass's transaction failed.
    #[error("recovery sweeper: {0} failed")]
    Transaction(&'static str, #[source] tokio_postgres::Error),
    /// The lease could not be renewed at the end of the pass: another owner holds it. The
    /// pass's claims and completions were rolled back instead of committed.
    #[error("recovery sweeper lost lease {job:?} (term {term}) during its pass; its work was rolled back")]
    LeaseLost {
        /// The lease job.
        job: String,
        /// The term the pass held.
        term: i64,
    },
    /// The pass ran as long as its lease (or claim) allows and was rolled back, so it never
    /// holds the lease row, its row locks or an old snapshot past its lease (TRN-5).
    #[error("recovery sweeper pass outlived its lease ({limit:?}) and was rolled back")]
    PassTimedOut {
        /// How long the pass was allowed.
        limit: std::time::Duration,
    },
}

impl SweepError {
    /// Whether a later attempt may succeed without anyone acting: everything but a missing
    /// or old schema (which the running worker still retries, in case it is being migrated).
    pub fn is_transient(&self) -> bool {
        match self {
            SweepError::Schema(_) => false,
            SweepError::Storage(error) => error.is_transient(),
            SweepError::Pool(_)
            | SweepError::Transaction(..)
            | SweepError::LeaseLost { .. }
            | SweepError::PassTimedOut { .. } => true,
        }
    }
}
