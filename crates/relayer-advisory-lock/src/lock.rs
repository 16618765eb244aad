//! [`PgAdvisoryLock`]: relayer's [`DistributedLock`] on PostgreSQL session advisory locks.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::{DistributedLock, LockError, LockErrorKind, LockGuard, advisory_lock_key};
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls, Socket};
use tokio_util::sync::CancellationToken;

use crate::TARGET;
use crate::guard::PgLockGuard;
use crate::session::{IdleSessions, Session};
use crate::shared::Shared;

/// The `application_name` of lock sessions when the given `Config` sets none.
const DEFAULT_APPLICATION_NAME: &str = "relayer-advisory-lock";

/// The connect timeout when the given `Config` sets none: a lock attempt must not hang on
/// an unreachable server.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest opening a lock session, or one statement on it, waits for PostgreSQL, unless
/// [`PgAdvisoryLock::with_call_timeout`] says otherwise (RES-5).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// tokio-postgres's `keepalives_idle` when none is given: taken as "not set".
const TOKIO_POSTGRES_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// `config` with keepalives (10 s idle, every 5 s, 3 probes) and a 20 s TCP user timeout
/// wherever it sets none, as relayer's pools have them (RES-5); `keepalives=0` is honoured.
fn bounded(config: &mut Config) {
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(20));
    }
    if config.get_keepalives() {
        if config.get_keepalives_idle() == TOKIO_POSTGRES_KEEPALIVES_IDLE {
            config.keepalives_idle(Duration::from_secs(10));
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(Duration::from_secs(5));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
    }
}

/// A [`DistributedLock`] backed by PostgreSQL session advisory locks (LDR-3).
///
/// Each held lock lives on its own dedicated connection, opened from the `Config` given here
/// (never from a pool). [`try_lock`](DistributedLock::try_lock) never waits: if another
/// session holds the resource it returns `Ok(None)` at once. See the [crate docs](crate) for
/// the model and the key derivation.
///
/// ```no_run
/// use relayer_advisory_lock::PgAdvisoryLock;
/// use relayer_core::DistributedLock;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let mut config: tokio_postgres::Config = "host=127.0.0.1 user=postgres dbname=app".parse()?;
/// config.application_name("billing-sweeper-lock");
/// let lock = PgAdvisoryLock::new(config);
///
/// if let Some(mut guard) = lock.try_lock("sweeper").await? {
///     guard.ensure_held().await?; // before each pass
///     // ... run the pass ...
///     guard.release().await?;
/// } // else: another replica leads this turn
///
/// lock.begin_shutdown(); // from now on, try_lock is refused
/// # Ok(())
/// # }
/// ```
pub struct PgAdvisoryLock<T = NoTls> {
    config: Config,
    tls: T,
    /// Whether `with_tls` raised the config's `sslmode=prefer` to `require`.
    raised_to_require: bool,
    /// Why no session may be opened: `sslmode=disable` with a TLS connector.
    refused: Option<&'static str>,
    /// The longest opening a session, or one statement on it, waits (RES-5).
    call_timeout: Duration,
    shared: Arc<Shared>,
}

/// Why a lock given a TLS connector and `sslmode=disable` takes no lock.
const DISABLE_WITH_TLS: &str = "the config's sslmode=disable forbids TLS, but a TLS connector was given: \
     drop sslmode=disable (TLS is then required) or use PgAdvisoryLock::new";

impl PgAdvisoryLock<NoTls> {
    /// A lock whose sessions connect with `config`, without TLS.
    ///
    /// If `config` sets no `application_name`, sessions use `relayer-advisory-lock`; set one
    /// per lock instance to tell its sessions apart in `pg_stat_activity`. If it sets no
    /// connect timeout, 10 s is used.
    pub fn new(config: Config) -> Self {
        PgAdvisoryLock::with_tls(config, NoTls)
    }
}

impl<T: 'static> PgAdvisoryLock<T> {
    /// A lock whose sessions connect with `config` through `tls` (any tokio-postgres TLS
    /// connector, e.g. from `postgres-native-tls` or `tokio-postgres-rustls`).
    ///
    /// A TLS connector given here means TLS on every session: `config`'s `sslmode=prefer`
    /// (the default, which would go on in plaintext when the server, or a man in the
    /// middle, declines TLS) is raised to `require`, and with `sslmode=disable` every
    /// [`try_lock`](DistributedLock::try_lock) is refused with an error naming both.
    /// `NoTls` keeps the `sslmode` as given.
    pub fn with_tls(mut config: Config, tls: T) -> Self {
        if config.get_application_name().is_none() {
            config.application_name(DEFAULT_APPLICATION_NAME);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        bounded(&mut config);
        let given_tls = !(&tls as &dyn std::any::Any).is::<NoTls>();
        let (mut raised_to_require, mut refused) = (false, None);
        match config.get_ssl_mode() {
            SslMode::Prefer if given_tls => {
                config.ssl_mode(SslMode::Require);
                raised_to_require = true;
            }
            SslMode::Disable if given_tls => refused = Some(DISABLE_WITH_TLS),
            _ => {}
        }
        let shared = Arc::new(Shared { shutdown: CancellationToken::new(), idle: IdleSessions::default() });
        PgAdvisoryLock { config, tls, raised_to_require, refused, call_timeout: DEFAULT_CALL_TIMEOUT, shared }
    }
}

