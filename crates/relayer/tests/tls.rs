//! TLS everywhere the host connects, against a throwaway cluster with `ssl = on` and a
//! certificate made at test time (`OwnedCluster::start_with_tls`): its role `relayer_tls`
//! may only connect over TLS, so every session of that role is an encrypted one.
//!
//! A verified certificate: the host's pools, its LISTEN sessions and its advisory-lock
//! sessions all connect and work. A refused one (a CA that did not sign it, a host name it
//! does not name) stops the start with an error naming the address and the reason.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer::advisory_lock::PgAdvisoryLock;
use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::postgres::{CertificateCheck, Connector, connector_from_url, migrate, rustls_tls};
use relayer::{
    CleanupOptions, ConsumerOptions, DispatcherOptions, DistributedLock, LeaderElection, Led, NewMessage,
    Relayer, StartError,
};
use relayer_test_support::{OwnedCluster, TestDb, eventually, in_empty_home};
use tokio_postgres::config::SslMode;

#[derive(Default)]
struct Bodies(Mutex<Vec<Vec<u8>>>);

#[relayer::core::async_trait]
impl Handler for Bodies {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        self.0.lock().unwrap().push(message.body.clone());
        Outcome::Ack
    }
}

async fn tls_cluster() -> (OwnedCluster, TestDb, tokio_postgres::Client) {
    let cluster = OwnedCluster::start_with_tls().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (cluster, db, client)
}

/// Sessions of the TLS-only role, by `application_name` (`%` for all), that are encrypted.
async fn encrypted_sessions(client: &tokio_postgres::Client, application_name: &str, query: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.usename = 'relayer_tls' AND s.ssl AND a.application_name LIKE $1 AND a.query LIKE $2",
            &[&application_name, &query],
        )
        .await
        .unwrap()
        .get(0)
}

/// A host whose every connection goes through rustls with a verified certificate: the
/// dispatcher (pool and LISTEN), the queue transport, a consumer (pool and LISTEN) and
/// cleanup led by an advisory lock all work; every session of theirs is encrypted.
#[tokio::test]
async fn a_host_works_over_verified_tls_pools_listen_and_lock_sessions() {
    let (cluster, db, mut client) = tls_cluster().await;
    // sslmode left at prefer: a TLS connector given to the builder requires TLS anyway.
    let config = cluster.tls_config();
    let tls = rustls_tls(CertificateCheck::VerifyFull, &[&cluster.ca_file()], false).unwrap();
    let bodies = Arc::new(Bodies::default());
    let fast = Duration::from_millis(100);
    let host = Relayer::builder(config, db.namespace().clone())
        .tls(tls)
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(Duration::from_secs(3600)).build().unwrap())
        .consumer(
            Subscription::new("orders", ConsumerOptions::builder().poll_interval(fast).build().unwrap())
                .unwrap(),
            Arc::clone(&bodies),
        )
        .cleanup(Led::new(CleanupOptions::default(), LeaderElection::AdvisoryLock))
        .start()
        .await
        .unwrap();

    // The dispatcher polls hourly: only its LISTEN session (over TLS) can wake it at once.
    eventually("the dispatcher and the consumer listen over TLS", || async {
        encrypted_sessions(&client, "%", "LISTEN %").await >= 2
    })
    .await;
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[NewMessage::new("queue", "orders", b"over tls".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the message is dispatched and handled", || async { !bodies.0.lock().unwrap().is_empty() })
        .await;
    eventually("cleanup took its advisory lock on a TLS session", || async {
        encrypted_sessions(&client, "relayer-advisory-lock", "%").await >= 1
    })
    .await;
    let plain: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.usename = 'relayer_tls' AND NOT s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(plain, 0);
    host.shutdown().await;
    assert_eq!(*bodies.0.lock().unwrap(), vec![b"over tls".to_vec()]);
}

/// A lock taken over TLS is held by an encrypted session, and released.
#[tokio::test]
async fn an_advisory_lock_is_taken_over_tls() {
    // connector_from_url reads ~/.postgresql/root.crt as libpq does: not the runner's.
    if !in_empty_home("an_advisory_lock_is_taken_over_tls") {
        return;
    }
    let (cluster, _db, client) = tls_cluster().await;
    let url =
        format!("{} sslmode=verify-full sslrootcert='{}'", cluster.tls_url(), cluster.ca_file().display());
    let connector = connector_from_url(&url, None).unwrap();
    let lock = PgAdvisoryLock::with_tls(connector.config().clone(), connector.tls().unwrap().clone());
    let guard = lock.try_lock("tls-test").await.unwrap().unwrap();
    let held: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_ssl s USING (pid) \
             WHERE l.locktype = 'advisory' AND l.granted AND s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 1);
    guard.release().await.unwrap();
}

