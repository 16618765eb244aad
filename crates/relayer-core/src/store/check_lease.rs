//! Telling a lease still held from one lost (LDR-6).

use async_trait::async_trait;

use super::{Lease, Store};

/// Checking a lease without taking, renewing or waiting for it: retention cleanup, whose
/// leased batch answering "not held" may mean lost — or only that a contender's probe held
/// the lease row at that instant (LDR-2, LDR-6).
#[async_trait]
pub trait CheckLease: Store {
    /// Whether `lease` is still its owner's, at its term, and unexpired on the store's clock.
    /// A plain read: it never waits for a lock on the lease.
    async fn holds(&self, lease: &Lease) -> Result<bool, Self::Error>;
}
