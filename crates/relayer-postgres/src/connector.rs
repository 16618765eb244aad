//! [`Connector`]: where relayer connects (a tokio-postgres `Config`) and how (plain, or
//! through a TLS connector) — what every connection relayer opens is made from.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Socket};

use crate::tls::Tls;

/// A database address with the TLS connector its connections use.
///
/// A `Config` converts into one without TLS (`Connector::from(config)`), so every
/// constructor taking `impl Into<Connector>` takes a plain `Config` too.
///
/// A TLS connector given to [`with_tls`](Self::with_tls) means TLS, always: the `Config`'s
/// `sslmode=prefer` (tokio-postgres's default, which would go on in plaintext when the
/// server, or a man in the middle, answers that it has no TLS) is raised to `require`, and
/// `sslmode=disable` is refused with a [`TlsModeConflict`]. Only `connector_from_url`
/// (feature `tls-rustls`) makes a connector that prefers TLS
/// without requiring it: libpq's default `sslmode=prefer` with no certificate to verify
/// against.
///
/// ```no_run
/// # fn example(tls: tokio_postgres::NoTls) -> Result<(), Box<dyn std::error::Error>> {
/// use relayer_postgres::Connector;
///
/// let config: tokio_postgres::Config = "host=db.example.com user=app dbname=app".parse()?;
/// // `tls`: any tokio-postgres TLS connector, e.g. tokio-postgres-rustls's MakeRustlsConnect.
/// let connector = Connector::with_tls(config, tls)?; // sslmode=prefer becomes require
/// # Ok(()) }
/// ```
///
/// Every connection it opens is bounded against a silent network (RES-5): see
/// [`network_bounds`](Self::network_bounds) for the TCP settings it adds where the `Config`
/// (or the libpq URL it came from) sets none, and
/// [`statement_timeout`](Self::statement_timeout) for the bound on each statement of a
/// pooled connection.
#[derive(Clone, Debug)]
pub struct Connector {
    config: Config,
    /// `None`: plain connections (`NoTls`).
    tls: Option<Tls>,
    /// The longest a pooled connection waits for the answer to one statement (RES-5).
    statement_timeout: Duration,
    /// How long the server lets a transaction of a [`PgSession`](crate::PgSession) sit idle
    /// before ending it (RES-5); `None`: the server's setting.
    transaction_idle_timeout: Option<Duration>,
}

/// How long opening a connection may take, TCP connect and startup together, when the
/// `Config` sets no `connect_timeout` (RES-5).
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle time before the first TCP keepalive probe, when the `Config` keeps tokio-postgres's
/// default of 2 hours (RES-5).
pub(crate) const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(10);

/// Time between TCP keepalive probes, when the `Config` sets none (RES-5).
pub(crate) const DEFAULT_KEEPALIVES_INTERVAL: Duration = Duration::from_secs(5);

/// Unanswered TCP keepalive probes before the kernel drops the connection, when the
/// `Config` sets none (RES-5).
pub(crate) const DEFAULT_KEEPALIVES_RETRIES: u32 = 3;

/// How long sent data may stay unacknowledged before the kernel drops the connection
/// (`TCP_USER_TIMEOUT`, Linux), when the `Config` sets none (RES-5).
pub(crate) const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);

/// The longest a pooled connection waits for the answer to one statement, unless
/// [`Connector::with_statement_timeout`] says otherwise (RES-5). A host lowers it to fit
/// its workers' leases and claims.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// tokio-postgres's `keepalives_idle` when none is given: taken as "not set".
const TOKIO_POSTGRES_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// `config` with relayer's bounds against a silent network wherever it sets none (RES-5):
/// a connect timeout, keepalives probing after 10 s idle every 5 s and giving up after 3
/// unanswered probes, and a TCP user timeout of 20 s. `keepalives=0` is honoured (no probe
/// settings are added then); a `keepalives_idle` of exactly 7200 s reads as tokio-postgres's
/// default, i.e. unset.
fn bounded(mut config: Config) -> Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
    }
    if config.get_keepalives() {
        if config.get_keepalives_idle() == TOKIO_POSTGRES_KEEPALIVES_IDLE {
            config.keepalives_idle(DEFAULT_KEEPALIVES_IDLE);
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(DEFAULT_KEEPALIVES_INTERVAL);
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(DEFAULT_KEEPALIVES_RETRIES);
        }
    }
    config
}

