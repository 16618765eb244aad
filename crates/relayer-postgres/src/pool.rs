//! The connection pool workers use (bb8 over tokio-postgres), whose connections keep the
//! statements prepared on them.
//!
//! Workers keep their own pool (DRV-1). A pass takes one connection for everything it does
//! and never waits for a second while holding one (LIF-2), so a pool of size 1 works.
//!
//! Every pooled connection is a [`PgClient`]: the tokio-postgres client plus a
//! [`StatementCache`] of the worker statements prepared on it. Planning a worker statement
//! costs more than running it (a recovery pass's three statements: ~0.75 ms of planning
//! against ~0.9 ms of execution, docs/performance.md), so each is parsed and planned once
//! per connection and then only bound and executed; see [`crate::exec`].

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, Statement};

use crate::error::StorageError;

/// A pool of plain-TCP or unix-socket PostgreSQL connections, each a [`PgClient`].
pub type PgPool = bb8::Pool<PgConnectionManager>;

/// A connection borrowed from a [`PgPool`].
pub type PgConnection<'a> = bb8::PooledConnection<'a, PgConnectionManager>;

/// Builds a pool of at most `max_size` connections to `config`, checking that one
/// connection can be made now so a wrong address fails at start, not on the first pass.
pub async fn connect_pool(config: tokio_postgres::Config, max_size: u32) -> Result<PgPool, StorageError> {
    let pool = bb8::Pool::builder()
        .max_size(max_size.max(1))
        .connection_timeout(Duration::from_secs(10))
        .test_on_check_out(false)
        .build_unchecked(PgConnectionManager::new(config));
    drop(pool.get().await.map_err(|e| StorageError::pool("connecting to PostgreSQL", e))?);
    Ok(pool)
}

/// The bb8 manager of a [`PgPool`]: bb8-postgres's, with a [`StatementCache`] per connection.
#[derive(Debug)]
pub struct PgConnectionManager {
    inner: PostgresConnectionManager<NoTls>,
}

impl PgConnectionManager {
    /// A manager connecting to `config` without TLS.
    pub fn new(config: tokio_postgres::Config) -> Self {
        PgConnectionManager { inner: PostgresConnectionManager::new(config, NoTls) }
    }
}

impl bb8::ManageConnection for PgConnectionManager {
    type Connection = PgClient;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<PgClient, tokio_postgres::Error> {
        self.inner.connect().await.map(PgClient::new)
    }

    async fn is_valid(&self, conn: &mut PgClient) -> Result<(), tokio_postgres::Error> {
        self.inner.is_valid(&mut conn.client).await
    }

    fn has_broken(&self, conn: &mut PgClient) -> bool {
        self.inner.has_broken(&mut conn.client)
    }
}

/// A tokio-postgres client and the worker statements prepared on its connection.
///
/// It dereferences to the [`Client`], so it is used as one; [`PgClient::split`] lends the
/// client and the cache at once, for a transaction whose statements use the cache
/// ([`crate::exec::Prepared`]). Wrap a client of your own with [`PgClient::new`].
#[derive(Debug)]
pub struct PgClient {
    client: Client,
    statements: StatementCache,
}

impl PgClient {
    /// Wraps `client` with an empty statement cache.
    pub fn new(client: Client) -> Self {
        PgClient { client, statements: StatementCache::default() }
    }

    /// The client, mutably (to begin a transaction), and the cache of its connection.
    pub fn split(&mut self) -> (&mut Client, &StatementCache) {
        (&mut self.client, &self.statements)
    }

    /// The statements prepared on this connection.
    pub fn statements(&self) -> &StatementCache {
        &self.statements
    }
}

impl Deref for PgClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for PgClient {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// Statements prepared on one connection, by their SQL text.
///
/// Valid only for the connection that prepared them: it lives inside that connection's
/// [`PgClient`] and goes with it. An entry whose execution failed is dropped, so a statement
/// that a schema change invalidated is prepared afresh on its next use. When the server
/// says a prepared statement does not exist (`DISCARD ALL`, `DEALLOCATE ALL`, or a
/// transaction-mode pooler that moved the session to another server connection), every
/// entry is dropped; after [`LOST_STATEMENTS_BEFORE_GIVING_UP`] such losses the cache turns
/// itself off and the connection sends every statement unnamed, as a plain client does.
#[derive(Debug, Default)]
pub struct StatementCache {
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    prepared: HashMap<String, Statement>,
    /// How many times the server lost this connection's prepared statements.
    losses: u32,
}

/// How many times a connection's server may lose its prepared statements before its cache
/// stops preparing any: the session is evidently not kept (a transaction-mode pooler).
pub const LOST_STATEMENTS_BEFORE_GIVING_UP: u32 = 3;

impl StatementCache {
    /// How many statements are prepared.
    pub fn len(&self) -> usize {
        self.state().prepared.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether statements are prepared at all: `false` once the server lost them
    /// [`LOST_STATEMENTS_BEFORE_GIVING_UP`] times.
    pub fn is_enabled(&self) -> bool {
        self.state().losses < LOST_STATEMENTS_BEFORE_GIVING_UP
    }

    pub(crate) fn get(&self, sql: &str, types: &[Type]) -> Option<Statement> {
        self.state().prepared.get(sql).filter(|statement| statement.params() == types).cloned()
    }

    pub(crate) fn insert(&self, sql: &str, statement: Statement) {
        self.state().prepared.insert(sql.to_owned(), statement);
    }

    pub(crate) fn forget(&self, sql: &str) {
        self.state().prepared.remove(sql);
    }

    /// The server no longer knows this connection's prepared statements: forget them all,
    /// and count the loss.
    pub(crate) fn lost_all(&self) {
        let mut state = self.state();
        state.prepared.clear();
        state.losses = state.losses.saturating_add(1);
        if state.losses == LOST_STATEMENTS_BEFORE_GIVING_UP {
            tracing::warn!(target: "relayer::postgres", losses = state.losses,
                "the server keeps losing this connection's prepared statements (a transaction-mode pooler?); \
                 its statements are sent unnamed from now on");
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // A panic while holding the lock leaves the map itself intact.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
