//! The binary over TLS, against a throwaway cluster with `ssl = on` and a certificate made
//! at test time, whose role `relayer_tls` may only connect over TLS: `status` and
//! `schema status` work with a verified certificate (`sslmode=verify-full` and
//! `--ca-file`, or `sslrootcert` in the URL), and a refused certificate fails naming the
//! address and the reason.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use relayer_postgres::migrate;
use relayer_test_support::OwnedCluster;

/// Runs the binary with `args` against `url` (on a blocking thread), its home an empty
/// directory (no `~/.postgresql/root.crt`).
async fn relayer(url: String, schema: &str, args: &[&str]) -> Output {
    let home = Home::new();
    relayer_at_home(&home, url, schema, args).await
}

/// Runs the binary with `args` against `url`, its `HOME` being `home`.
async fn relayer_at_home(home: &Home, url: String, schema: &str, args: &[&str]) -> Output {
    relayer_with_env(home, url, schema, args, &[]).await
}

/// Runs the binary with `args` against `url`, its `HOME` being `home`, with the libpq
/// variables `env` (and no others).
async fn relayer_with_env(
    home: &Home,
    url: String,
    schema: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relayer"));
    command
        .args(["--database-url", &url, "--schema", schema])
        .args(args)
        .env("HOME", &home.0)
        .env_remove("RELAYER_LOG")
        .env_remove("RELAYER_CA_FILE")
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .envs(env.iter().copied());
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

/// A home directory of the test's own, removed when dropped.
struct Home(PathBuf);

impl Home {
    fn new() -> Home {
        let dir = std::env::temp_dir().join(format!("relayer-home-{}", relayer_core::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Home(dir)
    }

    /// A home whose `~/.postgresql/root.crt` is a copy of `ca`.
    fn with_root_cert(ca: &Path) -> Home {
        let home = Home::new();
        std::fs::create_dir_all(home.0.join(".postgresql")).unwrap();
        std::fs::copy(ca, home.0.join(".postgresql/root.crt")).unwrap();
        home
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(output: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test]
async fn status_and_schema_status_work_over_verified_tls_and_a_refused_certificate_says_why() {
    let cluster = OwnedCluster::start_with_tls().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let verify_full = format!("{} sslmode=verify-full", cluster.tls_url());
    let ca = cluster.ca_file().display().to_string();

    let status = relayer(verify_full.clone(), db.schema(), &["--ca-file", &ca, "status", "--json"]).await;
    assert!(status.status.success(), "{}", text(&status));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["namespace"], db.namespace().to_string(), "{json}");

    let with_root_cert = format!("{verify_full} sslrootcert='{ca}'");
    let schema = relayer(with_root_cert, db.schema(), &["schema", "status", "--json"]).await;
    assert!(schema.status.success(), "{}", text(&schema));
    let json: serde_json::Value = serde_json::from_slice(&schema.stdout).unwrap();
    assert_eq!(json["state"], "current", "{json}");

    let other = cluster.other_ca_file().display().to_string();
    let refused = relayer(verify_full, db.schema(), &["--ca-file", &other, "status"]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let port = cluster.tls_config().get_ports()[0];
    for needle in [
        "host=localhost",
        &format!("port={port}"),
        "(TLS, chain and host name verified against",
        "invalid peer certificate",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }

    let unknown_mode =
        relayer(format!("{} sslmode=verify", cluster.tls_url()), db.schema(), &["status"]).await;
    assert!(!unknown_mode.status.success());
    let stderr = String::from_utf8_lossy(&unknown_mode.stderr);
    assert!(stderr.contains("sslmode \"verify\""), "{stderr}");
}

/// libpq's default CA file: without sslrootcert or --ca-file, `~/.postgresql/root.crt` is
/// the CA when it exists — `verify-full` checks against it (the test CA is in no system
/// store), and `require` then checks the chain, so a server its CA did not sign is refused.
#[tokio::test]
async fn the_default_root_certificate_is_used_as_libpq_uses_it() {
    let cluster = OwnedCluster::start_with_tls().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let url = |mode: &str| format!("{} sslmode={mode}", cluster.tls_url());
    let ours = Home::with_root_cert(&cluster.ca_file());
    let other = Home::with_root_cert(&cluster.other_ca_file());

    for mode in ["verify-full", "verify-ca", "require"] {
        let status = relayer_at_home(&ours, url(mode), db.schema(), &["schema", "status", "--json"]).await;
        assert!(status.status.success(), "{mode}: {}", text(&status));
    }
    // Without root.crt, verify-full has only the system's roots: the test CA is not one.
    let bare = relayer(url("verify-full"), db.schema(), &["schema", "status"]).await;
    assert!(!bare.status.success(), "{}", text(&bare));
    // require with a root.crt that did not sign the server's certificate: refused, naming it.
    let refused = relayer_at_home(&other, url("require"), db.schema(), &["schema", "status"]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let named = format!("chain verified against {}", other.0.join(".postgresql/root.crt").display());
    for needle in [named.as_str(), "invalid peer certificate"] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
    // An explicit --ca-file replaces root.crt.
    let ca = cluster.ca_file().display().to_string();
    let flag =
        relayer_at_home(&other, url("require"), db.schema(), &["--ca-file", &ca, "schema", "status"]).await;
    assert!(flag.status.success(), "{}", text(&flag));
}

/// --ca-file means TLS: against a server without TLS, the default sslmode=prefer does not
/// fall back to plaintext, and sslmode=disable with --ca-file is refused naming both.
#[tokio::test]
async fn a_ca_file_never_falls_back_to_plaintext() {
    let tls = OwnedCluster::start_with_tls().await;
    let plain = OwnedCluster::start().await;
    let db = plain.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let config = db.config();
    let url = format!(
        "host=127.0.0.1 port={} user={} dbname={}",
        config.get_ports()[0],
        config.get_user().unwrap(),
        config.get_dbname().unwrap()
    );
    let ca = tls.ca_file().display().to_string();

    let without = relayer(url.clone(), db.schema(), &["schema", "status"]).await;
    assert!(without.status.success(), "libpq's default prefer goes on in plaintext: {}", text(&without));
    let refused = relayer(url.clone(), db.schema(), &["--ca-file", &ca, "schema", "status"]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("server does not support TLS"), "{stderr}");

    let disable = format!("{url} sslmode=disable");
    let refused = relayer(disable, db.schema(), &["--ca-file", &ca, "schema", "status"]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for needle in ["sslmode=disable", &format!("--ca-file {ca}")] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
}

/// libpq's environment: `PGSSLMODE=verify-full` and `PGSSLROOTCERT` apply when the URL
/// does not say — the right root connects, verified; a root that did not sign the server's
/// certificate, or none at all (only the system's roots, which lack the test CA), is
/// refused, never silently unverified. A URL's own sslmode wins over the variable.
#[tokio::test]
async fn pgsslmode_and_pgsslrootcert_apply_as_in_libpq() {
    let cluster = OwnedCluster::start_with_tls().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let home = Home::new();
    let (ours, other) =
        (cluster.ca_file().display().to_string(), cluster.other_ca_file().display().to_string());
    let run = |url: String, env: Vec<(&'static str, String)>| {
        let (home, schema) = (&home, db.schema());
        async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            relayer_with_env(home, url, schema, &["schema", "status", "--json"], &env).await
        }
    };
    let url = cluster.tls_url();

    let verified =
        run(url.clone(), vec![("PGSSLMODE", "verify-full".into()), ("PGSSLROOTCERT", ours.clone())]).await;
    assert!(verified.status.success(), "{}", text(&verified));
    let refused =
        run(url.clone(), vec![("PGSSLMODE", "verify-full".into()), ("PGSSLROOTCERT", other.clone())]).await;
    assert!(!refused.status.success(), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for needle in
        [format!("chain and host name verified against {other}"), "invalid peer certificate".to_owned()]
    {
        assert!(stderr.contains(&needle), "{needle:?} missing from: {stderr}");
    }
    let no_root = run(url.clone(), vec![("PGSSLMODE", "verify-full".into())]).await;
    assert!(
        !no_root.status.success(),
        "verify-full from the environment went unverified: {}",
        text(&no_root)
    );
    // The URL's sslmode wins: require with our root checks the chain against it.
    let url_wins =
        run(format!("{url} sslmode=require"), vec![("PGSSLMODE", "verify".into()), ("PGSSLROOTCERT", ours)])
            .await;
    assert!(url_wins.status.success(), "{}", text(&url_wins));
    let bad = run(url, vec![("PGSSLMODE", "verify".into())]).await;
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("PGSSLMODE: sslmode \"verify\""), "{stderr}");
}