/// The `SET LOCAL`s that make the server probe this connection for the length of one
/// transaction, from the client's own keepalive and user-timeout settings (RES-5): a
/// transaction whose client went silent — a consumer's inbox transaction idles while its
/// handler runs — then ends, and frees its locks, once the server's probes go unanswered
/// instead of after the server's 2-hour keepalive default. `SET LOCAL`, never a session
/// `SET`: behind a transaction-mode pooler a session setting would reach other clients.
/// `tcp_user_timeout` exists from PostgreSQL 12 (`server_version_num` 120000) on.
pub(crate) fn server_probe_sql(config: &Config, server_version_num: i32) -> String {
    let mut sql = String::new();
    if config.get_keepalives() {
        let idle = config.get_keepalives_idle().as_secs().max(1);
        let interval = config.get_keepalives_interval().map_or(5, |d| d.as_secs().max(1));
        let count = config.get_keepalives_retries().unwrap_or(DEFAULT_KEEPALIVES_RETRIES).max(1);
        sql.push_str(&format!(
            "; SET LOCAL tcp_keepalives_idle = {idle}; SET LOCAL tcp_keepalives_interval = {interval}; \
             SET LOCAL tcp_keepalives_count = {count}"
        ));
    }
    if let Some(timeout) = config.get_tcp_user_timeout().filter(|_| server_version_num >= 120_000) {
        sql.push_str(&format!("; SET LOCAL tcp_user_timeout = {}", timeout.as_millis()));
    }
    sql
}

/// `sslmode=disable` together with a TLS connector (from [`Connector::with_tls`]): one
/// forbids what the other asks for.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "the config's sslmode=disable forbids TLS, but a TLS connector was given: drop sslmode=disable \
     (TLS is then required on every connection) or drop the TLS connector"
)]
#[non_exhaustive]
pub struct TlsModeConflict;

impl Connector {
    /// Plain connections to `config`: no TLS, whatever its `sslmode` asks (`require` then
    /// fails to connect).
    pub fn new(config: Config) -> Self {
        Connector {
            config: bounded(config),
            tls: None,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            transaction_idle_timeout: None,
        }
    }

    /// Connections to `config` through `tls`, any tokio-postgres TLS connector (e.g.
    /// `tokio_postgres_rustls::MakeRustlsConnect`, `postgres_native_tls::MakeTlsConnector`,
    /// or `rustls_tls`'s), always encrypted: `sslmode=prefer` (the
    /// default) is raised to `require`, so no connection falls back to plaintext, and
    /// `sslmode=disable` is refused, naming both. Passing `NoTls` gives the plain connector
    /// of [`new`](Self::new).
    pub fn with_tls<T>(config: Config, tls: T) -> Result<Self, TlsModeConflict>
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send + 'static,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send + 'static,
    {
        // NoTls tells tokio-postgres it cannot do TLS (so `prefer` skips the TLS request);
        // behind the type-erasing wrapper it could not, so it stays unwrapped. A `Tls`
        // (another connector's) is already erased.
        let any = &tls as &dyn std::any::Any;
        if any.is::<NoTls>() {
            return Ok(Connector::new(config));
        }
        let tls = match any.downcast_ref::<Tls>() {
            Some(erased) => erased.clone(),
            None => Tls::new(tls),
        };
        Connector::requiring(config, tls)
    }

    /// `config` through `tls`, TLS required: `prefer` raised, `disable` refused.
    pub(crate) fn requiring(mut config: Config, tls: Tls) -> Result<Self, TlsModeConflict> {
        match config.get_ssl_mode() {
            SslMode::Disable => Err(TlsModeConflict),
            SslMode::Prefer => {
                config.ssl_mode(SslMode::Require);
                Ok(Connector::preferring(config, tls))
            }
            _ => Ok(Connector::preferring(config, tls)),
        }
    }

    /// `config` (whose `sslmode` is `prefer`) through `tls` when the server offers TLS, in
    /// plaintext otherwise: libpq's default, for `connector_from_url` only.
    #[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
    pub(crate) fn preferring(config: Config, tls: Tls) -> Self {
        Connector {
            config: bounded(config),
            tls: Some(tls),
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            transaction_idle_timeout: None,
        }
    }

    /// The same connector whose pooled connections wait at most `timeout` for the answer to
    /// one statement (default [`DEFAULT_STATEMENT_TIMEOUT`]; at least 1 ms). Past it the
    /// connection is closed and never lent again, and the statement fails as transient: a
    /// black-holed connection costs one bound, not the kernel's 15 minutes (RES-5). Keep it
    /// below the leases and claims the statements run under.
    #[must_use]
    pub fn with_statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The longest a pooled connection waits for the answer to one statement.
    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// The same connector whose store sessions' transactions (`PgSession::begin`) are ended
    /// by the server once idle for `timeout` (`SET LOCAL idle_in_transaction_session_timeout`,
    /// at least 1 ms): a transaction whose client went silent then releases its locks — a
    /// lease row, claimed rows — within that bound instead of when the server's TCP gives up
    /// (RES-5). Only for pools whose transactions never wait that long on purpose: a host
    /// sets it on its maintenance pool (the longest lease of its workers: a sweep
    /// pass idles while it sends, up to half its lease), never on a consumer's, whose inbox transactions last as long as a handler.
    #[must_use]
    pub fn with_transaction_idle_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_idle_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// How long the server lets a store session's transaction sit idle; `None`: the
    /// server's own setting.
    pub fn transaction_idle_timeout(&self) -> Option<Duration> {
        self.transaction_idle_timeout
    }

