//! Retrying a statement that lost a conflict with a concurrent transaction.
//!
//! A deadlock, a serialization failure or a lock not available is not an outage: the
//! statement is likely to succeed a moment later. So it is retried at once, after a short
//! jittered pause ([`conflict_pause`]), up to [`CONFLICT_RETRIES`] times; only then does the
//! failure reach the pass loop and its backoff. Every other error is returned at once.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};

use relayer_core::backoff::{CONFLICT_RETRIES, conflict_pause};
use relayer_core::store::StoreError;

use crate::stats::{ConsumerStats, Counter};

/// Runs `statement` until it succeeds, fails with anything but a conflict, or has lost
/// [`CONFLICT_RETRIES`] conflicts in a row; each lost conflict is counted in `stats`.
pub(crate) async fn retrying_conflicts<T, E: StoreError, F: Future<Output = Result<T, E>>>(
    stats: &ConsumerStats,
    queue: &str,
    what: &str,
    mut statement: impl FnMut() -> F,
) -> Result<T, E> {
    let mut attempt = 0;
    loop {
        match statement().await {
            Err(error) if error.is_conflict() && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                stats.add(Counter::Conflicts, 1);
                let pause = conflict_pause(attempt, jitter());
                tracing::info!(target: "relayer::consumer", %queue, attempt, ?pause,
                    cause = %relayer_core::error_chain(&error), "{what} lost a conflict; retrying at once");
                tokio::time::sleep(pause).await;
            }
            result => return result,
        }
    }
}

/// Random enough bits for a jitter: the standard library's per-instance hash keys.
fn jitter() -> u64 {
    RandomState::new().hash_one(std::time::Instant::now())
}
