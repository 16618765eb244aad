//! Where a worker gets its store: a [`StoreSource`] opens [`Session`]s.
//!
//! The capability traits of [`crate::store`] say what a worker may do to the store; this
//! module says how it gets hold of one. A worker is generic over a source, never over a
//! concrete database type: relayer's PostgreSQL source is `relayer_postgres::PgSource`, and
//! a source that wraps another (to count calls, inject faults or log) implements these two
//! traits and forwards the capabilities it wraps.
//!
//! A session is one connection, held for one pass and given back when dropped (a pass never
//! waits for a second connection while it holds one, LIF-2). Its capabilities are the
//! store traits its type implements, so a worker's bounds read as the list of what it does:
//! `S: StoreSource, S::Session: ClaimOutbox + CompleteOutbox`.
//!
//! # Transactions are a capability of the session
//!
//! Some passes must commit several steps at once — the recovery sweeper reads, locks,
//! sends and completes a page in one transaction, conditional on its lease (SWP-4). Rather
//! than a transaction type borrowed from the session (a generic associated type every
//! worker bound would have to quantify over), the session itself is in or out of a
//! transaction: calls between [`Session::begin`] and [`Session::commit`] share one. A
//! session dropped inside a transaction never reaches another pass with it open: the
//! transaction is rolled back with the connection.

use async_trait::async_trait;

use crate::store::Store;

/// Opens store sessions: relayer's connection pool, or a wrapper around one.
#[async_trait]
pub trait StoreSource: Send + Sync + 'static {
    /// A session on one connection; its capabilities are the store traits it implements.
    type Session: Session;

    /// Opens a session, waiting for a connection at most as long as the source allows.
    /// A source that cannot reach its store answers with a
    /// [transient](crate::store::StoreError::is_transient) error.
    async fn open(&self) -> Result<Self::Session, <Self::Session as Store>::Error>;
}

/// One connection held by one pass, in or out of a transaction.
#[async_trait]
pub trait Session: Store + Send + 'static {
    /// Starts a transaction: the session's calls until [`commit`](Session::commit) or
    /// [`rollback`](Session::rollback) share it.
    async fn begin(&mut self) -> Result<(), Self::Error>;

    /// Commits the transaction [`begin`](Session::begin) started.
    async fn commit(&mut self) -> Result<(), Self::Error>;

    /// Rolls back the transaction [`begin`](Session::begin) started. A session dropped
    /// inside a transaction rolls it back too; call this to reuse the session.
    async fn rollback(&mut self) -> Result<(), Self::Error>;
}
