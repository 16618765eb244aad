//! A throwaway PostgreSQL cluster with PostgreSQL's default settings (autovacuum on, fsync
//! and synchronous commit on), for `bench xmin`: `initdb` into a temporary directory,
//! `pg_ctl start` on a free port of 127.0.0.1, `pg_ctl stop` and delete when dropped.
//!
//! The test fixture's cluster (relayer-test-support) is tuned for tests — no fsync, no
//! synchronous commit — and brings a container runtime client with it; a held horizon must
//! be measured on the settings a production server starts from, so the bench starts its own.
//! Only what a local cluster needs is set: the port, TCP on 127.0.0.1, no Unix socket.
//! A cluster whose bench process was killed is stopped and deleted by the next start.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::scratch::BenchResult;

/// Directory names start with this, then the owning process id.
const DIR_PREFIX: &str = "relayer-bench-pg-";

/// A running cluster; dropping it stops the server and deletes its files.
pub(crate) struct StockCluster {
    dir: PathBuf,
    bin: PathBuf,
    /// The unprivileged user (uid, gid) the server runs as when the bench runs as root.
    user: Option<(u32, u32)>,
    port: u16,
}

impl StockCluster {
    /// Creates and starts a cluster with `settings` (`name=value` each) on top of the
    /// defaults; the error says why it could not.
    pub(crate) async fn start(settings: Vec<String>) -> BenchResult<StockCluster> {
        Ok(tokio::task::spawn_blocking(move || Self::start_blocking(&settings)).await??)
    }

    fn start_blocking(settings: &[String]) -> Result<StockCluster, String> {
        let bin =
            find_bin_dir().ok_or("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")?;
        let user = run_as()?;
        sweep_stale(&bin, user);
        let dir = std::env::temp_dir().join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // From here on, dropping `cluster` deletes the directory (and stops a started server).
        let mut cluster = StockCluster { dir, bin, user, port: 0 };
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&cluster.dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot chown {}: {e}", cluster.dir.display()))?;
        }
        let data = cluster.dir.join("data");
        let initdb = cluster
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .output();
        check("initdb", initdb)?;
        cluster.port = free_port()?;
        let mut options =
            format!("-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''", cluster.port);
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        let started = cluster
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(cluster.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output();
        if let Err(e) = check("pg_ctl start", started) {
            let log = std::fs::read_to_string(cluster.dir.join("log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            return Err(format!(
                "{e}\nserver log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        Ok(cluster)
    }

    /// Connection settings for the cluster's `postgres` database.
    pub(crate) fn config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(self.port).user("postgres").dbname("postgres");
        config.application_name("relayer-bench");
        config
    }

    fn command(&self, program: &str) -> Command {
        command(&self.bin, program, self.user, &self.dir)
    }

    /// The server log's autovacuum reports (with `log_autovacuum_min_duration = 0`, one
    /// per vacuum or analyze, with its detail lines), and any line naming a lock wait.
    pub(crate) fn autovacuum_log(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let mut lines = Vec::new();
        let mut in_report = false;
        for line in log.lines() {
            if line.contains("automatic vacuum")
                || line.contains("automatic analyze")
                || line.contains("lock")
            {
                in_report = true;
                lines.push(line.to_owned());
            } else if in_report && line.starts_with('\t') {
                lines.push(line.to_owned());
            } else {
                in_report = false;
            }
        }
        lines
    }
}

impl Drop for StockCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        if data.join("postmaster.pid").exists()
            && let Err(e) = check(
                "pg_ctl stop",
                self.command("pg_ctl").arg("-D").arg(&data).args(["-m", "fast", "-w", "stop"]).output(),
            )
        {
            eprintln!("relayer-bench: cannot stop the throwaway cluster: {e}");
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("relayer-bench: cannot delete {}: {e}", self.dir.display());
        }
    }
}

/// A command for one of the server binaries, run as `user` when given, in `cwd` (the
/// unprivileged user may not be able to read the bench's working directory).
fn command(bin: &Path, program: &str, user: Option<(u32, u32)>, cwd: &Path) -> Command {
    let mut command = Command::new(bin.join(program));
    command.current_dir(cwd).env("LC_ALL", "C").stdin(std::process::Stdio::null());
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

fn check(what: &str, output: std::io::Result<Output>) -> Result<(), String> {
    match output {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!(
            "{what} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {what}: {e}")),
    }
}

/// The directory holding `initdb` and `pg_ctl`: `PATH` first, else the newest version
/// under /usr/lib/postgresql.
fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|dir| has_both(dir))
    {
        return Some(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| (entry.file_name().to_string_lossy().parse().unwrap_or(0), entry.path().join("bin")))
        .filter(|(_, bin)| has_both(bin))
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// `None` when we are not root; else the user the server must run as (PostgreSQL refuses
/// to run as root).
fn run_as() -> Result<Option<(u32, u32)>, String> {
    // /proc/self belongs to the process's effective user.
    let uid = std::fs::metadata("/proc/self").map(|meta| std::os::unix::fs::MetadataExt::uid(&meta));
    if uid.map_err(|e| format!("cannot read /proc/self: {e}"))? != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for name in ["postgres", "nobody"] {
        let user = passwd.lines().find_map(|line| match line.split(':').collect::<Vec<_>>().as_slice() {
            [n, _, uid, gid, ..] if *n == name => Some((uid.parse().ok()?, gid.parse().ok()?)),
            _ => None,
        });
        if user.is_some() {
            return Ok(user);
        }
    }
    Err("running as root, and there is neither a `postgres` nor a `nobody` user to run the server".to_owned())
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("no free port: {e}"))?;
    listener.local_addr().map(|addr| addr.port()).map_err(|e| format!("no free port: {e}"))
}

/// Stops and deletes clusters whose bench process is gone (killed before its `Drop` ran).
fn sweep_stale(bin: &Path, user: Option<(u32, u32)>) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(DIR_PREFIX).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if pid.is_empty() || Path::new("/proc").join(pid).exists() {
            continue;
        }
        let dir = entry.path();
        let data = dir.join("data");
        if data.join("postmaster.pid").exists() {
            let _ = command(bin, "pg_ctl", user, &dir)
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
