//! The state a lock shares with the guards it hands out: the shutdown signal that makes
//! every later attempt fail (LDR-4), and the idle sessions a released guard hands back.

use tokio_util::sync::CancellationToken;

use crate::session::IdleSessions;

/// State shared between a lock and its guards.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) shutdown: CancellationToken,
    pub(crate) idle: IdleSessions,
}
