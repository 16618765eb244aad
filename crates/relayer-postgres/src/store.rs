//! The core crate's store capabilities ([`relayer_core::store`]) on PostgreSQL.
//!
//! [`PgStore`] binds one client — a connection, a pooled connection or a transaction — to
//! one namespace's rendered statements, and implements the capability those statements
//! serve: [`ClaimOutbox`] and [`CompleteOutbox`] with [`OutboxStatements`], [`ScanRecovery`]
//! with [`RecoveryStatements`], [`DeleteExpired`] with [`RetentionStatements`] and
//! [`HoldLease`] with [`LeaseStatements`]. Each method delegates to the statement method of
//! the same name; the SQL, and the index each statement relies on, stay in those modules.
//! Calls made through handles on the same transaction share it.

use std::time::Duration;

use async_trait::async_trait;
use relayer_core::RetentionTable;
use relayer_core::store::{
    ClaimOutbox, Claimed, CompleteOutbox, Completion, CompletionReport, DeleteExpired, HoldLease, Lease,
    LockOutbox, LockedPage, PageRequest, ScanRecovery, Store, StoreError, UnderLease,
};
use uuid::Uuid;

use crate::error::StorageError;
use crate::exec::Executor;
use crate::leases::LeaseStatements;
use crate::outbox::OutboxStatements;
use crate::recovery::RecoveryStatements;
use crate::retention::RetentionStatements;

/// A store handle: `client` bound to `statements` (one of [`OutboxStatements`],
/// [`RecoveryStatements`], [`RetentionStatements`], [`LeaseStatements`]).
///
/// ```no_run
/// # async fn example(client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// use relayer_core::store::PageRequest;
/// use relayer_core::{Namespace, PassPlan, ScanRecovery};
/// use relayer_postgres::PgStore;
/// use relayer_postgres::recovery::RecoveryStatements;
///
/// let statements = RecoveryStatements::new(&Namespace::default());
/// let tx = client.transaction().await?;
/// let request =
///     PageRequest { plan: PassPlan::CaptureBoundary, recovery_delay: Duration::from_secs(30), limit: 100, leader: None };
/// let found = PgStore::new(&tx, &statements).lock_recovery_page(&request).await?;
/// // … send `found.locked`, complete them on `tx`, commit …
/// # let _ = found; Ok(()) }
/// ```
#[derive(Debug)]
pub struct PgStore<'c, C, S> {
    client: &'c C,
    statements: &'c S,
}

impl<'c, C, S> PgStore<'c, C, S> {
    /// Binds `client` to `statements`.
    pub fn new(client: &'c C, statements: &'c S) -> Self {
        PgStore { client, statements }
    }
}

impl<C, S> Clone for PgStore<'_, C, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C, S> Copy for PgStore<'_, C, S> {}

impl StoreError for StorageError {
    fn is_transient(&self) -> bool {
        StorageError::is_transient(self)
    }

    fn is_conflict(&self) -> bool {
        StorageError::is_conflict(self)
    }

    fn is_schema_missing(&self) -> bool {
        matches!(self.kind(), crate::error::StorageErrorKind::SchemaMissing)
    }
}

impl<C: Executor, S: Sync> Store for PgStore<'_, C, S> {
    type Error = StorageError;
}

#[async_trait]
impl<C: Executor> ClaimOutbox for PgStore<'_, C, OutboxStatements> {
    async fn claim_due(
        &self,
        token: Uuid,
        claim: Duration,
        limit: u32,
        tripped: &[(String, String)],
    ) -> Result<Claimed, StorageError> {
        self.statements.claim_due(self.client, token, claim, limit, tripped).await
    }

    async fn claim_seqs(&self, token: Uuid, claim: Duration, seqs: &[i64]) -> Result<Claimed, StorageError> {
        self.statements.claim_seqs(self.client, token, claim, seqs).await
    }
}

#[async_trait]
impl<C: Executor> LockOutbox for PgStore<'_, C, OutboxStatements> {
    async fn complete_locked(&self, completion: &Completion) -> Result<CompletionReport, StorageError> {
        self.statements.complete_locked(self.client, completion).await
    }
}

#[async_trait]
impl<C: Executor> CompleteOutbox for PgStore<'_, C, OutboxStatements> {
    async fn complete(&self, token: Uuid, completion: &Completion) -> Result<CompletionReport, StorageError> {
        self.statements.complete(self.client, token, completion).await
    }
}

#[async_trait]
impl<C: Executor> ScanRecovery for PgStore<'_, C, RecoveryStatements> {
    async fn lock_recovery_page(
        &self,
        request: &PageRequest<'_>,
    ) -> Result<Option<LockedPage>, StorageError> {
        self.statements.lock_page(self.client, request).await
    }
}

#[async_trait]
impl<C: Executor> DeleteExpired for PgStore<'_, C, RetentionStatements> {
    async fn delete_expired(
        &self,
        table: RetentionTable,
        retention: Duration,
        limit: u32,
        lease: Option<UnderLease<'_>>,
    ) -> Result<Option<u64>, StorageError> {
        self.statements.delete_expired(self.client, table, retention, limit, lease).await
    }
}

#[async_trait]
impl<C: Executor> HoldLease for PgStore<'_, C, LeaseStatements> {
    async fn acquire(
        &self,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, StorageError> {
        self.statements.acquire(self.client, job, owner, lease_duration).await
    }

    async fn renew(&self, lease: &Lease, lease_duration: Duration) -> Result<Option<Lease>, StorageError> {
        self.statements.renew(self.client, lease, lease_duration).await
    }

    async fn release(&self, job: &str, owner: &str) -> Result<bool, StorageError> {
        self.statements.release(self.client, job, owner).await
    }
}
