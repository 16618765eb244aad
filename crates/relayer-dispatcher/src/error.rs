//! The store errors of a dispatch pass, as the one worker error shape
//! ([`WorkerError`](relayer_worker::WorkerError)).

use relayer_worker::WorkerError;

/// `error`, from a store call made while `doing`, as a [`WorkerError`] that keeps the
/// store's transient-or-not verdict.
pub(crate) fn store<E: relayer_core::StoreError>(doing: &'static str) -> impl FnOnce(E) -> WorkerError {
    move |error| WorkerError::store(doing, error)
}
