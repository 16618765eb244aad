//! Why a consumer could not start, or why one of its passes failed.

use relayer_postgres::StorageError;

/// Why a consumer could not start, or why a receive, settle or heartbeat pass failed (the
/// pump logs those, backs off and carries on, RES-1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The namespace's schema is missing or too old: nothing was started (NS-3, OPT-5).
    #[error("the consumer cannot start: {0}")]
    Schema(StorageError),
    /// A statement failed or the connection broke.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// No pooled connection could be had.
    #[error("the consumer could not get a pooled connection")]
    Pool(#[source] bb8::RunError<tokio_postgres::Error>),
    /// Beginning, committing or rolling back an inbox transaction failed.
    #[error("the consumer failed {0} an inbox transaction")]
    Transaction(&'static str, #[source] tokio_postgres::Error),
}
