//! A throwaway PostgreSQL cluster: `initdb` into a temporary directory, `pg_ctl start` on a
//! free port of 127.0.0.1, `pg_ctl stop` and delete when dropped.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root the cluster runs as the
//! `postgres` user (else `nobody`), which owns the directory. The cluster is tuned for
//! tests (no fsync), never for data that matters. A cluster whose process was killed
//! before it could clean up is stopped and deleted by the next `Cluster::start`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Directory names start with this, then the owning process id.
const DIR_PREFIX: &str = "relayer-pg-";

/// Where distributions install the server binaries when they are not on `PATH`.
const BIN_GLOB_ROOTS: [&str; 2] = ["/usr/lib/postgresql", "/usr/local/pgsql"];

/// How many free ports are tried before giving up (another process may grab one).
const PORT_ATTEMPTS: usize = 3;

/// A running throwaway cluster; dropping it stops the server and deletes its files.
pub(crate) struct Cluster {
    /// The temporary directory: `data/` and `log` (and `tls/` for a TLS cluster).
    dir: PathBuf,
    bin: PathBuf,
    user: Option<RunAs>,
    port: u16,
    /// Whether the server offers TLS with the certificates of [`crate::certificates`].
    tls: bool,
}

/// The unprivileged user the server runs as when we are root.
#[derive(Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

impl Cluster {
    /// Creates and starts a cluster; the error says why it could not.
    pub(crate) async fn start() -> Result<Cluster, String> {
        Self::start_with(false).await
    }

    /// [`start`](Self::start), with `ssl = on` and a certificate made now when `tls`.
    pub(crate) async fn start_with(tls: bool) -> Result<Cluster, String> {
        // initdb and pg_ctl block for a second or two: keep them off the test's runtime.
        match tokio::task::spawn_blocking(move || Self::start_blocking(tls)).await {
            Ok(result) => result,
            Err(e) => Err(format!("the start task failed: {e}")),
        }
    }

    fn start_blocking(tls: bool) -> Result<Cluster, String> {
        let bin = find_bin_dir()
            .ok_or_else(|| "initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin".to_owned())?;
        let user = run_as()?;
        sweep_stale(&bin, user);

        let dir = std::env::temp_dir().join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut cluster = Cluster { dir, bin, user, port: 0, tls };
        // From here on, dropping `cluster` deletes the directory (and stops a started server).
        if let Some(user) = user {
            std::os::unix::fs::chown(&cluster.dir, Some(user.uid), Some(user.gid))
                .map_err(|e| format!("cannot chown {}: {e}", cluster.dir.display()))?;
        }

        let data = cluster.data_dir();
        let initdb = cluster
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            .output();
        check("initdb", initdb)?;
        if tls {
            crate::certificates::make(&cluster.tls_dir(), user.map(|u| (u.uid, u.gid)))?;
            crate::certificates::require_tls_for_tls_user(&data)?;
        }

        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            cluster.port = free_port()?;
            let options = cluster.server_options();
            let started = cluster
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(cluster.dir.join("log"))
                .args(["-w", "-t", "60", "-o", &options, "start"])
                .output();
            match check("pg_ctl start", started) {
                Ok(()) => return Ok(cluster),
                Err(e) => {
                    let log = std::fs::read_to_string(cluster.dir.join("log")).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(10).collect();
                    last_error = format!(
                        "{e}\nserver log:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    );
                    // A half-started server would keep the data directory busy.
                    cluster.stop();
                }
            }
        }
        Err(last_error)
    }

    /// The `postgres://` URL of the cluster's `postgres` database.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The cluster's temporary directory.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Where a TLS cluster keeps its certificates and keys.
    pub(crate) fn tls_dir(&self) -> PathBuf {
        self.dir.join("tls")
    }

    /// Whether the server offers TLS.
    pub(crate) fn has_tls(&self) -> bool {
        self.tls
    }

