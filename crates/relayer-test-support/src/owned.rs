//! A throwaway cluster that one test owns, and may crash and restart (SPEC §16: "server
//! restarts where the fixture owns the server").
//!
//! The shared server of [`TestDb::new`] is never restarted: other tests use it, and it may be
//! somebody's real server. A test that restarts PostgreSQL starts its own cluster with
//! [`OwnedCluster::start`] (`initdb` and `pg_ctl` on a free port, as the throwaway cluster of
//! the module docs), makes its schemas on it with [`OwnedCluster::test_db`], and stops it with
//! [`OwnedCluster::stop_immediately`] and [`OwnedCluster::start_again`].
//!
//! Commits on it are durable across those restarts: the cluster skips `fsync` (an immediate
//! stop is a crash of the server, not of the machine, so the kernel keeps what was written),
//! but its database commits with `synchronous_commit = on`, so a commit that was acknowledged
//! survives. Connections may still turn it off for themselves, as relayer's dispatcher does.

use std::sync::Arc;

use crate::TestDb;
use crate::client;
use crate::cluster::Cluster;
use crate::server::Server;

/// A PostgreSQL cluster owned by one test: stopped and deleted when the last of it and the
/// [`TestDb`]s made on it is dropped.
///
/// ```no_run
/// # async fn example() {
/// use relayer_test_support::OwnedCluster;
///
/// let cluster = OwnedCluster::start().await;
/// let db = cluster.test_db().await;
/// // … work on `db` …
/// cluster.stop_immediately().await; // as in a crash: connections die mid-statement
/// cluster.start_again().await;      // same port, same data, after crash recovery
/// # drop(db); }
/// ```
pub struct OwnedCluster {
    server: Arc<Server>,
}

impl std::fmt::Debug for OwnedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedCluster").field("server", &self.server).finish()
    }
}

impl OwnedCluster {
    /// Creates and starts a cluster of this test's own.
    ///
    /// # Panics
    ///
    /// When `initdb`/`pg_ctl` are not installed or the cluster does not start (the message
    /// says why), or its database cannot be made to commit durably.
    pub async fn start() -> OwnedCluster {
        Self::start_with(false).await
    }

    /// A cluster of this test's own that offers TLS (`ssl = on`) with a certificate made
    /// now (by the `openssl` command) for the host name `localhost` only, signed by the CA
    /// of [`ca_file`](Self::ca_file). Its role of [`tls_config`](Self::tls_config) may
    /// connect over TLS only, so a session of that role is an encrypted one; the fixtures
    /// ([`test_db`](Self::test_db), [`config`](Self::config)) connect as before.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), and when `openssl` is missing or fails.
    pub async fn start_with_tls() -> OwnedCluster {
        let cluster = Self::start_with(true).await;
        let client = cluster.admin().await;
        let create = format!(
            "CREATE ROLE {} LOGIN SUPERUSER; CREATE ROLE {} LOGIN SUPERUSER",
            crate::certificates::TLS_USER,
            crate::certificates::CERT_USER
        );
        if let Err(e) = client.batch_execute(&create).await {
            panic!(
                "relayer-test-support: cannot create the TLS role on {}: {}",
                cluster.server,
                relayer_core::error_chain(&e)
            );
        }
        cluster
    }

    /// Connection settings of the TLS-only role, to the host name the certificate names
    /// (`localhost`, reached at 127.0.0.1), `sslmode` left to the caller (prefer).
    ///
    /// # Panics
    ///
    /// On a cluster not started with [`start_with_tls`](Self::start_with_tls).
    pub fn tls_config(&self) -> tokio_postgres::Config {
        let url = self.tls_url();
        url.parse().unwrap_or_else(|e| panic!("relayer-test-support: {url:?} does not parse: {e}"))
    }

    /// [`tls_config`](Self::tls_config) as a key=value connection string (for a command line).
    ///
    /// # Panics
    ///
    /// On a cluster not started with [`start_with_tls`](Self::start_with_tls).
    pub fn tls_url(&self) -> String {
        self.tls_cluster();
        let config = self.server.config();
        format!(
            "host={} hostaddr=127.0.0.1 port={} user={} dbname={}",
            crate::certificates::HOST_NAME,
            config.get_ports().first().copied().unwrap_or(5432),
            crate::certificates::TLS_USER,
            config.get_dbname().unwrap_or("postgres"),
        )
    }

