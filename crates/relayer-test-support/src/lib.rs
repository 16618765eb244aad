//! Test fixtures for relayer: a real PostgreSQL server, and a fresh random schema per test.
//! For the broker transports: [`broker_or_skip`] (a test without its broker is skipped by
//! name, loudly, never passed silently) and [`TcpProxy`] (a loopback forwarder a test can
//! cut, stall and restore), and [`broker_scenarios`], the outage and stall scenarios every
//! broker transport runs. For crash windows: [`FaultyStore`], which wraps any store
//! source a worker is given and injects scripted [`Fault`]s at chosen calls — fail a call
//! before or after it reaches the store, kill the session's connection, delay or hold a
//! call — usable in your own tests as in relayer's.
//!
//! Every storage and worker test runs against a real PostgreSQL (SPEC §16). A test asks for
//! a [`TestDb`]; it gets its own schema (`t_` + 16 hex digits) on a shared server, so tests
//! run in parallel without seeing each other's rows. The schema is dropped when the
//! `TestDb` is dropped.
//!
//! # Where the server comes from
//!
//! The first of these that works is used, once per test process:
//!
//! 1. **`DATABASE_URL`**, when set (for example
//!    `postgres://postgres@127.0.0.1:5432/test`). If it is set but does not answer, the test
//!    fails: an explicit choice is never silently replaced by another server.
//! 2. **A server at the default local address**: `127.0.0.1:5432`, user `postgres`,
//!    database `test` (then the Unix socket in `/var/run/postgresql`). A missing `test`
//!    database is created.
//! 3. **A throwaway cluster** made with `initdb` and `pg_ctl`, found on `PATH` or under
//!    `/usr/lib/postgresql/*/bin`. It lives in a temporary directory, listens on a free
//!    port of 127.0.0.1, runs as the `postgres` user when the tests run as root, and is
//!    stopped and deleted when the last `TestDb` of the process that uses it is dropped.
//!    Clusters left behind by killed processes are swept by the next one.
//! 4. **A `postgres:17` container** started with testcontainers when a Docker engine
//!    answers; removed when the last `TestDb` that uses it is dropped.
//! 5. Otherwise [`TestDb::new`] panics with a message that says how to provide one.
//!
//! # Restarting the server
//!
//! The server above is shared and never restarted. A test that crashes and restarts
//! PostgreSQL owns a throwaway cluster of its own: [`OwnedCluster`] (it needs `initdb` and
//! `pg_ctl`, as in step 3), whose `test_db` schemas behave like [`TestDb::new`]'s.
//!
//! # Providing a database
//!
//! Any one of these is enough:
//!
//! - `export DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/DB` (the user needs
//!   `CREATE` on the database);
//! - start PostgreSQL locally with trust (or peer) authentication for user `postgres`,
//!   e.g. `pg_ctlcluster 15 main start`;
//! - install the PostgreSQL server package (`apt-get install postgresql`) and let the
//!   fixture start its own cluster;
//! - start Docker.
//!
//! # Example
//!
//! ```no_run
//! # async fn example() {
//! let db = relayer_test_support::TestDb::new().await;
//! let client = db.connect().await;
//! let table = db.namespace().table("outbox");
//! client.batch_execute(&format!("CREATE TABLE {table} (id bigint)")).await.unwrap();
//! # }
//! ```

pub mod broker_scenarios;
mod brokers;
mod certificates;
mod client;
mod cluster;
mod container;
mod fault;
mod faulty_error;
mod faulty_store;
mod faulty_transport;
mod home;
mod owned;
mod pooler;
mod proxy;
mod server;
mod tls_proxy;
mod wait;
mod warnings;

use std::sync::Arc;
use std::time::Duration;

use bb8_postgres::PostgresConnectionManager;
use relayer_core::Namespace;
use tokio_postgres::NoTls;

