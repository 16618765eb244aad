//! Finding a PostgreSQL server, in the order of SPEC §16.
//!
//! An external server (`DATABASE_URL`, or the default local address) is probed once per
//! process and the answer cached: it is only a URL. A server this process starts (a
//! throwaway cluster or a container) is shared through a `Weak`: every `TestDb` holds an
//! `Arc<Server>`, and when the last one is dropped the server is stopped.

use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Mutex, OnceCell};
use tokio_postgres::Config;
use tokio_postgres::error::SqlState;

use crate::client::connect;

use crate::cluster::Cluster;
use crate::container::Container;

/// The environment variable that names the test database explicitly.
const DATABASE_URL: &str = "DATABASE_URL";

/// The default local addresses, tried in this order.
const LOCAL_URLS: [&str; 2] =
    ["postgres://postgres@127.0.0.1:5432/test", "postgres://postgres@%2Fvar%2Frun%2Fpostgresql:5432/test"];

/// Connect timeout of probes, so an address that drops packets does not hang the tests.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The answer of probing `DATABASE_URL` and the default local address (a URL, not a handle).
static EXTERNAL: OnceCell<Option<String>> = OnceCell::const_new();

/// The server this process started, shared by the live `TestDb`s.
static OWNED: Mutex<Weak<Server>> = Mutex::const_new(Weak::new());

/// Which sources [`acquire`] may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sources {
    /// All of them, in order.
    All,
    /// Only a throwaway cluster (skips `DATABASE_URL`, the local server and Docker).
    #[cfg_attr(not(test), allow(dead_code))]
    ClusterOnly,
}

/// A PostgreSQL server the tests can use.
pub(crate) struct Server {
    /// `postgres://` URL of the database, without `application_name`.
    url: String,
    /// What stops the server when this is dropped (nothing for an external server).
    owner: Owner,
}

enum Owner {
    External,
    Cluster(Cluster),
    /// Held for its `Drop`, which removes the container.
    Container {
        _container: Container,
    },
}

impl Server {
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn config(&self) -> Config {
        // The URL was parsed successfully when the server was found.
        Config::from_str(&self.url).unwrap_or_else(|_| Config::new())
    }

    /// A server on `cluster`, owned by whoever holds it (never shared through [`acquire`]).
    pub(crate) fn of_cluster(cluster: Cluster) -> Server {
        Server { url: cluster.url(), owner: Owner::Cluster(cluster) }
    }

    /// The throwaway cluster behind this server, if it is one.
    pub(crate) fn cluster(&self) -> Option<&Cluster> {
        match &self.owner {
            Owner::Cluster(cluster) => Some(cluster),
            Owner::External | Owner::Container { .. } => None,
        }
    }

    /// The data directory of a throwaway cluster.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn cluster_dir(&self) -> Option<&std::path::Path> {
        self.cluster().map(Cluster::dir)
    }
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.owner {
            Owner::External => "server",
            Owner::Cluster(_) => "throwaway cluster",
            Owner::Container { .. } => "container",
        };
        write!(f, "{kind} {}", self.url)
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Finds or starts a server, in SPEC §16 order; panics with a how-to when none can be had.
pub(crate) async fn acquire(sources: Sources) -> Arc<Server> {
    let mut tried = Vec::new();
    if sources == Sources::All {
        if let Some(url) = EXTERNAL.get_or_init(probe_external).await {
            return Arc::new(Server { url: url.clone(), owner: Owner::External });
        }
        tried.push("DATABASE_URL is not set".to_owned());
        tried.push(format!("nothing answers at {}", LOCAL_URLS.join(" or ")));
    }

    let mut owned = OWNED.lock().await;
    if let Some(server) = owned.upgrade() {
        return server;
    }
    let server = match start_owned(sources, &mut tried).await {
        Some(server) => Arc::new(server),
        None => panic!("{}", no_server_message(&tried)),
    };
    *owned = Arc::downgrade(&server);
    server
}

async fn start_owned(sources: Sources, tried: &mut Vec<String>) -> Option<Server> {
    match Cluster::start().await {
        Ok(cluster) => return Some(Server::of_cluster(cluster)),
        Err(e) => tried.push(format!("throwaway cluster: {e}")),
    }
    if sources == Sources::All {
        match Container::start().await {
            Ok(container) => {
                return Some(Server {
                    url: container.url().to_owned(),
                    owner: Owner::Container { _container: container },
                });
            }
            Err(e) => tried.push(format!("testcontainers postgres:17: {e}")),
        }
    }
    None
}

