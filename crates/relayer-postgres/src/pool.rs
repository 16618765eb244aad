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
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::task::AbortHandle;

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use crate::connector::{Connector, server_probe_sql};
use crate::error::StorageError;
use crate::tls::Tls;

/// A pool of PostgreSQL connections (plain or TLS, as its [`Connector`] says), each a
/// [`PgClient`].
pub type PgPool = bb8::Pool<PgConnectionManager>;

/// A connection borrowed from a [`PgPool`].
pub type PgConnection<'a> = bb8::PooledConnection<'a, PgConnectionManager>;

/// Whether a pool's connections prepare the worker statements they run.
///
/// [`Prepared`](StatementMode::Prepared) (the default) plans each statement once per
/// connection. Choose [`Unnamed`](StatementMode::Unnamed) behind a connection pooler in
/// transaction mode that does not track prepared statements (PgBouncer before 1.21, or
/// without `max_prepared_statements`): there a named statement may reach a server
/// connection where another client prepared a different statement under the same name.
/// Unnamed statements are planned on every call and are safe behind any pooler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StatementMode {
    /// Prepare each statement once per connection and reuse it.
    #[default]
    Prepared,
    /// Send every statement unnamed, planned on every call.
    Unnamed,
}

/// Builds a pool of at most `max_size` connections to `database` (a `Config`, plain, or a
/// [`Connector`] with TLS) that prepare their statements, checking that one connection can
/// be made now so a wrong address or a refused certificate fails at start, not on the
/// first pass.
pub async fn connect_pool(database: impl Into<Connector>, max_size: u32) -> Result<PgPool, StorageError> {
    connect_pool_with(database, max_size, StatementMode::Prepared).await
}

/// `config` with `synchronous_commit = off` on every session: build a dispatcher's pool
/// from it.
///
/// Why this is safe for a dispatcher's connections (and only for them): the outbox row is
/// the durable record of a message, and every write a dispatch pass makes to it — a claim,
/// a fenced delete, a retry release, a park — only ever moves toward sending again. If a
/// crash loses such a commit, the row is back as it was and is sent again: at least once,
/// never lost (DSP-7). The exceptions commit durably on their own whatever the session
/// says: a lane head's delete (losing a run of them would replay heads after later heads
/// of their lane) and an operator's release or skip of a lane ([`crate::LaneStatements`]).
/// What must be durable is the transport's acceptance, and transports commit on their own
/// connections. Dropping the flush wait from claims and completions stops them competing
/// with the writers' commits for WAL flushes (docs/performance.md).
pub fn asynchronous_commit(mut config: tokio_postgres::Config) -> tokio_postgres::Config {
    let options = match config.get_options() {
        Some(existing) if !existing.trim().is_empty() => format!("{existing} -c synchronous_commit=off"),
        _ => "-c synchronous_commit=off".to_owned(),
    };
    config.options(&options);
    config
}

/// [`connect_pool`] with the [`StatementMode`] of its connections.
pub async fn connect_pool_with(
    database: impl Into<Connector>,
    max_size: u32,
    statements: StatementMode,
) -> Result<PgPool, StorageError> {
    let manager = PgConnectionManager::new(database, statements);
    // The first connection is made here rather than by the pool, whose retries would turn a
    // refused or failed login into a bare timeout: the error names the address and the
    // server's reason.
    let first = bb8::ManageConnection::connect(&manager).await.map_err(|e| {
        StorageError::database(format!("connecting to PostgreSQL at {}", manager.connector.target()), e)
    })?;
    let pool = bb8::Pool::builder()
        .max_size(max_size.max(1))
        .connection_timeout(Duration::from_secs(10))
        .test_on_check_out(false)
        .build_unchecked(manager);
    // A pool already full cannot happen here (it was just built); the connection is then
    // simply closed.
    drop(pool.add(first));
    Ok(pool)
}

/// The bb8 manager of a [`PgPool`]: connections made by a [`Connector`], each with a
/// [`StatementCache`].
#[derive(Debug)]
pub struct PgConnectionManager {
    connector: Connector,
    statements: StatementMode,
}

impl PgConnectionManager {
    /// A manager connecting to `database` (a `Config`, plain, or a [`Connector`] with TLS),
    /// its connections in `statements` mode.
    pub fn new(database: impl Into<Connector>, statements: StatementMode) -> Self {
        PgConnectionManager { connector: database.into(), statements }
    }

    /// Where and how its connections are made.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }
}