pub use crate::brokers::{
    Broker, OwnNatsServer, StoppedRabbitMq, broker_or_skip, own_nats_server_or_skip, report_skip,
    stop_rabbitmq_or_skip,
};
pub use crate::certificates::TestCertificates;
pub use crate::fault::{Fault, FaultAction, FaultHandle, StoreCall, Transience};
pub use crate::faulty_error::FaultyError;
pub use crate::faulty_store::{FaultySession, FaultyStore};
pub use crate::faulty_transport::{FaultyTransport, Sink};
pub use crate::home::in_empty_home;
pub use crate::owned::OwnedCluster;
pub use crate::pooler::{HeldServers, PoolMode, pgbouncer, pooler_url};
pub use crate::proxy::TcpProxy;
use crate::server::{Server, Sources};
pub use crate::tls_proxy::{TlsStart, TlsTerminator};
pub use crate::wait::{PATIENCE, eventually, within};
pub use crate::warnings::Warnings;

/// Table prefix of every test namespace.
const PREFIX: &str = "relayer_";

/// How long [`Drop`] waits for the schema to be dropped before it gives up (and leaves it).
const DROP_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh random schema on a real PostgreSQL server, for one test.
///
/// Create one per test with [`TestDb::new`]. Everything the test builds should live in
/// [`TestDb::namespace`]; the schema and all it holds are dropped (`DROP SCHEMA … CASCADE`)
/// when the `TestDb` is dropped. Connections made from [`TestDb::config`] carry the schema
/// name as their `application_name`, so they can be found in `pg_stat_activity`.
pub struct TestDb {
    schema: String,
    namespace: Namespace,
    // Kept until after the schema is dropped: a server this process started is stopped
    // when the last `TestDb` holding it goes away.
    server: Arc<Server>,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb").field("schema", &self.schema).field("server", &self.server).finish()
    }
}

impl TestDb {
    /// Finds (or starts) a PostgreSQL server as the [module docs](crate) describe, and
    /// creates a fresh schema on it.
    ///
    /// # Panics
    ///
    /// When no server can be had (the message says how to provide one), or when the
    /// schema cannot be created.
    pub async fn new() -> TestDb {
        Self::from_sources(Sources::All).await
    }

    /// Like [`TestDb::new`], restricted to the given sources (the crate's own tests use it
    /// to force the throwaway-cluster path).
    pub(crate) async fn from_sources(sources: Sources) -> TestDb {
        TestDb::on(server::acquire(sources).await).await
    }

    /// A fresh schema on `server`.
    pub(crate) async fn on(server: Arc<Server>) -> TestDb {
        let simple = uuid::Uuid::new_v4().simple().to_string();
        let schema = format!("t_{}", &simple[..16]);
        let namespace = match Namespace::new(schema.as_str(), PREFIX) {
            Ok(namespace) => namespace,
            Err(e) => panic!("relayer-test-support: generated namespace {schema:?} refused: {e}"),
        };
        let db = TestDb { schema, namespace, server };
        let client = db.connect().await;
        if let Err(e) = client.batch_execute(&format!("CREATE SCHEMA \"{}\"", db.schema)).await {
            panic!(
                "relayer-test-support: CREATE SCHEMA {} failed on {}: {}",
                db.schema,
                db.server,
                relayer_core::error_chain(&e)
            );
        }
        db
    }

    /// The test's namespace: the random schema, with table prefix `relayer_`.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The random schema's name (`t_` followed by 16 lowercase hex digits).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Connection settings for the test database, with `application_name` set to the
    /// schema name.
    pub fn config(&self) -> tokio_postgres::Config {
        let mut config = self.server.config();
        config.application_name(&self.schema);
        config
    }

    /// A `postgres://` URL for the same database as [`TestDb::config`] (including the
    /// `application_name`), for child processes.
    pub fn url(&self) -> String {
        let base = self.server.url();
        let separator = if base.contains('?') { '&' } else { '?' };
        format!("{base}{separator}application_name={}", self.schema)
    }

