//! `relayer run` as a sidecar and `relayer config check`, against a real PostgreSQL:
//! configuration errors in one line naming their path (OPT-2), a clean stop on SIGTERM that
//! releases the lease so a second sidecar leads at once (LIF-1, LDR-2), and the Prometheus
//! endpoint serving the counters after a pass (OBS-2).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use common::{relayer, relayer_command, setup, write};
use relayer::NewMessage;
use relayer_test_support::{TestDb, eventually, within};
use tokio_postgres::Client;

/// A configuration file removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("relayer-run-{}.toml", relayer::core::Uuid::new_v4()));
        std::fs::write(&path, text).unwrap();
        ConfigFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A running sidecar, killed if the test ends without stopping it. Its standard error is
/// read as it comes, on a thread of its own.
struct Sidecar {
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Sidecar {
    fn start(db: &TestDb, config: &ConfigFile) -> Self {
        let mut child = relayer_command(db)
            .args(["run", "--config", config.path()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut pipe, sink) = (child.stderr.take().unwrap(), Arc::clone(&stderr));
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 512];
            while let Ok(read) = pipe.read(&mut chunk) {
                if read == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..read]));
            }
        });
        Sidecar { child: Some(child), stderr, reader: Some(reader) }
    }

    /// Waits until the sidecar has written `text` to its standard error.
    async fn wait_for_stderr(&self, text: &str) {
        eventually(&format!("the sidecar says {text:?}"), || async {
            self.stderr.lock().unwrap().contains(text)
        })
        .await;
    }

    /// Sends SIGTERM, without waiting.
    fn signal_term(&self) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        let killed = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
    }

    /// Sends SIGTERM and waits for the exit; returns whether it succeeded, and its stderr.
    async fn terminate(&mut self) -> (bool, String) {
        self.signal_term();
        self.wait().await
    }

    /// Waits for the exit; returns whether it succeeded, and its stderr.
    async fn wait(&mut self) -> (bool, String) {
        let (status, stderr) = self.wait_exit().await;
        (status.success(), stderr)
    }

    /// Waits for the exit; returns its status, and its stderr.
    async fn wait_exit(&mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let reader = self.reader.take().unwrap();
        let status = within(tokio::task::spawn_blocking(move || {
            let status = child.wait().unwrap();
            reader.join().unwrap();
            status
        }))
        .await
        .unwrap();
        (status, self.stderr.lock().unwrap().clone())
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

const SWEEPER: &str =
    "[sweeper]\nsweep_interval = \"100ms\"\nrecovery_delay = \"0s\"\nlease_duration = \"30s\"\n";

/// The sweeper lease's holder, by instance id (the owner without its per-start nonce,
/// `{instance_id}#{nonce}`), and whether it is live.
async fn lease_owner(client: &Client, db: &TestDb) -> Option<(String, bool)> {
    let sql = format!(
        "SELECT owner, expires_at > now() FROM {} WHERE job = 'sweeper'",
        db.namespace().table("leases")
    );
    client.query_opt(&sql, &[]).await.unwrap().map(|row| {
        let owner: String = row.get(0);
        let (instance, nonce) = owner.rsplit_once('#').expect("the owner carries a nonce");
        assert_eq!(nonce.len(), 8, "{owner}");
        (instance.to_owned(), row.get(1))
    })
}

/// OPT-2: each bad value is refused by `config check` and by `run` in one line on standard
/// error naming its path, with a non-zero exit and nothing started.
#[tokio::test]
async fn each_configuration_error_is_one_line_naming_its_path_opt_2() {
    let db = TestDb::new().await;
    let cases = [
        ("[sweeper]\nbatch_size = 0\n", "error: sweeper.batch_size: 0 is out of range (1..=10000)"),
        ("[sweeper]\nbatch_sise = 10\n", "error: sweeper.batch_sise: unknown key"),
        (
            "[cleanup]\ncleanup_interval = \"soon\"\n",
            "error: cleanup.cleanup_interval: invalid duration \"soon\"",
        ),
        (
            "[namespace]\nschema = \"bad-name\"\n[sweeper]\n",
            "error: namespace.schema: invalid schema \"bad-name\"",
        ),
    ];
    for (text, expected) in cases {
        let config = ConfigFile::new(text);
        for command in [vec!["config", "check", config.path()], vec!["run", "--config", config.path()]] {
            let ran = relayer(&db, &command).await;
            assert!(!ran.success, "{command:?} accepted {text:?}");
            assert_eq!(ran.stderr.lines().count(), 1, "{command:?}: {}", ran.stderr);
            assert!(ran.stderr.starts_with(expected), "{command:?}: {}", ran.stderr);
        }
    }
    // The command line's namespace is checked the same way, naming the flag.
    let sweeper = ConfigFile::new(SWEEPER);
    let ran = relayer(&db, &["--prefix", "a-", "run", "--config", sweeper.path()]).await;
    assert!(!ran.success && ran.stderr.lines().count() == 1, "{ran:?}");
    assert!(ran.stderr.starts_with("error: --prefix: invalid table prefix \"a-\""), "{}", ran.stderr);
    let ran = std::process::Command::new(env!("CARGO_BIN_EXE_relayer"))
        .args(["--database-url", "host=db port=x", "run", "--config", sweeper.path()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(stderr.starts_with("error: --database-url: not a valid connection string"), "{stderr}");

    // A malformed database_url is refused without connecting; a well-formed one is not
    // tried (this host does not exist).
    for (url, expected) in [
        ("postgres://db:port/app", "error: database_url: not a valid connection string"),
        ("host=db dbname", "error: database_url: not a valid connection string"),
        ("dbname=app", "error: database_url: names no host"),
    ] {
        let config = ConfigFile::new(&format!("database_url = \"{url}\"\n{SWEEPER}"));
        let ran = relayer(&db, &["config", "check", config.path()]).await;
        assert!(!ran.success && ran.stderr.lines().count() == 1, "{url}: {ran:?}");
        assert!(ran.stderr.starts_with(expected), "{url}: {}", ran.stderr);
    }
    let elsewhere = ConfigFile::new(&format!("database_url = \"postgres://nowhere.invalid/app\"\n{SWEEPER}"));
    assert!(relayer(&db, &["config", "check", elsewhere.path()]).await.ok().contains("ok — runs sweeper"));

    let ok = ConfigFile::new(SWEEPER);
    let checked = relayer(&db, &["config", "check", ok.path()]).await;
    assert!(checked.ok().contains("ok — runs sweeper"), "{checked:?}");
    let json = relayer(&db, &["config", "check", ok.path(), "--json"]).await.json();
    assert_eq!(json["sweeper"]["sweep_interval"], "100ms");
}

/// OPT-2: `RELAYER_*` variables are layered over the file (`__` between levels), are
/// refused like the file's values, and other tools' `RELAYER_*` variables pass.
#[tokio::test]
async fn environment_variables_override_the_file_and_are_checked_alike_opt_2() {
    let db = TestDb::new().await;
    let config = ConfigFile::new(SWEEPER);
    let check = |vars: &'static [(&'static str, &'static str)]| {
        let mut command = relayer_command(&db);
        command.args(["config", "check", config.path(), "--json"]);
        for (name, value) in vars {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, stdout, _) = check(&[("RELAYER_SWEEPER__SWEEP_INTERVAL", "2s"), ("RELAYER_TEST_THREADS", "4")]);
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["sweeper"]["sweep_interval"], "2s");
    let (ok, _, stderr) = check(&[("RELAYER_SWEEPER__BATCH_SIZE", "0")]);
    assert!(!ok);
    assert_eq!(
        stderr.trim_end(),
        "error: sweeper.batch_size: 0 is out of range (1..=10000) (from RELAYER_SWEEPER__*)"
    );
    let (ok, _, stderr) = check(&[("RELAYER_SWEEPR__BATCH_SIZE", "5")]);
    assert!(!ok);
    assert_eq!(stderr.trim_end(), "error: sweepr: unknown key (from RELAYER_SWEEPR__*)");
    // A top-level value is named by its own variable, not as a section.
    let (ok, _, stderr) = check(&[("RELAYER_POOL_SIZE", "many")]);
    assert!(!ok);
    assert!(stderr.contains("(from RELAYER_POOL_SIZE)") && stderr.lines().count() == 1, "{stderr}");
}

/// LIF-1, LDR-2: `run` stops cleanly on SIGTERM and releases its lease, so a second `run`
/// leads at once — well before the first lease (30 s) would have expired; `status` shows the
/// sidecar's lease and its worker's last pass meanwhile.
#[tokio::test]
async fn run_stops_on_sigterm_releases_its_lease_and_a_second_run_leads_at_once_lif_1() {
    let (db, client) = setup().await;
    let first = ConfigFile::new(&format!("instance_id = \"first\"\n[cleanup]\n{SWEEPER}"));
    let mut sidecar = Sidecar::start(&db, &first);
    eventually("the first sidecar leads the sweep", || async {
        lease_owner(&client, &db).await == Some(("first".to_owned(), true))
    })
    .await;
    let status = relayer(&db, &["status", "--json"]).await.json();
    let sweeper =
        status["workers"].as_array().unwrap().iter().find(|w| w["worker"] == "sweeper").unwrap().clone();
    assert_eq!((sweeper["source"].as_str(), sweeper["stalled"].as_bool()), (Some("lease"), Some(false)));
    assert_eq!(sweeper["interval_seconds"], 0.1);
    let owner = status["leases"][1]["owner"].as_str().unwrap_or_default();
    assert!(owner.starts_with("first#"), "{}", status["leases"]);

    let (success, stderr) = sidecar.terminate().await;
    assert!(success, "{stderr}");
    assert!(stderr.contains("SIGTERM: stopping") && stderr.contains("stopped"), "{stderr}");
    // The start line names the database and how its connections are secured (`(TLS if the
    // server offers it (not verified), else plaintext)` for a URL without sslmode).
    let user = db.config().get_user().unwrap().to_owned();
    let start = stderr.lines().find(|line| line.starts_with("relayer run: starting")).unwrap();
    assert!(start.contains(" at host=") && start.contains(&format!("user={user} (")), "{start}");
    assert!(start.contains("plaintext") || start.contains("(TLS, "), "{start}");
    assert_eq!(lease_owner(&client, &db).await, Some(("first".to_owned(), false)), "released at shutdown");
    let instances = format!("SELECT count(*) FROM {}", db.namespace().table("instances"));
    assert_eq!(client.query_one(&instances, &[]).await.unwrap().get::<_, i64>(0), 0);

    let leases = db.namespace().table("leases");
    let released_at: std::time::SystemTime = client
        .query_one(&format!("SELECT renewed_at FROM {leases} WHERE job = 'sweeper'"), &[])
        .await
        .unwrap()
        .get(0);
    let second = ConfigFile::new(&format!("instance_id = \"second\"\n{SWEEPER}"));
    let mut second_sidecar = Sidecar::start(&db, &second);
    eventually("the second sidecar leads the sweep", || async {
        lease_owner(&client, &db).await == Some(("second".to_owned(), true))
    })
    .await;
    let at_once: bool = client
        .query_one(
            &format!("SELECT acquired_at < $1::timestamptz + interval '30 seconds' FROM {leases} WHERE job = 'sweeper'"),
            &[&released_at],
        )
        .await
        .unwrap()
        .get(0);
    assert!(at_once, "the second sidecar waited out the first one's lease");
    assert!(second_sidecar.terminate().await.0);
}

/// LIF-1: SIGTERM while `run` is starting — held in its start-up by a lock on the instances
/// table, where it records its settings (OPT-4) — still stops it cleanly once start-up can
/// finish: it says the signal came during start-up, exits 0, holds no live lease, and a
/// second `run` leads at once.
#[tokio::test]
async fn run_stops_cleanly_on_a_sigterm_during_start_up_lif_1() {
    let (db, mut client) = setup().await;
    let holder = client.transaction().await.unwrap();
    let instances = db.namespace().table("instances");
    holder.batch_execute(&format!("LOCK TABLE {instances} IN ACCESS EXCLUSIVE MODE")).await.unwrap();
    let first = ConfigFile::new(&format!("instance_id = \"early\"\n{SWEEPER}"));
    let mut sidecar = Sidecar::start(&db, &first);
    sidecar.wait_for_stderr("relayer run: starting").await;
    // However late the signal lands, start-up cannot finish while the lock is held.
    sidecar.signal_term();
    sidecar.wait_for_stderr("during start-up").await;
    holder.commit().await.unwrap();
    let (success, stderr) = sidecar.wait().await;
    assert!(success, "{stderr}");
    assert!(stderr.contains("SIGTERM during start-up"), "{stderr}");
    assert!(stderr.trim_end().ends_with("relayer run: stopped"), "{stderr}");
    let held = lease_owner(&client, &db).await.is_some_and(|(_, live)| live);
    assert!(!held, "the lease was released (or never taken): {:?}", lease_owner(&client, &db).await);

    let second = ConfigFile::new(&format!("instance_id = \"second\"\n{SWEEPER}"));
    let mut second_sidecar = Sidecar::start(&db, &second);
    eventually("the second sidecar leads the sweep", || async {
        lease_owner(&client, &db).await == Some(("second".to_owned(), true))
    })
    .await;
    assert!(second_sidecar.terminate().await.0);
}

/// LIF-1: a second SIGTERM while `run` waits for its shutdown — held there by a lock on
/// the instances table, where it forgets its settings — ends it at once, saying so, with
/// the status of a process killed by SIGTERM (128 + 15), not 0.
#[tokio::test]
async fn a_second_sigterm_during_shutdown_exits_at_once_non_zero_lif_1() {
    let (db, mut client) = setup().await;
    let config = ConfigFile::new(&format!("instance_id = \"stubborn\"\n{SWEEPER}"));
    let mut sidecar = Sidecar::start(&db, &config);
    sidecar.wait_for_stderr("as instance stubborn").await;
    let holder = client.transaction().await.unwrap();
    let instances = db.namespace().table("instances");
    holder.batch_execute(&format!("LOCK TABLE {instances} IN ACCESS EXCLUSIVE MODE")).await.unwrap();
    sidecar.signal_term();
    sidecar.wait_for_stderr("SIGTERM: stopping").await;
    sidecar.signal_term();
    let (status, stderr) = sidecar.wait_exit().await;
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM again: stopped at once"), "{stderr}");
    assert!(!stderr.contains("relayer run: stopped\n"), "{stderr}");
    holder.rollback().await.unwrap();
}

/// LIF-1: after a SIGTERM during start-up (held there by a lock on the instances table, where
/// it records its settings), a second SIGTERM while the shutdown that follows start-up waits
/// (held by a locked row of the instance, which it deletes when it forgets its settings)
/// ends `run` at once with 128 + 15, as after a normal start.
#[tokio::test]
async fn a_second_sigterm_during_a_shutdown_begun_at_start_up_exits_at_once_non_zero_lif_1() {
    let (db, mut client) = setup().await;
    let instances = db.namespace().table("instances");
    // A row of the instance that start-up never writes but the shutdown deletes, locked.
    let mut row_holder = db.connect().await;
    row_holder
        .execute(
            &format!("INSERT INTO {instances} (worker, instance, fingerprint, settings) VALUES ('held', 'early', '', '{{}}')"),
            &[],
        )
        .await
        .unwrap();
    let row = row_holder.transaction().await.unwrap();
    row.execute(&format!("SELECT 1 FROM {instances} WHERE worker = 'held' FOR UPDATE"), &[]).await.unwrap();
    // Start-up's writes wait for this (SHARE does not conflict with the row lock).
    let holder = client.transaction().await.unwrap();
    holder.batch_execute(&format!("LOCK TABLE {instances} IN SHARE MODE")).await.unwrap();
    let config = ConfigFile::new(&format!("instance_id = \"early\"\n{SWEEPER}"));
    let mut sidecar = Sidecar::start(&db, &config);
    sidecar.wait_for_stderr("relayer run: starting").await;
    sidecar.signal_term();
    sidecar.wait_for_stderr("during start-up").await;
    holder.commit().await.unwrap();
    let observer = db.connect().await;
    eventually("the shutdown waits to forget the instance", || async {
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM%'";
        observer.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) >= 1
    })
    .await;
    sidecar.signal_term();
    let (status, stderr) = sidecar.wait_exit().await;
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM again: stopped at once"), "{stderr}");
    row.rollback().await.unwrap();
}

/// OBS-2: the sampled backlog of a destination is served while it has rows; once it
/// drained, its series is zeroed, then removed by the exporter's idle timeout (three
/// samples or three passes of the slowest worker), not left at its last value forever.
#[tokio::test]
async fn the_series_of_a_drained_destination_are_removed_obs_2() {
    let (db, client) = setup().await;
    let orders: Vec<NewMessage> =
        (0..3).map(|n| NewMessage::new("queue", "orders", format!("#{n}").into_bytes())).collect();
    write(&client, &db, &orders).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = ConfigFile::new(&format!(
        "[cleanup]\ncleanup_interval = \"100ms\"\nmax_backoff = \"200ms\"\nlease_duration = \"5s\"\n\
         [metrics]\nlisten = \"127.0.0.1:{port}\"\nsample_interval = \"100ms\"\n"
    ));
    let mut sidecar = Sidecar::start(&db, &config);
    let series = "relayer_backlog{transport=\"queue\",destination=\"orders\"}";
    eventually("the backlog of orders is served", || async {
        scrape(port).is_some_and(|body| body.lines().any(|line| line == format!("{series} 3")))
    })
    .await;
    // Delivered by a dispatcher of the test's own: the destination drains.
    let host = relayer::Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dispatcher(
            relayer::DispatcherOptions::builder()
                .poll_interval(std::time::Duration::from_millis(50))
                .build()
                .unwrap(),
        )
        .start()
        .await
        .unwrap();
    eventually("the series of the drained destination is removed", || async {
        scrape(port).is_some_and(|body| body.contains("relayer_outbox_pending") && !body.contains(series))
    })
    .await;
    host.shutdown().await;
    assert!(sidecar.terminate().await.0);
}

/// OBS-2: with `[metrics]`, the sidecar serves Prometheus text on a loopback port: the
/// sweeper's counters after it recovered a message, its pass durations, and the SQL gauges.
#[tokio::test]
async fn the_metrics_endpoint_serves_the_counters_after_a_pass_obs_2() {
    let (db, client) = setup().await;
    write(&client, &db, &[NewMessage::new("queue", "orders", b"recover me".to_vec())]).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = ConfigFile::new(&format!(
        "{SWEEPER}[cleanup]\n[metrics]\nlisten = \"127.0.0.1:{port}\"\nsample_interval = \"100ms\"\n"
    ));
    let mut sidecar = Sidecar::start(&db, &config);
    let recovered = |body: &str| {
        body.lines().any(|line| {
            line.starts_with("relayer_messages_total{")
                && line.contains("worker=\"sweeper\"")
                && line.contains("outcome=\"recovered\"")
                && line.ends_with(" 1")
        })
    };
    let mut body = String::new();
    eventually("the endpoint serves the recovered counter and the sampled gauges", || {
        let fetched = scrape(port);
        let done =
            fetched.as_deref().is_some_and(|body| recovered(body) && body.contains("relayer_outbox_pending"));
        body = fetched.unwrap_or_default();
        async move { done }
    })
    .await;
    for name in [
        "relayer_passes_total{",
        "outcome=\"cleaned\"",
        // A histogram with buckets, not a summary.
        "relayer_pass_duration_seconds_bucket{",
        "relayer_worker_seconds_since_last_success{",
        "relayer_outbox_pending",
        "relayer_xmin_horizon_age_xids",
    ] {
        assert!(body.contains(name), "{name} missing from:\n{body}");
    }
    let delivered = format!("SELECT count(*) FROM {} WHERE queue = 'orders'", db.namespace().table("queue"));
    assert_eq!(client.query_one(&delivered, &[]).await.unwrap().get::<_, i64>(0), 1);
    assert!(sidecar.terminate().await.0);
}

/// TRN-6: a sidecar registers only the queue transport. Rows another service wrote for its
/// own transport (`refusing` here) are never the sidecar's: its sweeper recovers the queue
/// row and leaves them pending — no attempt, nothing dead — and its gauges and `relayer
/// status` name them as waiting on a transport no live instance registers.
#[tokio::test]
async fn a_sidecar_leaves_rows_of_a_transport_it_lacks_pending_and_reports_them_trn_6() {
    let (db, client) = setup().await;
    write(&client, &db, &[NewMessage::new("queue", "orders", b"recover me".to_vec())]).await;
    let others: Vec<NewMessage> =
        (0..3).map(|n| NewMessage::new("refusing", "ledger", format!("entry-{n}").into_bytes())).collect();
    write(&client, &db, &others).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = ConfigFile::new(&format!(
        "{SWEEPER}[metrics]\nlisten = \"127.0.0.1:{port}\"\nsample_interval = \"100ms\"\n"
    ));
    let mut sidecar = Sidecar::start(&db, &config);
    let gauge = "relayer_unserved_rows{transport=\"refusing\"} 3";
    let mut body = String::new();
    eventually("the queue row is recovered and the waiting rows are gauged", || {
        let fetched = scrape(port);
        let done = fetched.as_deref().is_some_and(|body| {
            body.contains(gauge) && body.contains("relayer_unserved_oldest_seconds{transport=\"refusing\"}")
        });
        body = fetched.unwrap_or_default();
        let client = &client;
        let db = &db;
        async move {
            let delivered =
                format!("SELECT count(*) FROM {} WHERE queue = 'orders'", db.namespace().table("queue"));
            done && client.query_one(&delivered, &[]).await.unwrap().get::<_, i64>(0) == 1
        }
    })
    .await;
    assert!(body.contains(gauge), "{body}");
    let waiting = format!(
        "SELECT count(*) FROM {} WHERE transport = 'refusing' AND attempts = 0 AND last_error IS NULL",
        db.namespace().table("outbox")
    );
    assert_eq!(client.query_one(&waiting, &[]).await.unwrap().get::<_, i64>(0), 3, "untouched");
    let dead = format!("SELECT count(*) FROM {}", db.namespace().table("dead"));
    assert_eq!(client.query_one(&dead, &[]).await.unwrap().get::<_, i64>(0), 0);
    let status = relayer(&db, &["status"]).await;
    let text = status.ok();
    assert!(text.contains("waiting on a transport no live instance registers:"), "{text}");
    assert!(
        text.lines().any(|line| line.trim_start().starts_with("refusing") && line.contains(" 3 ")),
        "{text}"
    );
    let json = relayer(&db, &["status", "--json"]).await.json();
    let unserved = json["outbox"]["unserved"].as_array().unwrap();
    assert_eq!(unserved.len(), 1, "{unserved:?}");
    assert_eq!(
        (unserved[0]["transport"].as_str(), unserved[0]["pending"].as_i64()),
        (Some("refusing"), Some(3))
    );
    assert!(sidecar.terminate().await.0);
}

/// OBS-3: with `[console]`, `relayer run` serves the operator console beside its workers,
/// its chart fed by the sidecar's sampler; a second sidecar whose console port is taken does
/// not start, and says why.
#[tokio::test]
async fn run_serves_the_console_with_the_samplers_history_obs_3() {
    let (db, client) = setup().await;
    write(&client, &db, &[NewMessage::new("queue", "orders", b"recover me".to_vec())]).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = ConfigFile::new(&format!(
        "{SWEEPER}[metrics]\nlisten = \"127.0.0.1:{metrics}\"\nsample_interval = \"100ms\"\n\
         [console]\nlisten = \"127.0.0.1:{port}\"\n"
    ));
    let mut sidecar = Sidecar::start(&db, &config);
    sidecar.wait_for_stderr(&format!("console on http://127.0.0.1:{port}/")).await;
    let mut page = String::new();
    eventually("the overview charts the sampler's samples", || {
        page = get(port, "/").unwrap_or_default();
        let charted = page.contains("<h1>Overview</h1>") && !page.contains("data-samples=\"0\"");
        async move { charted }
    })
    .await;
    assert!(page.contains("id=\"mode\">read-only"), "{page}");
    assert!(get(port, "/lanes").unwrap_or_default().contains("No lane is parked."));

    let second = ConfigFile::new(&format!("{SWEEPER}[console]\nlisten = \"127.0.0.1:{port}\"\n"));
    let ran = relayer(&db, &["run", "--config", second.path()]).await;
    assert!(!ran.success);
    assert!(
        ran.stderr.contains(&format!("console.listen: cannot listen on 127.0.0.1:{port}")),
        "{}",
        ran.stderr
    );
    assert!(sidecar.terminate().await.0);
}

/// GET `path` over plain HTTP/1.1 (`None` while nothing listens yet).
fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

/// GET /metrics over plain HTTP/1.1 (`None` while nothing listens yet).
fn scrape(port: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

/// OPT-5: a refused connection is one line on standard error that names the address and
/// the reason once each, from `run` (a host that cannot start) and from a console command.
#[tokio::test]
async fn a_refused_connection_says_each_cause_once_opt_5() {
    let sweeper = ConfigFile::new(SWEEPER);
    // No ~/.postgresql/root.crt of the machine's user is read.
    let home = std::env::temp_dir().join(format!("relayer-home-{}", relayer::core::Uuid::new_v4()));
    std::fs::create_dir_all(&home).unwrap();
    for args in [&["run", "--config", sweeper.path()][..], &["status"][..]] {
        // Port 9 (discard) on loopback: nothing listens there on a test machine.
        let ran = std::process::Command::new(env!("CARGO_BIN_EXE_relayer"))
            .args(["--database-url", "postgres://app@127.0.0.1:9/orders"])
            .args(args)
            .env("HOME", &home)
            .env_remove("RELAYER_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert!(!ran.status.success(), "{args:?}: {stderr}");
        // `run` says first what it starts; the error is the last line, and the only one.
        let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().last(), Some(errors[0]), "{args:?}: {stderr}");
        // The error line names each once (`run`'s start line names the address too).
        for part in ["127.0.0.1", "refused"] {
            assert_eq!(errors[0].matches(part).count(), 1, "{args:?}: {part:?} not once in {stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&home);
}
