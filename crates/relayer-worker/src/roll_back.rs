//! Ending a failed pass's transaction without ever waiting on a dead connection.

use std::time::Duration;

use relayer_core::error_chain;
use relayer_core::session::Session;

/// Rolls back the transaction `session` is in after a step of a pass failed, waiting at
/// most `patience` for the answer.
///
/// Best effort: a rollback that fails (the connection is gone) or does not answer in time
/// leaves the session in its transaction, and a session dropped inside a transaction
/// discards its connection, so the store rolls back when it closes. Either way the caller
/// reports the step's own error, not this one.
pub async fn roll_back_failed_pass<T: Session>(session: &mut T, patience: Duration) {
    match tokio::time::timeout(patience, session.rollback()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::debug!(target: "relayer::worker", cause = %error_chain(&error),
            "rolling back a failed pass failed; its session's connection will be discarded"),
        Err(_) => tracing::debug!(target: "relayer::worker", ?patience,
            "rolling back a failed pass did not finish in time; its session's connection will be discarded"),
    }
}