    /// The network bounds of its connections, for messages and tests: connect timeout, TCP
    /// user timeout, keepalive idle/interval/retries (`None`: keepalives off), and the
    /// statement timeout.
    pub fn network_bounds(&self) -> String {
        let config = &self.config;
        let of = |d: Option<&Duration>| d.map_or_else(|| "none".to_owned(), |d| format!("{d:?}"));
        let keepalives = if config.get_keepalives() {
            format!(
                "keepalives idle {:?}, every {}, {} probes",
                config.get_keepalives_idle(),
                of(config.get_keepalives_interval().as_ref()),
                config.get_keepalives_retries().map_or_else(|| "default".to_owned(), |n| n.to_string()),
            )
        } else {
            "keepalives off".to_owned()
        };
        format!(
            "connect timeout {}, TCP user timeout {}, {keepalives}, statement timeout {:?}",
            of(config.get_connect_timeout()),
            of(config.get_tcp_user_timeout()),
            self.statement_timeout,
        )
    }

    /// The connection settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same TLS connector, and the same `sslmode`, for other settings of the same
    /// database (e.g. the dispatcher's `asynchronous_commit(config)`): `config`'s own
    /// `sslmode` is replaced by this connector's, so a derived connector never falls back
    /// to plaintext where this one would not.
    #[must_use]
    pub fn with_config(&self, mut config: Config) -> Self {
        config.ssl_mode(self.config.get_ssl_mode());
        Connector {
            config: bounded(config),
            tls: self.tls.clone(),
            statement_timeout: self.statement_timeout,
            transaction_idle_timeout: self.transaction_idle_timeout,
        }
    }

    /// The TLS connector, unless connections are plain. It is a `MakeTlsConnect` itself:
    /// hand it to anything that connects with tokio-postgres (an advisory lock, your own
    /// `Config::connect`), with [`config`](Self::config), whose `sslmode` says whether TLS
    /// is required.
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// How connections are secured, for messages: `plaintext`; `TLS, chain and host name
    /// verified against /etc/ssl/db-ca.pem`; `TLS, chain verified against …, host name not
    /// checked`; `TLS, not verified`; `TLS, checked by the application's TLS connector`;
    /// or, for libpq's default `prefer`, `TLS if the server offers it (not verified),
    /// else plaintext`.
    pub fn security(&self) -> String {
        let Some(tls) = &self.tls else { return "plaintext".to_owned() };
        let checks = tls.checks().unwrap_or("checked by the application's TLS connector");
        match self.config.get_ssl_mode() {
            SslMode::Disable => "plaintext".to_owned(),
            SslMode::Prefer => format!("TLS if the server offers it ({checks}), else plaintext"),
            _ => format!("TLS, {checks}"),
        }
    }

    /// Where this connects and how, for messages: hosts, ports, database, user and
    /// [`security`](Self::security) (never the password), e.g. `host=db port=5432
    /// dbname=app user=app (TLS, chain and host name verified against /etc/ssl/db-ca.pem)`.
    pub fn target(&self) -> String {
        let config = &self.config;
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|host| match host {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
        format!(
            "host={} port={} dbname={} user={} ({})",
            if hosts.is_empty() { "localhost".to_owned() } else { hosts.join(",") },
            if ports.is_empty() { "5432".to_owned() } else { ports.join(",") },
            config.get_dbname().unwrap_or("(the user name)"),
            config.get_user().unwrap_or("(unset)"),
            self.security(),
        )
    }

    /// Opens a connection and spawns the task that runs it, as tokio-postgres's examples
    /// do; the connection ends when the client is dropped. Opening it, startup and
    /// authentication included, takes at most the connect timeout.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        self.connect_with_task().await.map(|(client, _)| client)
    }

    /// [`connect`](Self::connect), with a handle that ends the connection's task at once:
    /// what a statement that got no answer in time uses to close a black-holed connection.
    pub(crate) async fn connect_with_task(&self) -> Result<(Client, AbortHandle), tokio_postgres::Error> {
        match &self.tls {
            None => Ok(spawn_connection(self.startup(self.config.connect(NoTls)).await?)),
            Some(tls) => Ok(spawn_connection(self.startup(self.config.connect(tls.clone())).await?)),
        }
    }

    /// Opens a connection whose messages (notifications, notices) the caller reads: it
    /// runs only while [`Messages::poll_message`] is polled.
    pub(crate) async fn connect_with_messages(&self) -> Result<(Client, Messages), tokio_postgres::Error> {
        match &self.tls {
            None => self
                .startup(self.config.connect(NoTls))
                .await
                .map(|(client, connection)| (client, Messages::of(connection))),
            Some(tls) => {
                let (client, connection) = self.startup(self.config.connect(tls.clone())).await?;
                Ok((client, Messages::of(connection)))
            }
        }
    }

