//! Waiting in tests without asserting on time.
//!
//! Tests wait for observable state ("the row is gone", "the lease changed hands") or for a
//! future to finish, with a generous bound that only exists so a broken build fails instead
//! of hanging. The bound is never a claim about speed.

use std::future::Future;
use std::time::Duration;

/// How long a test waits for something that must happen before calling it hung.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `condition` every 50 ms until it holds; panics naming `what` after [`PATIENCE`].
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {PATIENCE:?} waiting until {what}");
}

/// Awaits `future`; panics if it has not finished after [`PATIENCE`] (something blocked).
pub async fn within<T>(future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {PATIENCE:?}: something blocked or never happened"),
    }
}
