//! Locks and leadership (LDR-1, LDR-3, LDR-4).
//!
//! Workers that must run on one replica at a time ask a [`DistributedLock`] for a named
//! resource before each pass. The lock never waits: `Ok(None)` means another holder has it
//! and this replica skips its turn. A database error is an `Err`, never `Ok(None)`, so a
//! broken lock is seen as a failure rather than as someone else's turn. A held lock is a
//! [`LockGuard`]; the worker calls [`LockGuard::ensure_held`] before each pass and gives up
//! leadership on any error.
//!
//! [`advisory_lock_key`] is the one key derivation every relayer version and every other
//! language must share: changing it lets two replicas lead at once during a rolling deploy.

use std::fmt;

use async_trait::async_trait;
use sha1::{Digest, Sha1};

/// A non-blocking, cross-process lock on named resources.
#[async_trait]
pub trait DistributedLock: Send + Sync + 'static {
    /// Tries once to take `resource`. `Ok(None)`: someone else holds it. Never waits for it.
    async fn try_lock(&self, resource: &str) -> Result<Option<Box<dyn LockGuard>>, LockError>;
}

/// A held lock. Dropping it releases the lock (possibly a moment later, when its session
/// closes); [`release`](LockGuard::release) does so at once and reports errors.
#[async_trait]
pub trait LockGuard: Send + Sync + fmt::Debug {
    /// The resource this guard holds.
    fn resource(&self) -> &str;

    /// A number that grows with each new holder of the resource, when the lock has one
    /// (a lease's term), for fencing statements; `None` for locks without terms.
    fn term(&self) -> Option<i64> {
        None
    }

    /// Confirms the lock is still held (its session is alive and still owns it). An error
    /// means leadership is lost or unknown: stop leading.
    async fn ensure_held(&mut self) -> Result<(), LockError>;

    /// Releases the lock now.
    async fn release(self: Box<Self>) -> Result<(), LockError>;
}

/// The advisory-lock key of `resource`: the first 8 bytes, big-endian, of
/// SHA-1(`"relayer:" + resource`) read as a signed 64-bit integer (LDR-3).
///
/// ```
/// assert_eq!(relayer_core::advisory_lock_key("sweeper"), relayer_core::advisory_lock_key("sweeper"));
/// ```
pub fn advisory_lock_key(resource: &str) -> i64 {
    let digest = Sha1::new().chain_update(b"relayer:").chain_update(resource.as_bytes()).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// Why a lock could not be taken, checked or released.
#[derive(Debug, thiserror::Error)]
#[error("lock {resource:?}: {kind}")]
pub struct LockError {
    resource: String,
    kind: LockErrorKind,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// What went wrong with a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockErrorKind {
    /// The database could not be reached or failed the statement.
    Database,
    /// Shutdown has begun; no new lock is granted (LDR-4).
    ShuttingDown,
    /// The lock is no longer held: its session ended or another holder took over.
    Lost,
    /// The connection cannot hold a session lock (a transaction-mode pooler, LDR-6).
    Unsupported,
}

impl fmt::Display for LockErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockErrorKind::Database => "database error",
            LockErrorKind::ShuttingDown => "refused: shutdown has begun",
            LockErrorKind::Lost => "the lock is no longer held",
            LockErrorKind::Unsupported => "session locks cannot work on this connection",
        })
    }
}

impl LockError {
    /// A new error about `resource`.
    pub fn new(resource: impl Into<String>, kind: LockErrorKind) -> Self {
        LockError { resource: resource.into(), kind, source: None }
    }

    /// Attaches the cause.
    pub fn with_source(mut self, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> LockErrorKind {
        self.kind
    }

    /// The resource concerned.
    pub fn resource(&self) -> &str {
        &self.resource
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned vectors: a change here lets two replicas of different versions lead at once.
    /// Other implementations can check themselves against this table.
    #[test]
    fn advisory_key_vectors_are_pinned() {
        // Computed independently: python3 -c 'import hashlib,struct;
        //   print(struct.unpack(">q", hashlib.sha1(b"relayer:" + r.encode()).digest()[:8])[0])'
        let vectors: &[(&str, i64)] = &[
            ("sweeper", 2103012997491337815),
            ("cleanup", -8382382505405864727),
            ("migrate:public.relayer_", -336992247105831406),
            ("dead-letters", -8638707817583516578),
            ("é-ünïcødé/锁", 6133178284898397283),
            ("", -8962934027707191529),
        ];
        for (resource, key) in vectors {
            assert_eq!(advisory_lock_key(resource), *key, "{resource}");
        }
    }
}
