//! Making sure a local PostgreSQL answers, the way `.ci/run` does: `pg_isready` on
//! 127.0.0.1:5432, else start the installed Debian cluster with `pg_ctlcluster` and wait
//! up to 30 s.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started cluster has to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Returns once 127.0.0.1:5432 answers (or `DATABASE_URL` names another server).
pub(crate) fn ensure_local_server() -> Result<(), String> {
    if std::env::var_os("DATABASE_URL").is_some() {
        println!("postgres: DATABASE_URL is set; using it");
        return Ok(());
    }
    let Some(pg_isready) = find_program("pg_isready") else {
        return Err("PostgreSQL is not installed (no pg_isready); install it (apt-get install postgresql) \
                    or set DATABASE_URL"
            .to_owned());
    };
    let ready = || {
        Command::new(&pg_isready)
            .args(["-q", "-h", "127.0.0.1", "-p", "5432"])
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if ready() {
        println!("postgres: 127.0.0.1:5432 answers");
        return Ok(());
    }
    let Some((version, name)) = installed_cluster() else {
        return Err("nothing answers at 127.0.0.1:5432 and no PostgreSQL cluster is set up \
                    (pg_lsclusters lists none); start one, or set DATABASE_URL"
            .to_owned());
    };
    println!("postgres: starting cluster {version}/{name}");
    let status = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, &name, "start"])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run pg_ctlcluster: {e}"))?;
    if !status.success() {
        return Err(format!("pg_ctlcluster {version} {name} start exited with {status}"));
    }
    let started = Instant::now();
    while started.elapsed() < READY_TIMEOUT {
        if ready() {
            println!("postgres: ready after {:.1}s", started.elapsed().as_secs_f64());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(format!("cluster {version}/{name} did not answer within {}s", READY_TIMEOUT.as_secs()))
}

/// `program` on PATH, else the newest under `/usr/lib/postgresql/*/bin`.
fn find_program(program: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH")
        && let Some(found) = std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
    {
        return Some(found);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let candidate = entry.path().join("bin").join(program);
            let version = entry.file_name().to_string_lossy().parse().ok()?;
            candidate.is_file().then_some((version, candidate))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, path)| path)
}

/// The first cluster `pg_lsclusters` knows, preferring one on port 5432: (version, name).
fn installed_cluster() -> Option<(String, String)> {
    let output = Command::new("pg_lsclusters").arg("-h").stdin(Stdio::null()).output().ok()?;
    let listing = String::from_utf8_lossy(&output.stdout);
    let clusters: Vec<(String, String, String)> = listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((fields.next()?.to_owned(), fields.next()?.to_owned(), fields.next()?.to_owned()))
        })
        .collect();
    let chosen = clusters.iter().find(|(_, _, port)| port == "5432").or_else(|| clusters.first())?;
    Some((chosen.0.clone(), chosen.1.clone()))
}
