//! The binary over TLS, against a throwaway cluster with `ssl = on` and a certificate made
//! at test time, whose role `relayer_tls` may only connect over TLS: `status` and
//! `schema status` work with a verified certificate (`sslmode=verify-full` and
//! `--ca-file`, or `sslrootcert` in the URL), and a refused certificate fails naming the
//! address and the reason.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::process::{Command, Output};

use relayer_postgres::migrate;
use relayer_test_support::OwnedCluster;

/// Runs the binary with `args` against `url` (on a blocking thread).
async fn relayer(url: String, schema: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relayer"));
    command
        .args(["--database-url", &url, "--schema", schema])
        .args(args)
        .env_remove("RELAYER_LOG")
        .env_remove("RELAYER_CA_FILE");
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
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
    for needle in ["host=localhost", &format!("port={port}"), "TLS required", "invalid peer certificate"] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }

    let unknown_mode =
        relayer(format!("{} sslmode=verify", cluster.tls_url()), db.schema(), &["status"]).await;
    assert!(!unknown_mode.status.success());
    let stderr = String::from_utf8_lossy(&unknown_mode.stderr);
    assert!(stderr.contains("sslmode \"verify\""), "{stderr}");
}
