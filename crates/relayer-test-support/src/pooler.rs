//! A real PgBouncer in front of the test database, for the pooler tests.
//!
//! `.ci/run` starts PgBouncer on 127.0.0.1 in both pool modes: transaction mode on
//! `RELAYER_PGBOUNCER_TRANSACTION_PORT` (default 6432) and session mode on
//! `RELAYER_PGBOUNCER_SESSION_PORT` (default 6433), both in front of 127.0.0.1:5432.
//! [`pgbouncer`] gives a test the settings to reach its [`TestDb`] through one. When no
//! pooler answers, or the one that answers fronts another server, the test is reported
//! **SKIPPED** by name on the terminal (never a silent pass); in CI (`CI` set) with
//! PgBouncer installed, that is a failure instead.

use std::io::Write;
use std::time::Duration;

use tokio_postgres::Config;

use crate::TestDb;

/// A PgBouncer `pool_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// `pool_mode = transaction`: a server connection per transaction.
    Transaction,
    /// `pool_mode = session`: a server connection per client connection.
    Session,
}

impl PoolMode {
    fn port(self) -> u16 {
        let (variable, default) = match self {
            PoolMode::Transaction => ("RELAYER_PGBOUNCER_TRANSACTION_PORT", 6432),
            PoolMode::Session => ("RELAYER_PGBOUNCER_SESSION_PORT", 6433),
        };
        match std::env::var(variable) {
            Err(_) => default,
            Ok(value) => match value.trim().parse() {
                Ok(port) => port,
                Err(_) => panic!("relayer-test-support: {variable} must be a port number, got {value:?}"),
            },
        }
    }
}

impl std::fmt::Display for PoolMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PoolMode::Transaction => "transaction",
            PoolMode::Session => "session",
        })
    }
}

/// A `postgres://` URL for `config` as [`pgbouncer`] returns it (its user, the first port on
/// 127.0.0.1, its database and `application_name`), for drivers that take a URL (sqlx).
///
/// # Panics
///
/// When `config` lacks a user, a port or a database name.
pub fn pooler_url(config: &Config) -> String {
    let mut url = format!(
        "postgres://{}@127.0.0.1:{}/{}",
        config.get_user().expect("the pooler settings name a user"),
        config.get_ports().first().expect("the pooler settings name a port"),
        config.get_dbname().expect("the pooler settings name a database"),
    );
    if let Some(name) = config.get_application_name() {
        url.push_str(&format!("?application_name={name}"));
    }
    url
}

/// Settings that reach `db`'s database through PgBouncer in `mode`, with `db`'s user,
/// database and `application_name`; `None` when no such pooler answers, after `test` has
/// been reported skipped (see the `pooler` module docs).
///
/// # Panics
///
/// In CI (`CI` set) with PgBouncer installed, when no pooler answers.
pub async fn pgbouncer(db: &TestDb, mode: PoolMode, test: &str) -> Option<Config> {
    let port = mode.port();
    let base = db.config();
    let mut config = Config::new();
    config.host("127.0.0.1").port(port).connect_timeout(Duration::from_secs(5));
    if let Some(user) = base.get_user() {
        config.user(user);
    }
    if let Some(password) = base.get_password() {
        config.password(password);
    }
    if let Some(dbname) = base.get_dbname() {
        config.dbname(dbname);
    }
    if let Some(name) = base.get_application_name() {
        config.application_name(name);
    }
    let verdict = match crate::client::connect(&config).await {
        Err(e) => Err(format!("nothing answers at 127.0.0.1:{port}: {}", relayer_core::error_chain(&e))),
        // An unnamed statement (`query_typed`): in transaction mode the pooler may send a
        // named statement's parse and its execution to two different server connections.
        Ok(client) => match client
            .query_typed(
                "SELECT to_regnamespace($1) IS NOT NULL",
                &[(&db.schema(), tokio_postgres::types::Type::TEXT)],
            )
            .await
            .map(|rows| rows.first().is_some_and(|row| row.get::<_, bool>(0)))
        {
            Ok(true) => Ok(()),
            Ok(_) => {
                Err(format!("the pooler at 127.0.0.1:{port} fronts another server than the test database"))
            }
            Err(e) => Err(format!(
                "the pooler at 127.0.0.1:{port} failed a query: {}",
                relayer_core::error_chain(&e)
            )),
        },
    };
    match verdict {
        Ok(()) => Some(config),
        Err(why) => {
            let installed = std::path::Path::new("/usr/sbin/pgbouncer").exists()
                || std::env::var_os("PATH").is_some_and(|path| {
                    std::env::split_paths(&path).any(|dir| dir.join("pgbouncer").exists())
                });
            if std::env::var_os("CI").is_some() && installed {
                panic!(
                    "{test}: PgBouncer ({mode} mode) is installed but unusable: {why}; `.ci/run` starts it"
                );
            }
            // Straight to the terminal: libtest captures only the print macros.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no PgBouncer in {mode} mode: {why} (`.ci/run` installs and starts one)"
            );
            None
        }
    }
}