/// The table of `connector_from_url`: which sslmode checks what.
#[tokio::test]
async fn libpq_sslmodes_check_what_libpq_checks() {
    // connector_from_url reads ~/.postgresql/root.crt as libpq does: not the runner's.
    if !in_empty_home("libpq_sslmodes_check_what_libpq_checks") {
        return;
    }
    let (cluster, _db, _client) = tls_cluster().await;
    let ca = cluster.ca_file();
    let other = cluster.other_ca_file();
    let by_ip = cluster.tls_url().replace("host=localhost hostaddr=127.0.0.1", "host=127.0.0.1");
    let connects = |url: String, ca_file: Option<std::path::PathBuf>| async move {
        let connector = connector_from_url(&url, ca_file.as_deref()).unwrap();
        match connector.connect().await {
            Ok(client) => {
                client.simple_query("SELECT 1").await.map(|_| ()).map_err(|e| relayer::error_chain(&e))
            }
            Err(e) => Err(relayer::error_chain(&e)),
        }
    };
    let url = |base: &str, mode: &str| format!("{base} sslmode={mode}");
    let base = cluster.tls_url();
    // verify-full: the right CA and the right name.
    connects(url(&base, "verify-full"), Some(ca.clone())).await.unwrap();
    assert!(connects(url(&base, "verify-full"), Some(other.clone())).await.is_err());
    assert!(connects(url(&by_ip, "verify-full"), Some(ca.clone())).await.is_err());
    // verify-ca: the right CA, whatever the name.
    connects(url(&by_ip, "verify-ca"), Some(ca.clone())).await.unwrap();
    assert!(connects(url(&base, "verify-ca"), Some(other.clone())).await.is_err());
    // verify-ca without a CA of its own would accept any public certificate: refused.
    let refused = connector_from_url(&url(&base, "verify-ca"), None).unwrap_err().to_string();
    assert!(refused.contains("verify-ca needs the CA"), "{refused}");
    // require: encrypted, unchecked without a CA; as verify-ca with one.
    connects(url(&by_ip, "require"), None).await.unwrap();
    assert!(connects(url(&base, "require"), Some(other)).await.is_err());
    // prefer (the default) encrypts when offered; disable does not, which this role refuses.
    connects(base.clone(), None).await.unwrap();
    let refused = connects(url(&base, "disable"), None).await.unwrap_err();
    assert!(refused.contains("no encryption"), "{refused}");
}