/// Steps (1) and (2): `DATABASE_URL`, else the default local address.
async fn probe_external() -> Option<String> {
    if let Ok(url) = std::env::var(DATABASE_URL) {
        let url = url.trim().to_owned();
        return match try_url(&url).await {
            Ok(url) => Some(url),
            Err(e) => panic!(
                "relayer-test-support: DATABASE_URL is set to {url:?}, but that database cannot be used: \
                 {e}\nFix the URL or start that server, or unset DATABASE_URL to let the tests find or \
                 start a server themselves."
            ),
        };
    }
    for url in LOCAL_URLS {
        if let Ok(url) = try_url(url).await {
            return Some(url);
        }
    }
    None
}

/// Connects to `url` (creating its database if the server answers but the database is
/// missing) and returns it as a `postgres://` URL.
async fn try_url(url: &str) -> Result<String, String> {
    let mut config = Config::from_str(url).map_err(|e| format!("invalid URL: {e}"))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PROBE_TIMEOUT);
    }
    match connect(&config).await {
        Ok(client) => {
            client.simple_query("SELECT 1").await.map_err(|e| relayer_core::error_chain(&e))?;
        }
        Err(e) if e.code() == Some(&SqlState::INVALID_CATALOG_NAME) => {
            // Several test processes may race to create it: whoever wins, it must exist now.
            let created = create_database(&config).await;
            let client = connect(&config).await.map_err(|e2| match created {
                Err(e3) => format!(
                    "{}; creating it failed: {}",
                    relayer_core::error_chain(&e),
                    relayer_core::error_chain(&e3)
                ),
                Ok(()) => format!(
                    "{}; created it, then: {}",
                    relayer_core::error_chain(&e),
                    relayer_core::error_chain(&e2)
                ),
            })?;
            client.simple_query("SELECT 1").await.map_err(|e| relayer_core::error_chain(&e))?;
        }
        Err(e) => return Err(relayer_core::error_chain(&e)),
    }
    Ok(if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        url.to_owned()
    } else {
        to_url(&config)
    })
}

/// Creates the database `config` names, through the `postgres` maintenance database.
async fn create_database(config: &Config) -> Result<(), tokio_postgres::Error> {
    let dbname = config.get_dbname().unwrap_or("postgres").to_owned();
    let mut maintenance = config.clone();
    maintenance.dbname("postgres");
    let client = connect(&maintenance).await?;
    let sql = format!("CREATE DATABASE \"{}\"", dbname.replace('"', "\"\""));
    client.batch_execute(&sql).await
}

/// Writes a key=value configuration as a `postgres://` URL (first host only).
fn to_url(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let encode = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let mut url = String::from("postgres://");
    if let Some(user) = config.get_user() {
        url.push_str(&encode(user));
        if let Some(password) = config.get_password() {
            url.push(':');
            url.push_str(&encode(&String::from_utf8_lossy(password)));
        }
        url.push('@');
    }
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) => url.push_str(&encode(host)),
        Some(Host::Unix(path)) => url.push_str(&encode(&path.to_string_lossy())),
        None => url.push_str("127.0.0.1"),
    }
    let port = config.get_ports().first().copied().unwrap_or(5432);
    url.push_str(&format!(":{port}/"));
    url.push_str(&encode(config.get_dbname().unwrap_or("postgres")));
    url
}

fn no_server_message(tried: &[String]) -> String {
    let mut message = String::from(
        "relayer-test-support: no PostgreSQL server for the tests. Provide one of:\n\
         \x20 - set DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/DB (the user needs CREATE on DB);\n\
         \x20 - start PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres \
         (e.g. `pg_ctlcluster 15 main start`; the database `test` is created if missing);\n\
         \x20 - install the PostgreSQL server (initdb and pg_ctl on PATH or under \
         /usr/lib/postgresql/*/bin, e.g. `apt-get install postgresql`) so a throwaway cluster can be started;\n\
         \x20 - start a Docker engine so testcontainers can run postgres:17.\n\
         What was tried:",
    );
    for reason in tried {
        message.push_str("\n  * ");
        message.push_str(reason);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_config_becomes_a_url_that_parses_back() {
        let config = Config::from_str("host=/var/run/postgresql port=5433 user=me password='a b' dbname=x")
            .expect("valid");
        let url = to_url(&config);
        assert_eq!(url, "postgres://me:a%20b@%2Fvar%2Frun%2Fpostgresql:5433/x");
        let back = Config::from_str(&url).expect("parses");
        assert_eq!(back.get_hosts(), config.get_hosts());
        assert_eq!(back.get_ports(), &[5433]);
        assert_eq!(back.get_password(), Some(&b"a b"[..]));
    }

    #[test]
    fn the_how_to_names_every_way_to_provide_a_database() {
        let message = no_server_message(&["x".to_owned()]);
        for needle in ["DATABASE_URL=", "127.0.0.1:5432", "initdb", "Docker", "* x"] {
            assert!(message.contains(needle), "{needle} missing from {message}");
        }
    }
}