impl bb8::ManageConnection for PgConnectionManager {
    type Connection = PgClient;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<PgClient, tokio_postgres::Error> {
        let mode = self.statements;
        let (client, task) = self.connector.connect_with_task().await?;
        let mut client = PgClient::with_mode(client, mode);
        client.watchdog = Some(Watchdog {
            connection: task,
            bound: self.connector.statement_timeout(),
            transaction_idle: self.connector.transaction_idle_timeout(),
            tls: self.connector.tls().cloned(),
            server_probe: String::new(),
        });
        // Which server-side probe settings exist depends on the server's version: asked
        // once per connection, within the statement bound like every statement here.
        let version = client
            .bounded(client.client.simple_query("SHOW server_version_num"), crate::error::timed_out)
            .await?;
        let version = version.iter().find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<i32>().ok()),
            _ => None,
        });
        if let Some(watchdog) = client.watchdog.as_mut() {
            watchdog.server_probe = server_probe_sql(self.connector.config(), version.unwrap_or(0));
        }
        Ok(client)
    }

    async fn is_valid(&self, conn: &mut PgClient) -> Result<(), tokio_postgres::Error> {
        let conn = &*conn;
        conn.bounded(conn.client.simple_query(""), crate::error::timed_out).await.map(|_| ())
    }

    fn has_broken(&self, conn: &mut PgClient) -> bool {
        conn.discarded.load(Ordering::Acquire) || conn.client.is_closed()
    }
}

/// What bounds the statements of a connection the pool opened (RES-5).
#[derive(Debug)]
struct Watchdog {
    /// Ends the connection's task, which closes its socket.
    connection: AbortHandle,
    /// The longest one statement may wait for its answer.
    bound: Duration,
    /// How long the server lets a store session's transaction sit idle.
    transaction_idle: Option<Duration>,
    /// How the connection was encrypted, for the cancel request of a statement given up.
    tls: Option<Tls>,
    /// The `SET LOCAL`s (each after a `;`) that make the server probe this connection
    /// during a store session's transaction (RES-5).
    server_probe: String,
}

/// The longest a cancel request of a statement given up may take (it opens a connection).
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// A tokio-postgres client and the worker statements prepared on its connection.
///
/// It dereferences to the [`Client`], so it is used as one; [`PgClient::split`] lends the
/// client and the cache at once, for a transaction whose statements use the cache
/// ([`crate::exec::Prepared`]). Wrap a client of your own with [`PgClient::new`].
#[derive(Debug)]
pub struct PgClient {
    client: Client,
    statements: StatementCache,
    /// Set when the connection must not be lent again (a session dropped inside its
    /// transaction, a statement without an answer in time): the pool closes it on return.
    discarded: AtomicBool,
    /// Set on connections the pool opened: their statements are bounded (RES-5).
    watchdog: Option<Watchdog>,
}

impl PgClient {
    /// Wraps `client`; its statements are prepared once and reused.
    pub fn new(client: Client) -> Self {
        PgClient::with_mode(client, StatementMode::Prepared)
    }

    /// Wraps `client`, its statements in `mode`.
    pub fn with_mode(client: Client, mode: StatementMode) -> Self {
        PgClient {
            client,
            statements: StatementCache::new(mode),
            discarded: AtomicBool::new(false),
            watchdog: None,
        }
    }

    /// The client, mutably (to begin a transaction), and the cache of its connection.
    pub fn split(&mut self) -> (&mut Client, &StatementCache) {
        (&mut self.client, &self.statements)
    }

    /// Marks the connection unfit to be lent again: the pool closes it when it comes back.
    pub fn discard(&self) {
        self.discarded.store(true, Ordering::Release);
    }

    /// Whether the connection was marked unfit to be lent again.
    pub fn is_discarded(&self) -> bool {
        self.discarded.load(Ordering::Acquire)
    }

    /// The longest one statement on this connection waits for its answer: the connector's
    /// statement timeout for a connection a [`PgPool`] opened, `None` (unbounded) for a
    /// client wrapped with [`new`](Self::new).
    pub fn statement_timeout(&self) -> Option<Duration> {
        self.watchdog.as_ref().map(|watchdog| watchdog.bound)
    }

    /// How long the server lets a store session's transaction on this connection sit idle
    /// ([`Connector::with_transaction_idle_timeout`]); `None`: the server's setting.
    pub fn transaction_idle_timeout(&self) -> Option<Duration> {
        self.watchdog.as_ref().and_then(|watchdog| watchdog.transaction_idle)
    }

    /// What a store session's `BEGIN` adds so the server probes this connection while the
    /// transaction lasts (`; SET LOCAL tcp_keepalives_idle = …`); empty for a client
    /// wrapped with [`new`](Self::new).
    pub(crate) fn server_probe(&self) -> &str {
        self.watchdog.as_ref().map_or("", |watchdog| &watchdog.server_probe)
    }

    /// Runs `call` (statements on this connection) within the statement timeout (RES-5).
    /// Past it, the connection is closed at once and discarded — a black-holed connection
    /// would otherwise hold the call until the kernel gives up, and a late answer must never
    /// reach the next borrower — and `timed_out()` is returned. A client wrapped with
    /// [`new`](Self::new) has no bound.
    pub async fn bounded<T, E>(
        &self,
        call: impl Future<Output = Result<T, E>>,
        timed_out: impl FnOnce() -> E,
    ) -> Result<T, E> {
        let Some(watchdog) = &self.watchdog else { return call.await };
        match tokio::time::timeout(watchdog.bound, call).await {
            Ok(result) => result,
            Err(_) => {
                self.discard();
                self.cancel_on_server(watchdog.tls.clone());
                watchdog.connection.abort();
                tracing::warn!(target: "relayer::postgres", bound = ?watchdog.bound,
                    "no answer from PostgreSQL within the statement timeout: closed the connection \
                     (a silent network or a stuck server); the work is retried on a new one (RES-5)");
                Err(timed_out())
            }
        }
    }

