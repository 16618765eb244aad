//! [`Connector`]: where relayer connects (a tokio-postgres `Config`) and how (plain, or
//! through a TLS connector) — what every connection relayer opens is made from.

use std::task::{Context, Poll};

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Socket};

use crate::tls::Tls;

/// A database address with the TLS connector its connections use.
///
/// A `Config` converts into one without TLS (`Connector::from(config)`), so every
/// constructor taking `impl Into<Connector>` takes a plain `Config` too. With TLS, the
/// `Config`'s `sslmode` decides as in tokio-postgres: `disable` never, `prefer` (the
/// default) when the server offers it, `require` always (a server without TLS is refused).
///
/// ```no_run
/// # fn example(tls: tokio_postgres::NoTls) -> Result<(), tokio_postgres::Error> {
/// use relayer_postgres::Connector;
///
/// let config: tokio_postgres::Config = "host=db.example.com user=app dbname=app sslmode=require".parse()?;
/// // `tls`: any tokio-postgres TLS connector, e.g. tokio-postgres-rustls's MakeRustlsConnect.
/// let connector = Connector::with_tls(config, tls);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Connector {
    config: Config,
    /// `None`: plain connections (`NoTls`).
    tls: Option<Tls>,
}

impl Connector {
    /// Plain connections to `config`: no TLS, whatever its `sslmode` asks (`require` then
    /// fails to connect).
    pub fn new(config: Config) -> Self {
        Connector { config, tls: None }
    }

    /// Connections to `config` through `tls`, any tokio-postgres TLS connector (e.g.
    /// `tokio_postgres_rustls::MakeRustlsConnect`, `postgres_native_tls::MakeTlsConnector`).
    /// Passing `NoTls` gives the plain connector of [`new`](Self::new).
    pub fn with_tls<T>(config: Config, tls: T) -> Self
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
            return Connector::new(config);
        }
        if let Some(erased) = any.downcast_ref::<Tls>() {
            return Connector { config, tls: Some(erased.clone()) };
        }
        Connector { config, tls: Some(Tls::new(tls)) }
    }

    /// The connection settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same TLS connector for other settings of the same database (e.g. the
    /// dispatcher's `asynchronous_commit(config)`).
    #[must_use]
    pub fn with_config(&self, config: Config) -> Self {
        Connector { config, tls: self.tls.clone() }
    }

    /// The TLS connector, unless connections are plain. It is a `MakeTlsConnect` itself:
    /// hand it to anything that connects with tokio-postgres (an advisory lock, your own
    /// `Config::connect`).
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// Where this connects, for messages: hosts, ports, database, user and whether through
    /// TLS (never the password).
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
        let ssl = match (&self.tls, config.get_ssl_mode()) {
            (None, _) | (_, tokio_postgres::config::SslMode::Disable) => "no TLS",
            (Some(_), tokio_postgres::config::SslMode::Require) => "TLS required",
            (Some(_), _) => "TLS preferred",
        };
        format!(
            "host={} port={} dbname={} user={} ({ssl})",
            if hosts.is_empty() { "localhost".to_owned() } else { hosts.join(",") },
            if ports.is_empty() { "5432".to_owned() } else { ports.join(",") },
            config.get_dbname().unwrap_or("(the user name)"),
            config.get_user().unwrap_or("(unset)"),
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