    /// Bounds a whole connection attempt. tokio-postgres's `connect_timeout` covers the TCP
    /// connect only; a server (or proxy) that accepts and then says nothing would hold the
    /// startup forever (RES-5).
    async fn startup<T>(
        &self,
        connecting: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, tokio_postgres::Error> {
        let limit = self.config.get_connect_timeout().copied().unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        // Twice the socket's own limit: hosts are tried in turn, each with its own connect.
        let hosts = u32::try_from(self.config.get_hosts().len().max(1)).unwrap_or(u32::MAX);
        match tokio::time::timeout(limit.saturating_mul(hosts).saturating_mul(2), connecting).await {
            Ok(result) => result,
            // tokio-postgres's own "timeout waiting for server" (no SQLSTATE: transient).
            Err(_) => Err(crate::error::timed_out()),
        }
    }
}

impl From<Config> for Connector {
    fn from(config: Config) -> Self {
        Connector::new(config)
    }
}

/// Spawns the task that drives `connection`; its error, if any, resurfaces on the
/// client's next call. Aborting the task closes the socket at once; calls in flight then
/// fail as a closed connection.
fn spawn_connection<T>(pair: (Client, Connection<Socket, T>)) -> (Client, AbortHandle)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, connection) = pair;
    let task = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(target: "relayer::postgres", %error, "a connection ended with an error");
        }
    });
    (client, task.abort_handle())
}

/// What polling a connection for its next message gives.
type NextMessage = Poll<Option<Result<AsyncMessage, tokio_postgres::Error>>>;

/// The messages of a connection, plain or TLS, behind one type.
pub(crate) struct Messages {
    poll: Box<dyn FnMut(&mut Context<'_>) -> NextMessage + Send>,
}

impl Messages {
    fn of<T>(mut connection: Connection<Socket, T>) -> Self
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        Messages { poll: Box::new(move |cx| connection.poll_message(cx)) }
    }

    /// The next message; `None` once the connection closed cleanly.
    pub(crate) fn poll_message(&mut self, cx: &mut Context<'_>) -> NextMessage {
        (self.poll)(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_postgres::Config;

    use super::*;

    /// RES-5: a connection relayer opens probes its peer and gives up on unacknowledged data
    /// within bounds, whatever the application configured — when it configured nothing.
    #[test]
    fn every_connection_gets_keepalives_a_tcp_user_timeout_and_a_connect_timeout_res_5() {
        let connector = Connector::new("host=db user=app".parse::<Config>().unwrap());
        let config = connector.config();
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), DEFAULT_KEEPALIVES_IDLE);
        assert_eq!(config.get_keepalives_interval(), Some(DEFAULT_KEEPALIVES_INTERVAL));
        assert_eq!(config.get_keepalives_retries(), Some(DEFAULT_KEEPALIVES_RETRIES));
        assert_eq!(config.get_tcp_user_timeout(), Some(&DEFAULT_TCP_USER_TIMEOUT));
        assert_eq!(config.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(connector.statement_timeout(), DEFAULT_STATEMENT_TIMEOUT);
        // Derived connectors (a pool's labeled settings) keep the bounds.
        let derived = connector.with_config("host=db user=app application_name=x".parse().unwrap());
        assert_eq!(derived.config().get_tcp_user_timeout(), Some(&DEFAULT_TCP_USER_TIMEOUT));
        let bounds = derived.with_statement_timeout(Duration::from_secs(2)).network_bounds();
        assert!(
            bounds.contains("TCP user timeout 20s") && bounds.contains("statement timeout 2s"),
            "{bounds}"
        );
    }

    /// RES-5: what the connection string says wins: its keepalive settings, TCP user timeout
    /// and connect timeout are kept, and `keepalives=0` turns probing off.
    #[test]
    fn the_connection_strings_own_network_settings_are_kept_res_5() {
        let given = "host=db keepalives_idle=30 keepalives_interval=7 keepalives_retries=9 tcp_user_timeout=4 \
                     connect_timeout=3";
        let connector = Connector::new(given.parse::<Config>().unwrap());
        let config = connector.config();
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(config.get_keepalives_interval(), Some(Duration::from_secs(7)));
        assert_eq!(config.get_keepalives_retries(), Some(9));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(4)));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        let off = Connector::new("host=db keepalives=0".parse::<Config>().unwrap());
        assert!(!off.config().get_keepalives());
        assert_eq!(off.config().get_keepalives_interval(), None, "no probe settings once keepalives are off");
        assert!(off.network_bounds().contains("keepalives off"));
    }
}