/// Clients of a transaction-mode pooler that each hold one server connection inside an
/// open transaction, so the pooler must hand every other client another one. Dropping it
/// closes them, and the pooler takes the server connections back.
#[derive(Default)]
pub struct HeldServers {
    clients: Vec<tokio_postgres::Client>,
    pids: Vec<i32>,
}

impl HeldServers {
    /// Holds `count` server connections of the pooler at `config`.
    ///
    /// # Panics
    ///
    /// When the pooler refuses a client or a statement.
    pub async fn hold(config: &Config, count: usize) -> HeldServers {
        let mut held = HeldServers::default();
        for _ in 0..count {
            held.hold_one(config).await;
        }
        held
    }

    /// Holds server connections of the pooler at `config`, at most `attempts`, until one of
    /// them is the backend `pid`; whether one is. A transaction-mode PgBouncer hands the
    /// most recently released server connection out first, so one attempt suffices unless
    /// another client took it meanwhile.
    ///
    /// # Panics
    ///
    /// When the pooler refuses a client or a statement.
    pub async fn hold_backend(config: &Config, pid: i32, attempts: usize) -> (HeldServers, bool) {
        let mut held = HeldServers::default();
        for _ in 0..attempts {
            if held.hold_one(config).await == pid {
                return (held, true);
            }
        }
        (held, false)
    }

    /// The backend process ids of the held server connections.
    pub fn pids(&self) -> &[i32] {
        &self.pids
    }

    async fn hold_one(&mut self, config: &Config) -> i32 {
        let mut client = match crate::client::connect(config).await {
            Ok(client) => client,
            Err(e) => panic!("connecting to the pooler: {}", relayer_core::error_chain(&e)),
        };
        // The simple query protocol: no statement is left on the server connection. A
        // pooled server connection can be gone when it is handed out: idle in the pool under
        // the last client's application_name, it is terminated when another test drops that
        // client's schema (`drop_schema`), and PgBouncer then fails the new client with
        // "invalid server parameter" or "server conn crashed?". That is the shared pooler,
        // not the test: the next attempt gets a live server connection.
        let mut attempt = 1;
        let (client, messages) = loop {
            match client.simple_query("BEGIN; SELECT pg_backend_pid()").await {
                Ok(messages) => break (client, messages),
                Err(e)
                    if attempt < 5
                        && (client.is_closed()
                            || e.as_db_error().is_some_and(|db| db.severity() == "FATAL")) =>
                {
                    attempt += 1;
                    client = match crate::client::connect(config).await {
                        Ok(client) => client,
                        Err(e) => panic!("connecting to the pooler: {}", relayer_core::error_chain(&e)),
                    };
                }
                Err(e) => panic!("holding a server connection: {}", relayer_core::error_chain(&e)),
            }
        };
        let pid = messages
            .iter()
            .find_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|pid| pid.parse().ok()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("pg_backend_pid() returned no row"));
        self.clients.push(client);
        self.pids.push(pid);
        pid
    }
}