impl<T> PgAdvisoryLock<T> {
    /// Lets sessions fall back to plaintext when the server does not offer TLS, as libpq's
    /// `sslmode=prefer` does: undoes [`with_tls`](Self::with_tls)'s raise to `require`.
    /// Only for a connector that verifies nothing anyway (an unverified TLS session is open
    /// to the same man in the middle): relayer's host uses it for a libpq URL without
    /// `sslmode` and without a CA file, where its pools do the same.
    #[must_use]
    pub fn allow_plaintext_fallback(mut self) -> Self {
        if self.raised_to_require {
            self.config.ssl_mode(SslMode::Prefer);
            self.raised_to_require = false;
        }
        self
    }

    /// Bounds every wait on a lock session (RES-5): opening it, taking, checking and
    /// releasing the lock each take at most `timeout` (default [`DEFAULT_CALL_TIMEOUT`], at
    /// least 1 ms). Past it the session's socket is closed and the call fails; a guard whose
    /// check timed out reports the lock lost. Keep it below the interval of the passes the
    /// lock leads.
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The settings sessions connect with (`sslmode` as [`with_tls`](Self::with_tls) left
    /// it; keepalives and a TCP user timeout added where it set none).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Follows the host's shutdown `token`: once it is cancelled, locks are refused (LDR-4),
    /// exactly as after [`begin_shutdown`](Self::begin_shutdown).
    #[must_use]
    pub fn with_shutdown(mut self, token: CancellationToken) -> Self {
        self.shared = Arc::new(Shared { shutdown: token, idle: IdleSessions::default() });
        self
    }

    /// Tells the lock that shutdown has begun: every later `try_lock` fails with
    /// [`LockErrorKind::ShuttingDown`] and no new lock is granted (LDR-4). Guards already
    /// handed out keep their lock until they are released or dropped. Idempotent.
    pub fn begin_shutdown(&self) {
        self.shared.shutdown.cancel();
        self.shared.idle.close_all();
    }

    fn refuse_if_shutting_down(&self, resource: &str) -> Result<(), LockError> {
        if self.shared.shutdown.is_cancelled() {
            self.shared.idle.close_all();
            return Err(LockError::new(resource, LockErrorKind::ShuttingDown));
        }
        Ok(())
    }
}

impl<T> PgAdvisoryLock<T>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    /// Opens a new session, giving up if shutdown begins meanwhile.
    async fn open_session(&self, resource: &str) -> Result<Session, LockError> {
        if let Some(why) = self.refused {
            return Err(LockError::new(resource, LockErrorKind::Database).with_source(why));
        }
        tokio::select! {
            biased;
            () = self.shared.shutdown.cancelled() => Err(LockError::new(resource, LockErrorKind::ShuttingDown)),
            session = Session::open(&self.config, self.tls.clone(), resource, self.call_timeout) => session,
        }
    }
}

#[async_trait]
impl<T> DistributedLock for PgAdvisoryLock<T>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    async fn try_lock(&self, resource: &str) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        self.refuse_if_shutting_down(resource)?;
        let key = advisory_lock_key(resource);
        let mut idle = self.shared.idle.take();
        loop {
            let reused = idle.is_some();
            let session = match idle.take() {
                Some(session) => session,
                None => self.open_session(resource).await?,
            };
            match session.try_lock(key).await {
                Ok(true) => {
                    if self.shared.shutdown.is_cancelled() {
                        // Shutdown began during the statement: closing the session frees the lock.
                        drop(session);
                        return Err(LockError::new(resource, LockErrorKind::ShuttingDown));
                    }
                    tracing::debug!(target: TARGET, resource, key, pid = session.pid(), "advisory lock acquired");
                    return Ok(Some(Box::new(PgLockGuard::new(
                        resource,
                        key,
                        session,
                        Arc::clone(&self.shared),
                    ))));
                }
                Ok(false) => {
                    tracing::trace!(target: TARGET, resource, key, "advisory lock held elsewhere");
                    // Nothing was taken: the session holds no lock and can be reused.
                    if !self.shared.shutdown.is_cancelled() {
                        self.shared.idle.put(session);
                    }
                    return Ok(None);
                }
                Err(e) if reused && e.is_closed() => {
                    // An idle session the server closed meanwhile (restart, terminate): the
                    // others are probably gone too. Retry once on a fresh session.
                    tracing::debug!(target: TARGET, resource, pid = session.pid(), "idle lock session had closed");
                    self.shared.idle.close_all();
                }
                Err(e) => {
                    // State unknown: `session` is dropped (closed) here, never reused.
                    return Err(e.into_lock_error(resource, LockErrorKind::Database));
                }
            }
        }
    }
}

impl<T> fmt::Debug for PgAdvisoryLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgAdvisoryLock")
            .field("application_name", &self.config.get_application_name())
            .field("shutting_down", &self.shared.shutdown.is_cancelled())
            .finish_non_exhaustive()
    }
}