    /// The server's command-line settings: the same at every start of one cluster.
    fn server_options(&self) -> String {
        let mut options = server_options(self.port);
        if self.tls {
            let tls = self.tls_dir();
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={}",
                tls.join(crate::certificates::SERVER_CERT).display(),
                tls.join(crate::certificates::SERVER_KEY).display(),
                tls.join(crate::certificates::CA_CERT).display()
            ));
        }
        options
    }

    fn command(&self, program: &str) -> Command {
        command(&self.bin, program, self.user, &self.dir)
    }

    fn stop(&self) {
        if self.data_dir().join("postmaster.pid").exists() {
            // Best effort: a half-started or vanished server is what dropping cleans up.
            let _ = self.stop_immediately();
        }
    }
}

/// Stopping and starting again, for a test that owns its cluster ([`crate::OwnedCluster`]).
impl Cluster {
    /// `pg_ctl stop -m immediate`: every server process quits at once, without a checkpoint,
    /// as in a crash; the next start runs crash recovery.
    pub(crate) fn stop_immediately(&self) -> Result<(), String> {
        let stopped = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        check("pg_ctl stop -m immediate", stopped)
    }

    /// Starts the stopped server again on the same data directory, port and settings, and
    /// waits until it accepts connections (after crash recovery).
    pub(crate) fn start_again(&self) -> Result<(), String> {
        let started = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &self.server_options(), "start"])
            .output();
        check("pg_ctl start", started)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("relayer-test-support: cannot delete {}: {e}", self.dir.display());
        }
    }
}

/// The settings of every cluster, TLS or not. Two-phase commit is allowed (PostgreSQL's
/// default allows none) so a test can leave a prepared transaction behind (`relayer doctor`).
fn server_options(port: u16) -> String {
    format!(
        // TCP only: no Unix socket, whose path length would depend on TMPDIR.
        "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
         -c max_prepared_transactions=10"
    )
}

/// A command for one of the server binaries, run as `user` when given, in `cwd` (the
/// unprivileged user may not be able to read the test's working directory).
fn command(bin: &Path, program: &str, user: Option<RunAs>, cwd: &Path) -> Command {
    let mut command = Command::new(bin.join(program));
    command.current_dir(cwd).env("LC_ALL", "C").stdin(std::process::Stdio::null());
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
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
/// under the distribution directories.
fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|dir| has_both(dir))
    {
        return Some(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = Vec::new();
    for root in BIN_GLOB_ROOTS {
        let Ok(entries) = std::fs::read_dir(root) else { continue };
        for entry in entries.flatten() {
            let bin = entry.path().join("bin");
            if has_both(&bin) {
                let version = entry.file_name().to_string_lossy().parse().unwrap_or(0);
                found.push((version, bin));
            }
        }
        let bin = Path::new(root).join("bin");
        if has_both(&bin) {
            found.push((0, bin));
        }
    }
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// `None` when we are not root; else the user the server must run as.
fn run_as() -> Result<Option<RunAs>, String> {
    if effective_uid() != Some(0) {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for name in ["postgres", "nobody"] {
        let user = passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [n, _, uid, gid, ..] if *n == name => {
                    Some(RunAs { uid: uid.parse().ok()?, gid: gid.parse().ok()? })
                }
                _ => None,
            }
        });
        if let Some(user) = user {
            return Ok(Some(user));
        }
    }
    Err("running as root, and there is neither a `postgres` nor a `nobody` user to run the server".to_owned())
}

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok();
    // "Uid:\treal\teffective\tsaved\tfs"
    let from_proc = status.as_deref().and_then(|status| {
        let line = status.lines().find(|line| line.starts_with("Uid:"))?;
        line.split_whitespace().nth(2)?.parse().ok()
    });
    from_proc.or_else(|| {
        let output = Command::new("id").arg("-u").output().ok()?;
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    })
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("no free port: {e}"))?;
    listener.local_addr().map(|addr| addr.port()).map_err(|e| format!("no free port: {e}"))
}

/// Stops and deletes clusters whose owning process is gone (it was killed before its
/// `Drop` could run).
fn sweep_stale(bin: &Path, user: Option<RunAs>) {
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
        // Another process may be sweeping the same directory: ignore errors.
        let _ = std::fs::remove_dir_all(&dir);
    }
}