    /// Connection settings of the role that may connect only with the client certificate
    /// of [`client_cert_file`](Self::client_cert_file), as a key=value string to the host
    /// name the server's certificate names, without any TLS setting.
    ///
    /// # Panics
    ///
    /// On a cluster not started with [`start_with_tls`](Self::start_with_tls).
    pub fn cert_user_url(&self) -> String {
        self.tls_url().replace(
            &format!("user={}", crate::certificates::TLS_USER),
            &format!("user={}", crate::certificates::CERT_USER),
        )
    }

    /// The client certificate (PEM, signed by the CA of [`ca_file`](Self::ca_file)) whose
    /// common name is the role of [`cert_user_url`](Self::cert_user_url).
    pub fn client_cert_file(&self) -> std::path::PathBuf {
        self.tls_cluster().tls_dir().join(crate::certificates::CLIENT_CERT)
    }

    /// The client certificate's private key (PEM, mode 0600).
    pub fn client_key_file(&self) -> std::path::PathBuf {
        self.tls_cluster().tls_dir().join(crate::certificates::CLIENT_KEY)
    }

    /// The PEM file of the CA that signed the server's certificate.
    pub fn ca_file(&self) -> std::path::PathBuf {
        self.tls_cluster().tls_dir().join(crate::certificates::CA_CERT)
    }

    /// The PEM file of a CA that did not sign the server's certificate.
    pub fn other_ca_file(&self) -> std::path::PathBuf {
        self.tls_cluster().tls_dir().join(crate::certificates::OTHER_CA_CERT)
    }

    fn tls_cluster(&self) -> &Cluster {
        match self.server.cluster() {
            Some(cluster) if cluster.has_tls() => cluster,
            _ => panic!("relayer-test-support: {} was not started with start_with_tls", self.server),
        }
    }

    async fn admin(&self) -> tokio_postgres::Client {
        match client::connect(&self.server.config()).await {
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

    async fn start_with(tls: bool) -> OwnedCluster {
        let cluster = match Cluster::start_with(tls).await {
            Ok(cluster) => cluster,
            Err(e) => panic!("relayer-test-support: cannot start a cluster of the test's own: {e}"),
        };
        let owned = OwnedCluster { server: Arc::new(Server::of_cluster(cluster)) };
        // A per-database setting outranks the cluster's command line (synchronous_commit=off,
        // for speed) in every new session, so what a session commits survives a restart.
        let client = owned.admin().await;
        if let Err(e) = client.batch_execute("ALTER DATABASE postgres SET synchronous_commit = on").await {
            panic!(
                "relayer-test-support: cannot make {} commit durably: {}",
                owned.server,
                relayer_core::error_chain(&e)
            );
        }
        owned
    }

    /// A fresh random schema on this cluster, as [`TestDb::new`] makes on the shared server.
    pub async fn test_db(&self) -> TestDb {
        TestDb::on(Arc::clone(&self.server)).await
    }

    /// Connection settings for the cluster's database (the one [`test_db`](Self::test_db)
    /// schemas live in).
    pub fn config(&self) -> tokio_postgres::Config {
        self.server.config()
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`), as a crash would: every
    /// session ends mid-statement, nothing is checkpointed. Returns once it is down.
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails (the message carries its output).
    pub async fn stop_immediately(&self) {
        self.pg_ctl(Cluster::stop_immediately).await;
    }

    /// Starts the server again on the same port, data directory and settings; returns once
    /// it accepts connections, that is after crash recovery.
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails (the message carries its output).
    pub async fn start_again(&self) {
        self.pg_ctl(Cluster::start_again).await;
    }

    /// [`stop_immediately`](Self::stop_immediately), then [`start_again`](Self::start_again):
    /// `pg_ctl restart -m immediate`.
    pub async fn restart_immediately(&self) {
        self.stop_immediately().await;
        self.start_again().await;
    }

    /// Runs a blocking `pg_ctl` step off the test's runtime.
    async fn pg_ctl(&self, step: fn(&Cluster) -> Result<(), String>) {
        let server = Arc::clone(&self.server);
        let done = tokio::task::spawn_blocking(move || match server.cluster() {
            Some(cluster) => step(cluster),
            None => Err("not a throwaway cluster".to_owned()),
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("relayer-test-support: {}: {e}", self.server),
            Err(e) => panic!("relayer-test-support: the pg_ctl task failed: {e}"),
        }
    }
}
