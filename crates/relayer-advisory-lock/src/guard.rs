//! The guard of a held advisory lock.
//!
//! The guard owns the session that holds the lock, so the lock lives exactly as long as the
//! guard has its session. [`release`](LockGuard::release) unlocks and, if the unlock is
//! confirmed by the same backend, hands the now lock-free session back for reuse. Every other
//! ending — a drop without release, a failed check, a failed unlock — closes the session,
//! which makes the server free the lock.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::{LockError, LockErrorKind, LockGuard};

use crate::TARGET;
use crate::session::{Session, SessionError};
use crate::shared::Shared;

/// A held PostgreSQL advisory lock; see [`PgAdvisoryLock`](crate::PgAdvisoryLock).
#[derive(Debug)]
pub(crate) struct PgLockGuard {
    resource: String,
    key: i64,
    /// `None` once the lock is known lost: the session was closed.
    session: Option<Session>,
    shared: Arc<Shared>,
}

impl PgLockGuard {
    pub(crate) fn new(resource: &str, key: i64, session: Session, shared: Arc<Shared>) -> Self {
        PgLockGuard { resource: resource.to_owned(), key, session: Some(session), shared }
    }

    /// Closes the session (which frees the lock if the server still had it) and reports a loss.
    fn lost(&mut self, why: &str, source: Option<SessionError>) -> LockError {
        let pid = self.session.take().map(|s| s.pid());
        tracing::warn!(
            target: TARGET, resource = %self.resource, key = self.key, pid, why, cause = ?source,
            "advisory lock lost"
        );
        let error = LockError::new(&self.resource, LockErrorKind::Lost);
        match source {
            Some(SessionError::Database(e)) => error.with_source(e),
            Some(SessionError::WrongBackend { expected, actual }) => error.with_source(format!(
                "the check ran on backend pid {actual}, the lock was taken on pid {expected}"
            )),
            Some(SessionError::Unanswered(bound)) => error.with_source(crate::session::unanswered(bound)),
            None => error.with_source(why.to_owned()),
        }
    }
}

#[async_trait]
impl LockGuard for PgLockGuard {
    fn resource(&self) -> &str {
        &self.resource
    }

    async fn ensure_held(&mut self) -> Result<(), LockError> {
        let Some(session) = &self.session else {
            return Err(LockError::new(&self.resource, LockErrorKind::Lost)
                .with_source("the lock was already found lost"));
        };
        if session.is_closed() {
            return Err(self.lost("the lock session has closed", None));
        }
        match session.holds(self.key).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.lost("the session no longer holds the lock", None)),
            Err(e) => Err(self.lost("the lock session failed its check", Some(e))),
        }
    }

    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        let Some(session) = self.session.take() else {
            return Err(LockError::new(&self.resource, LockErrorKind::Lost)
                .with_source("the lock was already found lost"));
        };
        match session.unlock(self.key).await {
            Ok(true) => {
                tracing::debug!(
                    target: TARGET, resource = %self.resource, key = self.key, pid = session.pid(),
                    "advisory lock released"
                );
                // Unlocked once, and it was taken once: the session now holds nothing.
                if !self.shared.shutdown.is_cancelled() {
                    self.shared.idle.put(session);
                }
                Ok(())
            }
            Ok(false) => {
                self.session = Some(session);
                Err(self.lost("the unlock found no lock held by this session", None))
            }
            Err(SessionError::Database(e)) => {
                // The session's state is unknown: it is dropped (closed) here, never reused.
                tracing::warn!(
                    target: TARGET, resource = %self.resource, key = self.key, error = %e,
                    "advisory lock release failed; closing its session"
                );
                drop(session);
                Err(LockError::new(&self.resource, LockErrorKind::Database).with_source(e))
            }
            Err(SessionError::Unanswered(bound)) => {
                // The socket is closed already; the server frees the lock when it notices.
                drop(session);
                Err(LockError::new(&self.resource, LockErrorKind::Database)
                    .with_source(crate::session::unanswered(bound)))
            }
            Err(e @ SessionError::WrongBackend { .. }) => {
                self.session = Some(session);
                Err(self.lost("the unlock ran on another backend", Some(e)))
            }
        }
    }
}

impl Drop for PgLockGuard {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            // Dropping the client ends the connection task, which terminates the session;
            // the server then frees the lock.
            tracing::debug!(
                target: TARGET, resource = %self.resource, key = self.key, pid = session.pid(),
                "advisory lock guard dropped without release; closing its session"
            );
        }
    }
}
