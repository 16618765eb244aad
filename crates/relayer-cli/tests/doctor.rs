//! `relayer doctor` (OBS-6) as an operator runs it: the exit status is the report's worst
//! severity (0 ok, 1 warning, 2 critical, 3 could not check), `--json` has one shape, and the
//! human report names the session holding a snapshot and says what to do.
//!
//! The namespace lives on a throwaway cluster of the test's own: the shared test server runs
//! with autovacuum off (a critical finding on every run), and other tests' sessions there
//! would hold snapshots of their own.
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

mod common;

use std::time::Duration;

use common::relayer;
use relayer::NewMessage;
use relayer_core::Uuid;
use relayer_postgres::{HeadFailure, LaneStatements, OutboxWriter, migrate};
use relayer_test_support::OwnedCluster;

#[tokio::test]
async fn doctor_exits_by_its_worst_finding_and_names_the_snapshot_holder_obs_6() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();

    // A healthy namespace: exit 0, every finding ok.
    let ran = relayer(&db, &["doctor", "--json"]).await;
    let report = ran.json();
    assert_eq!(ran.code, Some(0), "{report:#}\n{}", ran.stderr);
    assert_eq!(report["severity"], "ok");
    assert_eq!(report["exit_code"], 0);
    assert_eq!(report["namespace"], db.namespace().to_string());
    let findings = report["findings"].as_array().unwrap();
    assert!(findings.len() >= 15, "{report:#}");
    for f in findings {
        assert_eq!(f["severity"], "ok", "{f}");
        for key in ["code", "subject", "message", "advice"] {
            assert!(f[key].is_string(), "{key} of {f}");
        }
    }
    assert_eq!(report["counts"]["ok"].as_u64(), Some(findings.len() as u64));

    // A parked lane: exit 1.
    let written = OutboxWriter::new(db.namespace(), ["queue"])
        .enqueue(&client, &[NewMessage::new("queue", "orders", b"head".to_vec()).lane("account-7")])
        .await
        .unwrap();
    let lanes = LaneStatements::new(db.namespace());
    let token = Uuid::new_v4();
    lanes.claim(&client, token, Duration::from_secs(30), 10, "", 40, &[]).await.unwrap();
    let park = HeadFailure::Park { error: "refused" };
    assert!(lanes.fail_head(&client, "account-7", token, written[0].seq, park).await.unwrap());
    let ran = relayer(&db, &["doctor", "--json"]).await;
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let report = ran.json();
    assert_eq!(report["severity"], "warning");
    let parked: Vec<_> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "lanes.parked" && f["severity"] == "warning")
        .collect();
    assert_eq!(parked.len(), 1, "{report:#}");
    assert_eq!(parked[0]["subject"], "lane account-7");

    // A snapshot held by another session, past thresholds of zero: exit 2, and the human
    // report names the session and what to do.
    let mut config = db.config();
    config.application_name("nightly-report");
    let (holder, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").await.unwrap();
    let holder_pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let ran = relayer(&db, &["doctor", "--horizon-warning", "0s", "--horizon-critical", "0s"]).await;
    assert_eq!(ran.code, Some(2), "{}\n{}", ran.stdout, ran.stderr);
    common::fits_80_columns(&ran.stdout);
    assert!(ran.stdout.contains("\nverdict: CRITICAL (1 critical, "), "{}", ran.stdout);
    assert!(ran.stdout.contains(&format!("\nCRITICAL  xmin.session  pid {holder_pid}\n")), "{}", ran.stdout);
    assert!(ran.stdout.contains("\nWARNING   lanes.parked  lane account-7\n"), "{}", ran.stdout);
    let prose = common::flat(&ran.stdout);
    assert!(prose.contains("application_name \"nightly-report\""), "{prose}");
    assert!(prose.contains("state idle in transaction"), "{prose}");
    assert!(prose.contains("what to do: While it holds it"), "{prose}");
    assert!(prose.contains(&format!("pg_terminate_backend({holder_pid})")), "{prose}");
    holder.batch_execute("ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn doctor_that_cannot_check_exits_3_and_bad_thresholds_are_refused_obs_6() {
    let db = relayer_test_support::TestDb::new().await;
    let mut command =
        common::relayer_command_at("host=127.0.0.1 port=1 user=postgres dbname=test connect_timeout=2", &db);
    command.arg("doctor");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("error: doctor on host=127.0.0.1 port=1"),
        "{output:?}"
    );

    let ran = relayer(&db, &["doctor", "--horizon-warning", "10m", "--horizon-critical", "1m"]).await;
    assert_eq!(ran.code, Some(3), "{ran:?}");
    assert!(
        ran.stderr.contains("--horizon-critical (60s) must not be shorter than --horizon-warning (600s)"),
        "{}",
        ran.stderr
    );
    let ran = relayer(&db, &["doctor", "--stuck-after", "soon"]).await;
    assert_eq!(ran.code, Some(3), "a usage error is not a verdict: {ran:?}");
    assert!(ran.stderr.contains("--stuck-after"), "{}", ran.stderr);
}
