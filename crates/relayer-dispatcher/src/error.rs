//! The dispatcher's error, grouped as the other workers' are: the setup, the schema, the
//! pool, or a storage failure of a pass.

use relayer_postgres::StorageError;

/// Why the dispatcher could not start, or why a pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The setup is unusable (e.g. no transport registered); nothing was started (OPT-5).
    #[error("dispatcher setup: {0}")]
    Setup(String),
    /// The namespace's schema is missing or too old: nothing was started (NS-3, OPT-5).
    #[error("dispatcher cannot start: {0}")]
    Schema(StorageError),
    /// No pooled connection could be had (the database is down or the pool exhausted).
    #[error("no pooled connection: {0}")]
    Pool(String),
    /// The database failed; a running dispatcher logs it and retries with backoff.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl DispatchError {
    pub(crate) fn pool(error: &bb8::RunError<tokio_postgres::Error>) -> Self {
        DispatchError::Pool(relayer_core::error_chain(error))
    }

    /// Whether retrying later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            DispatchError::Setup(_) | DispatchError::Schema(_) => false,
            DispatchError::Pool(_) => true,
            DispatchError::Storage(error) => error.is_transient(),
        }
    }
}
