//! CPU time spent over a timed window, from `/proc/<pid>/stat` (utime + stime):
//!
//! - [`PgCpu`]: PostgreSQL's — the backends serving this benchmark process (found through
//!   `pg_stat_activity` by the process's own `application_name`, sampled while the window
//!   runs so a backend that starts mid-window counts too), and apart from them the server's
//!   WAL writer, background writer and checkpointer (server-wide: on a shared server they
//!   also work for other sessions);
//! - [`ProcessCpu`]: one process's, such as nats-server's or this benchmark's own.
//!
//! The server must run on this machine (the benchmarks' default, loopback); on another
//! host the backends' `/proc` entries are not here and the figures come out as zero.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;

use crate::scratch::{BenchResult, connect};

/// CPU seconds (user + system) a process has used so far; `None` once it is gone.
pub(crate) fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after it.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state (field 3) first, so utime (14) and stime (15) are 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    #[allow(clippy::cast_precision_loss)] // ticks far below 2^52
    let seconds = (utime + stime) as f64 / clock_ticks();
    Some(seconds)
}

fn clock_ticks() -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    ticks.max(1.0)
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Processes whose command line starts with `prefix` and ends (trailing padding aside) with
/// `suffix`, children of `parent_pid`. PostgreSQL titles its processes
/// `postgres: [cluster name: ]walwriter`, padded with spaces.
fn processes(prefix: &str, suffix: &str, parent_pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent(*pid) == Some(parent_pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let cmdline = String::from_utf8_lossy(&cmdline);
                let cmdline = cmdline.trim_end_matches(['\0', ' ']);
                cmdline.starts_with(prefix) && cmdline.ends_with(suffix)
            })
        })
        .collect()
}

/// Processes named `name` (`/proc/<pid>/comm`).
fn named(name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect()
}

/// One process's CPU over a window, or of several processes together.
pub(crate) struct ProcessCpu {
    start: Vec<(u32, f64)>,
}

impl ProcessCpu {
    /// Starts the window for `pids`.
    pub(crate) fn start(pids: &[u32]) -> Self {
        ProcessCpu { start: pids.iter().map(|&pid| (pid, process_cpu_seconds(pid).unwrap_or(0.0))).collect() }
    }

    /// This benchmark process.
    pub(crate) fn this_process() -> Self {
        Self::start(&[std::process::id()])
    }

    /// nats-server, found by its process name; `None` when it does not run on this machine.
    pub(crate) fn nats_server() -> Option<Self> {
        let pids = named("nats-server");
        (!pids.is_empty()).then(|| Self::start(&pids))
    }

    /// CPU seconds since [`ProcessCpu::start`].
    pub(crate) fn seconds(&self) -> f64 {
        self.start.iter().map(|&(pid, at)| (process_cpu_seconds(pid).unwrap_or(at) - at).max(0.0)).sum()
    }
}

/// PostgreSQL's CPU over a timed window: see the module docs.
pub(crate) struct PgCpu {
    samples: Arc<Mutex<Samples>>,
    stop: Arc<AtomicBool>,
    sampler: tokio::task::JoinHandle<BenchResult<()>>,
}

#[derive(Default)]
struct Samples {
    /// Per backend: its CPU at the window's start (0 for one that started later) and at
    /// the latest sample.
    backends: HashMap<u32, (f64, f64)>,
    /// The WAL writer, background writer and checkpointer: start and latest.
    background: Vec<(u32, f64, f64)>,
}

/// What [`PgCpu::stop`] measured, in CPU seconds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PgCpuUsed {
    /// This process's backends.
    pub(crate) backends: f64,
    /// WAL writer + background writer + checkpointer (server-wide).
    pub(crate) background: f64,
}

impl PgCpuUsed {
    /// Microseconds of backend CPU per message.
    pub(crate) fn backend_us_per(&self, messages: usize) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let messages = messages.max(1) as f64;
        self.backends * 1e6 / messages
    }

    /// Microseconds of background-process CPU per message.
    pub(crate) fn background_us_per(&self, messages: usize) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let messages = messages.max(1) as f64;
        self.background * 1e6 / messages
    }
}

/// How often the backends are listed while a window runs: a backend that lives shorter
/// than this between two samples is missed (every benchmark's connections outlive it).
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

impl PgCpu {
    /// Starts a window: the backends of this process's `application_name` (of `config`)
    /// as they are now, then sampled every [`SAMPLE_EVERY`] until [`PgCpu::stop`].
    pub(crate) async fn start(config: &tokio_postgres::Config) -> BenchResult<Self> {
        let client = connect(config).await?;
        let own: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        let own = u32::try_from(own)?;
        let postmaster = parent(own).ok_or("the PostgreSQL server does not run on this machine")?;
        let background: Vec<(u32, f64, f64)> = [": walwriter", ": background writer", ": checkpointer"]
            .iter()
            .flat_map(|suffix| processes("postgres: ", suffix, postmaster))
            .map(|pid| {
                let at = process_cpu_seconds(pid).unwrap_or(0.0);
                (pid, at, at)
            })
            .collect();
        let application = config.get_application_name().unwrap_or("relayer-bench").to_owned();
        let samples = Arc::new(Mutex::new(Samples { background, ..Samples::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let first = Self::sample(&client, own, &application, &samples, true).await;
        first?;
        let sampler = tokio::spawn({
            let (samples, stop) = (Arc::clone(&samples), Arc::clone(&stop));
            async move {
                loop {
                    tokio::time::sleep(SAMPLE_EVERY).await;
                    let last = stop.load(Ordering::Acquire);
                    Self::sample(&client, own, &application, &samples, false).await?;
                    if last {
                        return Ok(());
                    }
                }
            }
        });
        Ok(PgCpu { samples, stop, sampler })
    }

    async fn sample(
        client: &tokio_postgres::Client,
        own: u32,
        application: &str,
        samples: &Mutex<Samples>,
        first: bool,
    ) -> BenchResult<()> {
        let pids: Vec<u32> = client
            .query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", &[&application])
            .await?
            .iter()
            .filter_map(|row| u32::try_from(row.get::<_, i32>(0)).ok())
            .filter(|pid| *pid != own)
            .collect();
        let mut samples = samples.lock().await;
        for pid in pids {
            if let Some(now) = process_cpu_seconds(pid) {
                let entry = samples.backends.entry(pid).or_insert((if first { now } else { 0.0 }, now));
                entry.1 = now;
            }
        }
        for (pid, _, latest) in &mut samples.background {
            if let Some(now) = process_cpu_seconds(*pid) {
                *latest = now;
            }
        }
        Ok(())
    }

    /// Ends the window (after one last sample) and returns what was used in it.
    pub(crate) async fn stop(self) -> BenchResult<PgCpuUsed> {
        // Backends still alive now: read them at the window's end exactly.
        {
            let mut samples = self.samples.lock().await;
            for (pid, (_, latest)) in &mut samples.backends {
                if let Some(now) = process_cpu_seconds(*pid) {
                    *latest = now;
                }
            }
            for (pid, _, latest) in &mut samples.background {
                if let Some(now) = process_cpu_seconds(*pid) {
                    *latest = now;
                }
            }
        }
        let ended = {
            let samples = self.samples.lock().await;
            PgCpuUsed {
                backends: samples.backends.values().map(|(start, end)| (end - start).max(0.0)).sum(),
                background: samples.background.iter().map(|(_, start, end)| (end - start).max(0.0)).sum(),
            }
        };
        self.stop.store(true, Ordering::Release);
        self.sampler.await??;
        Ok(ended)
    }
}
