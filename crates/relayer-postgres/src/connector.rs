//! [`Connector`]: where relayer connects (a tokio-postgres `Config`) and how (plain, or
//! through a TLS connector) — what every connection relayer opens is made from.

use std::task::{Context, Poll};

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
#[derive(Clone, Debug)]
pub struct Connector {
    config: Config,
    /// `None`: plain connections (`NoTls`).
    tls: Option<Tls>,
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
        Connector { config, tls: None }
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
                Ok(Connector { config, tls: Some(tls) })
            }
            _ => Ok(Connector { config, tls: Some(tls) }),
        }
    }

    /// `config` (whose `sslmode` is `prefer`) through `tls` when the server offers TLS, in
    /// plaintext otherwise: libpq's default, for `connector_from_url` only.
    #[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
    pub(crate) fn preferring(config: Config, tls: Tls) -> Self {
        Connector { config, tls: Some(tls) }
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
        Connector { config, tls: self.tls.clone() }
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
    /// do; the connection ends when the client is dropped.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        match &self.tls {
            None => Ok(spawn_connection(self.config.connect(NoTls).await?)),
            Some(tls) => Ok(spawn_connection(self.config.connect(tls.clone()).await?)),
        }
    }

    /// Opens a connection whose messages (notifications, notices) the caller reads: it
    /// runs only while [`Messages::poll_message`] is polled.
    pub(crate) async fn connect_with_messages(&self) -> Result<(Client, Messages), tokio_postgres::Error> {
        match &self.tls {
            None => self
                .config
                .connect(NoTls)
                .await
                .map(|(client, connection)| (client, Messages::of(connection))),
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                Ok((client, Messages::of(connection)))
            }
        }
    }
}

impl From<Config> for Connector {
    fn from(config: Config) -> Self {
        Connector::new(config)
    }
}

/// Spawns the task that drives `connection`; its error, if any, resurfaces on the
/// client's next call.
fn spawn_connection<T>(pair: (Client, Connection<Socket, T>)) -> Client
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, connection) = pair;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(target: "relayer::postgres", %error, "a connection ended with an error");
        }
    });
    client
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