/// The client certificate of a `connector_from_url` session: the server's record of it
/// (`pg_stat_ssl.client_dn`), or the connection's error.
async fn client_dn(url: &str) -> Result<Option<String>, String> {
    let connector = connector_from_url(url, None).map_err(|e| e.to_string())?;
    let client = connector.connect().await.map_err(|e| relayer::error_chain(&e))?;
    let row = client
        .query_one("SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
        .await
        .map_err(|e| relayer::error_chain(&e))?;
    Ok(row.get(0))
}

/// Item 8 of issue 21, as libpq does: `sslcert` / `sslkey` present a client certificate
/// over rustls. The cluster lets its role `relayer_cert` in only with that certificate
/// (`hostssl … cert`): with it the session is authenticated by it (the server records its
/// subject), without it the server refuses the connection. A missing certificate or key,
/// and a key others may read, are refused before connecting, naming the setting and path.
#[tokio::test]
async fn a_client_certificate_named_by_sslcert_and_sslkey_authenticates_and_none_is_refused() {
    // connector_from_url reads ~/.postgresql as libpq does: not the runner's.
    if !in_empty_home("a_client_certificate_named_by_sslcert_and_sslkey_authenticates_and_none_is_refused") {
        return;
    }
    let (cluster, _db, _client) = tls_cluster().await;
    let verified = format!(
        "{} sslmode=verify-full sslrootcert='{}'",
        cluster.cert_user_url(),
        cluster.ca_file().display()
    );
    let (cert, key) = (cluster.client_cert_file(), cluster.client_key_file());
    let presenting = format!("{verified} sslcert='{}' sslkey='{}'", cert.display(), key.display());
    assert_eq!(client_dn(&presenting).await.unwrap().as_deref(), Some("/CN=relayer_cert"));
    let security = connector_from_url(&presenting, None).unwrap().security();
    assert!(security.ends_with(&format!("; client certificate {}", cert.display())), "{security}");
    // The same as a URL, percent-encoded.
    let config = cluster.tls_config();
    let (port, dbname) = (config.get_ports()[0], config.get_dbname().unwrap());
    let url = format!(
        "postgres://relayer_cert@localhost:{port}/{dbname}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}\
         &sslcert={}&sslkey={}",
        encode(&cluster.ca_file()),
        encode(&cert),
        encode(&key)
    );
    assert_eq!(client_dn(&url).await.unwrap().as_deref(), Some("/CN=relayer_cert"));

    let refused = client_dn(&verified).await.unwrap_err();
    assert!(refused.contains("certificate"), "the server asks for a certificate: {refused}");

    let missing = format!("{verified} sslcert=/nonexistent/me.crt sslkey='{}'", key.display());
    let error = client_dn(&missing).await.unwrap_err();
    assert!(error.contains("/nonexistent/me.crt (sslcert)"), "{error}");
    let missing = format!("{verified} sslcert='{}' sslkey=/nonexistent/me.key", cert.display());
    let error = client_dn(&missing).await.unwrap_err();
    assert!(error.contains("/nonexistent/me.key (sslkey)"), "{error}");

    let readable = std::env::temp_dir().join(format!("relayer-readable-{}.key", uuid::Uuid::new_v4()));
    std::fs::copy(&key, &readable).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error =
        client_dn(&format!("{verified} sslcert='{}' sslkey='{}'", cert.display(), readable.display()))
            .await
            .unwrap_err();
    std::fs::remove_file(&readable).unwrap();
    assert!(error.contains("(sslkey) has group or world access (mode 0644)"), "{error}");
}

/// A path percent-encoded for a URL's query.
fn encode(path: &std::path::Path) -> String {
    path.display()
        .to_string()
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Each connector names how it secures its connections, as logs and errors show it: what
/// is verified, against which CA, or that nothing is.
#[tokio::test]
async fn connectors_name_their_security_precisely() {
    // connector_from_url reads ~/.postgresql/root.crt as libpq does: not the runner's.
    if !in_empty_home("connectors_name_their_security_precisely") {
        return;
    }
    let (cluster, _db, _client) = tls_cluster().await;
    let (ca, base) = (cluster.ca_file(), cluster.tls_url());
    let security = |url: String, ca_file: Option<&std::path::Path>| {
        connector_from_url(&url, ca_file).unwrap().security()
    };
    assert_eq!(security(format!("{base} sslmode=disable"), None), "plaintext");
    assert_eq!(security(base.clone(), None), "TLS if the server offers it (not verified), else plaintext");
    assert_eq!(security(format!("{base} sslmode=require"), None), "TLS, not verified");
    assert_eq!(
        security(format!("{base} sslmode=require"), Some(&ca)),
        format!("TLS, chain verified against {}, host name not checked", ca.display())
    );
    assert_eq!(
        security(format!("{base} sslmode=verify-full sslrootcert='{}'", ca.display()), None),
        format!("TLS, chain and host name verified against {}", ca.display())
    );
    let given = rustls_tls(CertificateCheck::VerifyFull, &[&ca], false).unwrap();
    let connector = Connector::with_tls(cluster.tls_config(), given).unwrap();
    assert_eq!(connector.security(), format!("TLS, chain and host name verified against {}", ca.display()));
    assert!(connector.target().ends_with(&format!("({})", connector.security())), "{}", connector.target());
    assert_eq!(Connector::new(cluster.tls_config()).security(), "plaintext");
}

/// A TLS connector given explicitly (to the builder, to `Connector::with_tls`, to an
/// advisory lock, or a CA file to `connector_from_url`) never lets a connection fall back
/// to plaintext: against a server without TLS, with the default `sslmode=prefer`, each is
/// refused instead. Only libpq's default (no sslmode, no CA) may go on in plaintext.
#[tokio::test]
async fn a_given_tls_connector_never_falls_back_to_plaintext() {
    // connector_from_url reads ~/.postgresql/root.crt as libpq does: not the runner's.
    if !in_empty_home("a_given_tls_connector_never_falls_back_to_plaintext") {
        return;
    }
    let plain = OwnedCluster::start().await;
    let db = plain.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let config = db.config();
    assert_eq!(config.get_ssl_mode(), SslMode::Prefer);
    let unverified = || rustls_tls(CertificateCheck::Unverified, &[], false).unwrap();

    let connector = Connector::with_tls(config.clone(), unverified()).unwrap();
    assert_eq!(connector.config().get_ssl_mode(), SslMode::Require);
    assert_eq!(connector.security(), "TLS, not verified");
    let refused = relayer::error_chain(&connector.connect().await.unwrap_err());
    assert!(refused.contains("server does not support TLS"), "{refused}");

    let error = Relayer::builder(config.clone(), db.namespace().clone())
        .tls(unverified())
        .cleanup(Led::new(CleanupOptions::default(), LeaderElection::AdvisoryLock))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, StartError::Connect(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("(TLS, not verified)") && text.contains("server does not support TLS"), "{text}");

    let lock = PgAdvisoryLock::with_tls(config.clone(), unverified());
    let refused = relayer::error_chain(&lock.try_lock("no-fallback").await.unwrap_err());
    assert!(refused.contains("server does not support TLS"), "{refused}");

    let url = format!(
        "host=127.0.0.1 port={} user={} dbname={}",
        config.get_ports()[0],
        config.get_user().unwrap(),
        config.get_dbname().unwrap()
    );
    let tls_cluster = OwnedCluster::start_with_tls().await;
    let with_ca = connector_from_url(&url, Some(&tls_cluster.ca_file())).unwrap();
    assert_eq!(with_ca.config().get_ssl_mode(), SslMode::Require);
    let refused = relayer::error_chain(&with_ca.connect().await.unwrap_err());
    assert!(refused.contains("server does not support TLS"), "{refused}");

    // libpq's default: TLS if offered, else plaintext — for the pools and the lock sessions.
    let libpq_default = connector_from_url(&url, None).unwrap();
    libpq_default.connect().await.unwrap().simple_query("SELECT 1").await.unwrap();
    let host = Relayer::builder(libpq_default, db.namespace().clone())
        .cleanup(Led::new(CleanupOptions::default(), LeaderElection::AdvisoryLock))
        .start()
        .await
        .unwrap();
    eventually("cleanup takes its advisory lock on a plaintext session", || async {
        client
            .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            >= 1
    })
    .await;
    host.shutdown().await;
}

/// `sslmode=disable` together with a TLS connector is refused, in one error naming both,
/// before anything connects: by `Connector::with_tls`, the builder, an advisory lock and
/// `connector_from_url` with a CA file.
#[tokio::test]
async fn sslmode_disable_with_a_tls_connector_is_refused_naming_both() {
    let db = TestDb::new().await;
    let mut config = db.config();
    config.ssl_mode(SslMode::Disable);
    let unverified = || rustls_tls(CertificateCheck::Unverified, &[], false).unwrap();

    let conflict = Connector::with_tls(config.clone(), unverified()).unwrap_err().to_string();
    assert!(conflict.contains("sslmode=disable") && conflict.contains("TLS connector"), "{conflict}");
    // NoTls is no TLS connector: disable stays plain.
    let plain = Connector::with_tls(config.clone(), tokio_postgres::NoTls).unwrap();
    assert_eq!(plain.security(), "plaintext");

    let error =
        Relayer::builder(config.clone(), db.namespace().clone()).tls(unverified()).start().await.unwrap_err();
    assert!(matches!(error, StartError::Setting { setting: "tls", .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("sslmode=disable") && text.contains(".tls(…)"), "{text}");

    let lock = PgAdvisoryLock::with_tls(config, unverified());
    let refused = relayer::error_chain(&lock.try_lock("disabled").await.unwrap_err());
    assert!(refused.contains("sslmode=disable") && refused.contains("TLS connector"), "{refused}");

    let ca = std::env::temp_dir().join(format!("relayer-ca-{}.pem", relayer::core::Uuid::new_v4()));
    let url =
        format!("host=127.0.0.1 user=postgres dbname=test sslmode=disable sslrootcert='{}'", ca.display());
    let refused = connector_from_url(&url, Some(&ca)).unwrap_err().to_string();
    for needle in
        ["sslmode=disable", &format!("sslrootcert={}", ca.display()), &format!("--ca-file {}", ca.display())]
    {
        assert!(refused.contains(needle), "{needle:?} missing from: {refused}");
    }
}

/// A certificate signed by a CA the host does not trust stops the start, and the error
/// names the address and the reason.
#[tokio::test]
async fn an_untrusted_certificate_is_refused_naming_the_address_and_the_reason() {
    let (cluster, db, _client) = tls_cluster().await;
    let mut config = cluster.tls_config();
    config.ssl_mode(SslMode::Require);
    let tls = rustls_tls(CertificateCheck::VerifyFull, &[&cluster.other_ca_file()], false).unwrap();
    let error = Relayer::builder(config, db.namespace().clone()).tls(tls).start().await.unwrap_err();
    assert!(matches!(error, StartError::Connect(_)), "{error:?}");
    let text = error.to_string();
    let port = cluster.tls_config().get_ports()[0];
    let checked =
        format!("(TLS, chain and host name verified against {})", cluster.other_ca_file().display());
    for needle in [
        "host=localhost",
        &format!("port={port}"),
        "user=relayer_tls",
        &checked,
        "invalid peer certificate",
        "UnknownIssuer",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}

/// A certificate that does not name the host connected to is refused, naming both.
#[tokio::test]
async fn a_certificate_for_another_host_name_is_refused_naming_the_address_and_the_reason() {
    let (cluster, db, _client) = tls_cluster().await;
    // The certificate names localhost only.
    let config: tokio_postgres::Config =
        cluster.tls_url().replace("host=localhost hostaddr=127.0.0.1", "host=127.0.0.1").parse().unwrap();
    let database = Connector::with_tls(
        config,
        rustls_tls(CertificateCheck::VerifyFull, &[&cluster.ca_file()], false).unwrap(),
    )
    .unwrap();
    let error = Relayer::builder(database, db.namespace().clone()).start().await.unwrap_err();
    let text = error.to_string();
    for needle in
        ["host=127.0.0.1", "invalid peer certificate", "not valid for name \"127.0.0.1\"", "localhost"]
    {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}