    /// Asks the server to cancel what this connection runs, in a detached task bounded by
    /// [`CANCEL_TIMEOUT`]: closing the socket alone leaves a statement that is merely slow
    /// (not black-holed) running server-side, holding its locks, until it next writes to
    /// the dead socket. A cancel request rather than a server-side `statement_timeout` on
    /// pooled sessions: a `SET` at connect would outlive the session behind a
    /// transaction-mode pooler and reach other clients. It opens a new connection, so the
    /// caller never waits for it; when the network is what failed, it fails too, harmlessly.
    fn cancel_on_server(&self, tls: Option<Tls>) {
        let token = self.client.cancel_token();
        tokio::spawn(async move {
            let cancelled = match tls {
                None => tokio::time::timeout(CANCEL_TIMEOUT, token.cancel_query(tokio_postgres::NoTls)).await,
                Some(tls) => tokio::time::timeout(CANCEL_TIMEOUT, token.cancel_query(tls)).await,
            };
            if !matches!(cancelled, Ok(Ok(()))) {
                tracing::debug!(target: "relayer::postgres",
                    "could not ask the server to cancel a statement given up at its timeout \
                     (the server ends it when it next writes to the closed connection)");
            }
        });
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
/// says this connection's prepared statements are gone or clash (`DISCARD ALL`,
/// `DEALLOCATE ALL`, a pooler that moved the session), every entry is dropped; after
/// [`LOST_STATEMENTS_BEFORE_GIVING_UP`] such losses the cache turns itself off and the
/// connection sends every statement unnamed. That is a safety net, not pooler support:
/// behind a transaction-mode pooler use [`StatementMode::Unnamed`].
#[derive(Debug, Default)]
pub struct StatementCache {
    /// The mode the connection was opened with, whatever the cache has since given up.
    mode: StatementMode,
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    prepared: HashMap<String, Statement>,
    /// Bumped whenever every entry is dropped, so the calls in flight that all fail on one
    /// loss count it once.
    generation: u64,
    /// How many times the server lost this connection's prepared statements.
    losses: u32,
    /// Statements are sent unnamed: by choice, or after repeated losses.
    disabled: bool,
}

/// How many times a connection's server may lose its prepared statements before its cache
/// stops preparing any: the session is evidently not kept.
pub const LOST_STATEMENTS_BEFORE_GIVING_UP: u32 = 3;

impl StatementCache {
    /// An empty cache; [`StatementMode::Unnamed`] makes it prepare nothing.
    pub fn new(mode: StatementMode) -> Self {
        let state = CacheState { disabled: mode == StatementMode::Unnamed, ..CacheState::default() };
        StatementCache { mode, state: Mutex::new(state) }
    }

    /// The mode the connection was opened with. A [`StatementMode::Prepared`] connection
    /// whose server kept losing its statements still says `Prepared` here (see
    /// [`is_enabled`](Self::is_enabled) for what it does now).
    pub fn mode(&self) -> StatementMode {
        self.mode
    }

    /// How many statements are prepared.
    pub fn len(&self) -> usize {
        self.state().prepared.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether statements are prepared at all: not in [`StatementMode::Unnamed`], nor once
    /// the server lost them [`LOST_STATEMENTS_BEFORE_GIVING_UP`] times.
    pub fn is_enabled(&self) -> bool {
        !self.state().disabled
    }

    /// The statement prepared for `sql` with parameter `types`, and the cache's generation.
    pub(crate) fn get(&self, sql: &str, types: &[Type]) -> (Option<Statement>, u64) {
        let state = self.state();
        let statement = state.prepared.get(sql).filter(|statement| statement.params() == types).cloned();
        (statement, state.generation)
    }

    /// Keeps `statement`, prepared during `generation`, unless every entry was dropped since.
    pub(crate) fn insert(&self, sql: &str, statement: Statement, generation: u64) {
        let mut state = self.state();
        if state.generation == generation && !state.disabled {
            state.prepared.insert(sql.to_owned(), statement);
        }
    }

    pub(crate) fn forget(&self, sql: &str) {
        self.state().prepared.remove(sql);
    }

    /// The server no longer knows (or clashes with) the statements of `generation`: drop
    /// them all and count one loss, however many calls in flight report it.
    pub(crate) fn lost_all(&self, generation: u64) {
        let mut state = self.state();
        if state.generation != generation || state.disabled {
            return;
        }
        state.prepared.clear();
        state.generation += 1;
        state.losses = state.losses.saturating_add(1);
        if state.losses >= LOST_STATEMENTS_BEFORE_GIVING_UP {
            state.disabled = true;
            tracing::warn!(target: "relayer::postgres", losses = state.losses,
                "the server keeps losing this connection's prepared statements; its statements are sent \
                 unnamed from now on (behind a transaction-mode pooler, use StatementMode::Unnamed)");
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // A panic while holding the lock leaves the map itself intact.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