    /// Opens a fresh connection; its driver runs on a spawned task of the current runtime.
    ///
    /// # Panics
    ///
    /// When the connection cannot be opened.
    pub async fn connect(&self) -> tokio_postgres::Client {
        match client::connect(&self.config()).await {
            Ok(client) => client,
            Err(e) => {
                panic!(
                    "relayer-test-support: cannot connect to {}: {}",
                    self.server,
                    relayer_core::error_chain(&e)
                )
            }
        }
    }

    /// A bb8 pool of at most `max_size` connections made from [`TestDb::config`].
    ///
    /// # Panics
    ///
    /// When the pool cannot open its first connection.
    pub async fn pool(&self, max_size: u32) -> bb8::Pool<PostgresConnectionManager<NoTls>> {
        let manager = PostgresConnectionManager::new(self.config(), NoTls);
        match bb8::Pool::builder().max_size(max_size).build(manager).await {
            Ok(pool) => pool,
            Err(e) => panic!(
                "relayer-test-support: cannot build a pool on {}: {}",
                self.server,
                relayer_core::error_chain(&e)
            ),
        }
    }

    /// Terminates (`pg_terminate_backend`) every other session of this database whose
    /// `application_name` is `application_name`, and returns how many were terminated.
    ///
    /// On PostgreSQL 14 and later it waits (up to 5 s each) until the sessions have exited,
    /// so the victim's next query fails.
    ///
    /// # Panics
    ///
    /// When the query fails.
    pub async fn terminate_backends(&self, application_name: &str) -> u64 {
        let client = self.connect().await;
        let version: i32 =
            match client.query_one("SELECT current_setting('server_version_num')::int", &[]).await {
                Ok(row) => row.get(0),
                Err(e) => panic!(
                    "relayer-test-support: reading the server version failed: {}",
                    relayer_core::error_chain(&e)
                ),
            };
        let terminate =
            if version >= 140_000 { "pg_terminate_backend(pid, 5000)" } else { "pg_terminate_backend(pid)" };
        let sql = format!(
            "SELECT count(*) FROM (SELECT {terminate} AS done FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database() \
             AND pid <> pg_backend_pid()) AS t WHERE done"
        );
        match client.query_one(&sql, &[&application_name]).await {
            Ok(row) => u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
            Err(e) => panic!(
                "relayer-test-support: terminating {application_name:?} sessions failed: {}",
                relayer_core::error_chain(&e)
            ),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop cannot await, and may run inside or outside a runtime: use a thread with a
        // runtime of its own and a fresh connection, and wait for it (bounded).
        let config = self.config();
        let schema = self.schema.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name(format!("drop-{schema}")).spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(drop_schema(&config, &schema)),
                Err(e) => Err(format!("no runtime: {e}")),
            };
            let _ = done_tx.send(result);
        });
        if let Err(e) = spawned {
            eprintln!("relayer-test-support: schema {} left behind (no thread: {e})", self.schema);
            return;
        }
        match done_rx.recv_timeout(DROP_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("relayer-test-support: schema {} left behind: {e}", self.schema),
            Err(_) => {
                eprintln!("relayer-test-support: schema {} left behind: DROP SCHEMA timed out", self.schema);
            }
        }
    }
}

/// Drops the test schema. Sessions still open under the schema's `application_name`
/// (pools or tasks that outlived the test body) are terminated first, so their locks
/// cannot block the drop.
async fn drop_schema(config: &tokio_postgres::Config, schema: &str) -> Result<(), String> {
    let mut config = config.clone();
    config.application_name(format!("{schema}_drop"));
    let client = client::connect(&config).await.map_err(|e| relayer_core::error_chain(&e))?;
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&schema],
        )
        .await
        .map_err(|e| relayer_core::error_chain(&e))?;
    client
        .batch_execute(&format!("SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .map_err(|e| relayer_core::error_chain(&e))
}

#[cfg(test)]
mod tests;
