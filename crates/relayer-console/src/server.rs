//! Binding and serving: the settings checked, a small pool of its own, the routes, the
//! security headers every response carries.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use relayer_core::{DeadLetterPolicies, Namespace};
use relayer_postgres::{Connector, DeadLetterApi, DeadLetterPolicyStatements, LaneAdmin};
use tokio::net::TcpListener;

use crate::doctor::DoctorHook;
use crate::history::History;
use crate::routes::router;
use crate::settings::ConsoleSettings;
use crate::state::Inner;
use crate::tls::TlsListener;

/// Connections the console's pool opens at most: pages read one statement at a time.
const POOL_SIZE: u32 = 2;

/// Why the console did not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The settings are refused ([`ConsoleSettings::check`]), or the TLS files are.
    #[error("{0}")]
    Settings(String),
    /// The address cannot be listened on.
    #[error("console.listen: cannot listen on {address}: {source}")]
    Bind {
        /// The configured address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The database cannot be reached.
    #[error("console: {0}")]
    Database(#[from] relayer_postgres::StorageError),
    /// Serving failed.
    #[error("console: serving failed: {0}")]
    Serve(std::io::Error),
}

/// A console to bind: its settings and what it shows.
///
/// ```no_run
/// # async fn example(database: relayer_postgres::Connector) -> Result<(), relayer_console::ConsoleError> {
/// use relayer_console::{Console, ConsoleSettings, History};
///
/// let settings = ConsoleSettings::new("127.0.0.1:9188".parse().expect("an address"));
/// let history = History::new(std::time::Duration::from_secs(3_600));
/// let console = Console::new(settings, database, relayer_core::Namespace::default()).history(history).bind().await?;
/// println!("console on {}", console.url());
/// console.serve(std::future::pending()).await
/// # }
/// ```
pub struct Console {
    settings: ConsoleSettings,
    database: Connector,
    namespace: Namespace,
    policies: Option<DeadLetterPolicies>,
    history: Option<History>,
    doctor: Option<DoctorHook>,
}

impl Console {
    /// A console of `namespace` in `database`.
    pub fn new(settings: ConsoleSettings, database: impl Into<Connector>, namespace: Namespace) -> Self {
        Console {
            settings,
            database: database.into(),
            namespace,
            policies: None,
            history: None,
            doctor: None,
        }
    }

    /// The dead-letter policies the sidecar runs: shown with their stuck letters.
    #[must_use]
    pub fn policies(mut self, policies: DeadLetterPolicies) -> Self {
        self.policies = Some(policies);
        self
    }

    /// The sampler's history: the overview charts it.
    #[must_use]
    pub fn history(mut self, history: History) -> Self {
        self.history = Some(history);
        self
    }

    /// Where the doctor page gets its findings.
    #[must_use]
    pub fn doctor(mut self, doctor: DoctorHook) -> Self {
        self.doctor = Some(doctor);
        self
    }

    /// Checks the settings, loads the TLS files, connects its pool and listens: every
    /// reason not to start is an error here, before anything is served.
    pub async fn bind(self) -> Result<BoundConsole, ConsoleError> {
        self.settings.check().map_err(ConsoleError::Settings)?;
        let tls = match &self.settings.tls {
            Some(files) => Some(crate::tls::server_config(files).map_err(ConsoleError::Settings)?),
            None => None,
        };
        let pool = relayer_postgres::connect_pool(self.database, POOL_SIZE).await?;
        let address = self.settings.listen;
        let tcp =
            TcpListener::bind(address).await.map_err(|source| ConsoleError::Bind { address, source })?;
        let local = tcp.local_addr().map_err(|source| ConsoleError::Bind { address, source })?;
        let inner = Inner {
            dead_letters: DeadLetterApi::new(&self.namespace),
            lanes: LaneAdmin::new(&self.namespace),
            policy_statements: DeadLetterPolicyStatements::new(&self.namespace),
            settings: self.settings,
            namespace: self.namespace,
            pool,
            policies: self.policies,
            history: self.history,
            doctor: self.doctor,
            csrf: crate::auth::secret(),
            https: tls.is_some(),
        };
        let listener = match tls {
            Some(config) => Listening::Tls(TlsListener::new(tcp, config)),
            None => Listening::Plain(tcp),
        };
        Ok(BoundConsole { local, router: router(Arc::new(inner)), listener })
    }
}

enum Listening {
    Plain(TcpListener),
    Tls(TlsListener),
}

/// A console listening, not yet serving.
pub struct BoundConsole {
    local: SocketAddr,
    router: Router,
    listener: Listening,
}

impl BoundConsole {
    /// The address it listens on (the port chosen, when the settings said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Its address as a URL: `http://127.0.0.1:9188/`, or `https://…` with TLS.
    pub fn url(&self) -> String {
        let scheme = if matches!(self.listener, Listening::Tls(_)) { "https" } else { "http" };
        format!("{scheme}://{}/", self.local)
    }

    /// Serves until `shutdown` completes, then finishes the requests in flight.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ConsoleError> {
        match self.listener {
            Listening::Plain(tcp) => axum::serve(tcp, self.router)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(ConsoleError::Serve),
            Listening::Tls(tls) => axum::serve(tls, self.router)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(ConsoleError::Serve),
        }
    }
}
