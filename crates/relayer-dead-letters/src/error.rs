//! Why the policy worker could not start, or why a pass failed.

use relayer_postgres::StorageError;

/// Why the dead-letter policy worker could not start, or why a pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterError {
    /// The namespace's schema is missing or too old: nothing was started (NS-3, OPT-5).
    #[error("dead-letter policies cannot start: {0}")]
    Schema(StorageError),
    /// A statement failed or the connection broke.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No pooled connection could be had.
    #[error("dead-letter policies could not get a pooled connection")]
    Pool(#[source] bb8::RunError<tokio_postgres::Error>),
}
