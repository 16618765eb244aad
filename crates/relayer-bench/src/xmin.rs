//! `cargo xtask bench xmin [--quick]`: a held horizon — a session idle in a transaction
//! with its snapshot open — against a steady load, and the recovery after it ends.
//!
//! Each pass runs one path at a steady offered load (800 messages/s by default, written by
//! one paced writer in a batch each 25 ms tick, each message stamped with the wall-clock
//! microsecond it was written) into a [`Consumer`] of concurrency 32 whose handler takes
//! 1 ms:
//!
//! - **direct**: [`QueueWriter`] straight into the queue table → consumer;
//! - **outbox**: [`OutboxWriter`] in a transaction → a NOTIFY-woken [`Dispatcher`] with the
//!   PostgreSQL queue transport → consumer.
//!
//! Phases: clean (60 s; `--quick` 15 s), then a separate session holds a snapshot
//! (`BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM <queue table>`, then idle) for
//! 60 s (`--quick` 20 s), then recovery until backlog, latency and dead tuples are back to
//! their clean-phase levels, at most 90 s (`--quick` 75 s). Every second it samples the
//! messages handled, the pickup latency (write to handler start) of each, the backlog
//! (written − acknowledged) and `pg_stat_user_tables` of the queue and outbox tables; it
//! prints a line each 5 s, a table per phase, and the seconds after the release until each
//! returned to its baseline.
//!
//! Both paths run on a throwaway cluster with PostgreSQL's default settings (autovacuum on;
//! [`StockCluster`]; only logging added: every autovacuum and lock wait over a second,
//! printed at the end), then on the shared server (`DATABASE_URL`, else the local test server;
//! it runs with autovacuum off) as the worst case. The last line,
//! `RESULT xmin_throughput_ratio=<held handled/s ÷ clean handled/s> xmin_p99_ms=<pickup p99
//! while held> xmin_recovery_s=<seconds after the release until the backlog is drained at
//! the offered load>`, is the worse of the two paths on the throwaway cluster. A recovery
//! that did not happen within the cap is reported as the cap, and said so above it.
//!
//! Knobs for a shorter or different run: `RELAYER_BENCH_XMIN_RATE` (messages/s),
//! `RELAYER_BENCH_XMIN_SERVERS` (`cluster,shared`), `RELAYER_BENCH_XMIN_PATHS`
//! (`direct,outbox`); and to measure a configuration before shipping or recommending it,
//! `RELAYER_BENCH_XMIN_CLUSTER_SETTINGS` (`name=value,…`: server settings of the throwaway
//! cluster, e.g. `autovacuum_naptime=10s`) and `RELAYER_BENCH_XMIN_TABLE_SETTINGS`
//! (`name=value,…`: storage parameters set on the queue and outbox tables of each pass,
//! e.g. `autovacuum_vacuum_scale_factor=0,autovacuum_vacuum_threshold=1000`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relayer_consumer::{Consumer, Handler, Outcome, Subscription};
use relayer_core::{ConsumerOptions, DispatcherOptions, NewMessage, TransportRegistry};
use relayer_dispatcher::Dispatcher;
use relayer_postgres::{
    OutboxWriter, PgNotifications, PgSource, QueueMessage, QueueWriter, asynchronous_commit, connect_pool,
};
use relayer_queue::PgQueueTransport;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::scratch::{BenchResult, Scratch, body, connect, database_config, percentile};
use crate::stock_cluster::StockCluster;

const QUEUE: &str = "xmin";
const CONCURRENCY: u32 = 32;
const HANDLER_TIME: Duration = Duration::from_millis(1);
const TICK: Duration = Duration::from_millis(25);
/// The most one tick writes, as the reference run (a writer that fell behind
/// catches up over several ticks).
const MAX_BATCH: u64 = 128;
const WRITTEN_HEADER: &str = "x-bench-written-us";
/// Seconds per printed line.
const REPORT_EVERY: usize = 5;
/// Seconds a recovered measure must stay recovered to count.
const STABLE: usize = 5;
const DEFAULT_RATE: f64 = 800.0;

/// The settings printed for each server.
const SETTINGS: &[&str] = &[
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "vacuum_cost_limit",
    "synchronous_commit",
    "fsync",
    "shared_buffers",
    "idle_in_transaction_session_timeout",
    "old_snapshot_threshold",
    "log_autovacuum_min_duration",
    "log_lock_waits",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Direct,
    Outbox,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Outbox => "outbox",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Clean,
    Held,
    Recovery,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Clean => "clean",
            Phase::Held => "held",
            Phase::Recovery => "recovery",
        }
    }
}

struct Plan {
    clean: usize,
    held: usize,
    recovery_cap: usize,
    rate: f64,
}

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let rate =
        match std::env::var("RELAYER_BENCH_XMIN_RATE") {
            Ok(value) => value.parse::<f64>().ok().filter(|rate| *rate >= 1.0).ok_or_else(|| {
                format!("RELAYER_BENCH_XMIN_RATE={value:?}: expected messages per second, ≥ 1")
            })?,
            Err(_) => DEFAULT_RATE,
        };
    let plan = if quick {
        Plan { clean: 15, held: 20, recovery_cap: 75, rate }
    } else {
        Plan { clean: 60, held: 60, recovery_cap: 90, rate }
    };
    let servers = list_env("RELAYER_BENCH_XMIN_SERVERS", &["cluster", "shared"])?;
    settings_env("RELAYER_BENCH_XMIN_TABLE_SETTINGS")?; // refused before anything starts
    let paths: Vec<Path> = list_env("RELAYER_BENCH_XMIN_PATHS", &["direct", "outbox"])?
        .iter()
        .map(|name| if name == "direct" { Path::Direct } else { Path::Outbox })
        .collect();
    println!(
        "xmin benchmark: {:.0} msg/s offered (a batch each {} ms), handler {} ms, concurrency {CONCURRENCY}; \
         clean {} s, snapshot held {} s, recovery at most {} s",
        plan.rate,
        TICK.as_millis(),
        HANDLER_TIME.as_millis(),
        plan.clean,
        plan.held,
        plan.recovery_cap
    );
    let mut cluster_results = Vec::new();
    if servers.iter().any(|s| s == "cluster") {
        // Logging only, so the run can say what autovacuum did and whether anything waited.
        let mut settings = vec!["log_autovacuum_min_duration=0".to_owned(), "log_lock_waits=on".to_owned()];
        settings.extend(settings_env("RELAYER_BENCH_XMIN_CLUSTER_SETTINGS")?);
        let cluster = StockCluster::start(settings).await?;
        let outcome =
            run_server(&cluster.config(), "throwaway cluster, PostgreSQL's default settings", &plan, &paths)
                .await;
        let report = cluster.autovacuum_log();
        if !report.is_empty() {
            println!("\n  the throwaway cluster's log, autovacuum reports and lock waits:");
            for line in report {
                println!("    {line}");
            }
        }
        drop(cluster); // stopped and deleted before anything else runs, error or not
        cluster_results = outcome?;
    }
    let mut shared_results = Vec::new();
    if servers.iter().any(|s| s == "shared") {
        shared_results =
            run_server(&database_config()?, "shared server (its own settings)", &plan, &paths).await?;
    }
    println!("\n=== summary (load average now: {})", loadavg());
    for (server, results) in [("throwaway cluster", &cluster_results), ("shared server", &shared_results)] {
        for result in results.iter() {
            println!(
                "  {server:<17} {:<6}  clean {:>5.0}/s  held {:>5.0}/s (ratio {:.2}, p99 {:>8.1} ms)  recovery {}",
                result.path.name(),
                result.clean_rate,
                result.held_rate,
                result.ratio(),
                result.held_p99_ms,
                seconds_or_never(result.recovered_s, plan.recovery_cap)
            );
        }
    }
    let (results, server) = if cluster_results.is_empty() {
        (&shared_results, "shared server")
    } else {
        (&cluster_results, "throwaway cluster")
    };
    let ratio = results.iter().map(PassResult::ratio).fold(f64::INFINITY, f64::min);
    let p99 = results.iter().map(|r| r.held_p99_ms).fold(0.0, f64::max);
    let never = results.iter().any(|r| r.recovered_s.is_none());
    #[allow(clippy::cast_precision_loss)]
    let recovery =
        results.iter().map(|r| r.recovered_s.unwrap_or(plan.recovery_cap as f64)).fold(0.0, f64::max);
    if never {
        println!("  (a path did not recover within {} s: xmin_recovery_s is that cap)", plan.recovery_cap);
    }
    println!("  RESULT from the {server}, the worse of the paths");
    println!("RESULT xmin_throughput_ratio={ratio:.2} xmin_p99_ms={p99:.0} xmin_recovery_s={recovery:.0}");
    Ok(())
}

/// A comma-separated list from `var`, each item one of `allowed`; all of them when unset.
fn list_env(var: &str, allowed: &[&str]) -> BenchResult<Vec<String>> {
    let Ok(value) = std::env::var(var) else {
        return Ok(allowed.iter().map(|s| (*s).to_owned()).collect());
    };
    let items: Vec<String> =
        value.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
    match items.iter().find(|item| !allowed.contains(&item.as_str())) {
        Some(bad) => Err(format!("{var}: `{bad}` is not one of {}", allowed.join(", ")).into()),
        None if items.is_empty() => {
            Err(format!("{var} is empty; expected some of {}", allowed.join(", ")).into())
        }
        None => Ok(items),
    }
}

/// `name=value` items from `var` (comma-separated), each a plain identifier and a plain
/// value, so they can be spliced into a command line or a storage-parameter list.
fn settings_env(var: &str) -> BenchResult<Vec<String>> {
    match std::env::var(var) {
        Ok(value) => parse_settings(var, &value),
        Err(_) => Ok(Vec::new()),
    }
}

fn parse_settings(var: &str, value: &str) -> BenchResult<Vec<String>> {
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once('=') {
            Some((name, value)) if plain(name) && plain(value) => Ok(item.to_owned()),
            _ => Err(format!("{var}: `{item}` is not name=value (letters, digits, _ . - only)").into()),
        })
        .collect()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn seconds_or_never(seconds: Option<f64>, cap: usize) -> String {
    match seconds {
        Some(s) => format!("{s:.0} s"),
        None => format!("not within {cap} s"),
    }
}

async fn run_server(
    config: &tokio_postgres::Config,
    label: &str,
    plan: &Plan,
    paths: &[Path],
) -> BenchResult<Vec<PassResult>> {
    let client = connect(config).await?;
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    println!("\n##### {label}: PostgreSQL {version}");
    let rows = client
        .query(
            "SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings WHERE name = ANY($1) ORDER BY name",
            &[&SETTINGS],
        )
        .await?;
    let settings: Vec<String> =
        rows.iter().map(|row| format!("{}={}", row.get::<_, String>(0), row.get::<_, String>(1))).collect();
    println!("  settings: {}", settings.join(", "));
    let mut results = Vec::new();
    for path in paths {
        results.push(pass(config, *path, plan).await?);
    }
    Ok(results)
}

/// The figures of one pass.
struct PassResult {
    path: Path,
    clean_rate: f64,
    held_rate: f64,
    held_p99_ms: f64,
    /// Seconds after the release until the backlog was drained at the offered load.
    recovered_s: Option<f64>,
}

impl PassResult {
    fn ratio(&self) -> f64 {
        self.held_rate / self.clean_rate
    }
}

/// One pass in a scratch schema of its own, dropped whatever happens (the pass's own error
/// is the one returned).
async fn pass(config: &tokio_postgres::Config, path: Path, plan: &Plan) -> BenchResult<PassResult> {
    let scratch = Scratch::on(config.clone()).await?;
    let outcome = match settings_env("RELAYER_BENCH_XMIN_TABLE_SETTINGS") {
        Ok(table_settings) => pass_in(&scratch, path, plan, &table_settings).await,
        Err(e) => Err(e),
    };
    let dropped = scratch.drop_schema().await;
    match (outcome, dropped) {
        (Ok(result), Ok(())) => Ok(result),
        (Ok(_), Err(e)) => Err(e),
        (Err(e), dropped) => {
            if let Err(drop_error) = dropped {
                eprintln!(
                    "relayer-bench: also, cannot drop {}: {}",
                    scratch.namespace.quoted_schema(),
                    relayer_core::error_chain(drop_error.as_ref())
                );
            }
            Err(e)
        }
    }
}

/// The handler: records each message's pickup latency, then takes [`HANDLER_TIME`].
struct Timed {
    latencies_ms: Arc<Mutex<Vec<f64>>>,
}

#[relayer_core::async_trait]
impl Handler for Timed {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        let now = now_us();
        if let Some(written) = message.headers.get(WRITTEN_HEADER).and_then(|v| v.parse::<u64>().ok()) {
            #[allow(clippy::cast_precision_loss)]
            let latency = now.saturating_sub(written) as f64 / 1e3;
            self.latencies_ms.lock().unwrap_or_else(PoisonError::into_inner).push(latency);
        }
        tokio::time::sleep(HANDLER_TIME).await;
        Outcome::Ack
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// One table's row counts from `pg_stat_user_tables`.
#[derive(Clone, Copy, Default)]
struct TableStat {
    live: i64,
    dead: i64,
    autovacuums: i64,
}

/// One second of a pass.
struct Sample {
    phase: Phase,
    handled: u64,
    latencies_ms: Vec<f64>,
    backlog: u64,
    queue: TableStat,
    outbox: TableStat,
    /// The receive index's cumulative (scans, entries read, buffers touched — by inserts
    /// too, so buffers per scan is an upper bound).
    receive_index: (i64, i64, i64),
}

/// A session idle in a transaction whose snapshot is open: vacuum keeps every row version
/// it might see. Dropping it closes the connection, which ends the transaction.
struct HeldSnapshot {
    client: tokio_postgres::Client,
}

impl HeldSnapshot {
    async fn open(scratch: &Scratch) -> BenchResult<HeldSnapshot> {
        let client = connect(&scratch.config).await?;
        client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await?;
        client.query(&format!("SELECT 1 FROM {} LIMIT 1", scratch.namespace.table("queue")), &[]).await?;
        let xmin: Option<String> = client
            .query_one("SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()", &[])
            .await?
            .get(0);
        println!("  snapshot held: backend_xmin {}", xmin.as_deref().unwrap_or("(none)"));
        Ok(HeldSnapshot { client })
    }

    async fn release(self) -> BenchResult<()> {
        self.client.batch_execute("ROLLBACK").await?;
        Ok(())
    }
}

async fn pass_in(
    scratch: &Scratch,
    path: Path,
    plan: &Plan,
    table_settings: &[String],
) -> BenchResult<PassResult> {
    println!("\n=== {} path, schema {}, load average {}", path.name(), scratch.namespace.schema(), loadavg());
    let namespace = &scratch.namespace;
    let config = &scratch.config;
    let monitor = connect(config).await?;
    if !table_settings.is_empty() {
        for table in ["queue", "outbox"] {
            let alter = format!("ALTER TABLE {} SET ({})", namespace.table(table), table_settings.join(", "));
            monitor.batch_execute(&alter).await?;
        }
        println!("  queue and outbox tables set ({})", table_settings.join(", "));
    }
    let storage: Vec<String> = monitor
        .query(
            "SELECT c.relname::text || ': ' || coalesce(array_to_string(c.reloptions, ', '), 'no storage parameters') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = ANY($2) ORDER BY 1",
            &[&namespace.schema(), &vec![format!("{}queue", namespace.prefix()), format!("{}outbox", namespace.prefix())]],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    println!("  {}", storage.join("; "));
    let shutdown = CancellationToken::new();
    // Whatever ends this pass, the workers stop with it (before the schema is dropped).
    let _stop = shutdown.clone().drop_guard();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let options = ConsumerOptions::builder().concurrency(CONCURRENCY).build()?;
    let consumer = Consumer::new(
        PgNotifications::queue(config.clone(), namespace),
        PgSource::new(connect_pool(config.clone(), 4).await?, namespace),
        namespace.clone(),
        Subscription::new(QUEUE, options)?,
        Arc::new(Timed { latencies_ms: Arc::clone(&latencies) }),
    );
    let stats = consumer.stats();
    let mut workers: Vec<(&str, JoinHandle<BenchResult<()>>)> = Vec::new();
    let consumer_shutdown = shutdown.clone();
    workers.push((
        "consumer",
        tokio::spawn(async move { consumer.run(consumer_shutdown).await.map_err(Into::into) }),
    ));
    let outbox_writer = if path == Path::Outbox {
        let transport = PgQueueTransport::new(connect_pool(config.clone(), 4).await?, namespace);
        let registry = Arc::new(TransportRegistry::new().with(Arc::new(transport))?);
        let source = PgSource::new(connect_pool(asynchronous_commit(config.clone()), 4).await?, namespace)
            .with_transports(registry.names());
        let writer = OutboxWriter::for_registry(namespace, &registry);
        let dispatcher = Dispatcher::new(source, namespace.clone(), DispatcherOptions::default(), registry)?
            .listening(PgNotifications::outbox(config.clone(), namespace));
        let dispatcher_shutdown = shutdown.clone();
        workers.push((
            "dispatcher",
            tokio::spawn(async move { dispatcher.run(dispatcher_shutdown).await.map_err(Into::into) }),
        ));
        Some(writer)
    } else {
        None
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // let the workers LISTEN
    let written = Arc::new(AtomicU64::new(0));
    let writing = CancellationToken::new();
    let _stop_writing = writing.clone().drop_guard();
    let writer = tokio::spawn(write(
        config.clone(),
        QueueWriter::new(namespace, "queue"),
        outbox_writer,
        plan.rate,
        Arc::clone(&written),
        writing.clone(),
    ));

    let table_stats = monitor
        .prepare(
            "SELECT relname::text, n_live_tup, n_dead_tup, autovacuum_count \
             FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = ANY($2)",
        )
        .await?;
    let (queue_name, outbox_name) =
        (format!("{}queue", namespace.prefix()), format!("{}outbox", namespace.prefix()));
    let names = vec![queue_name.clone(), outbox_name.clone()];
    // Entries a receive's index scan reads: dead ones a held snapshot keeps are read too.
    let index_stats = monitor
        .prepare(
            "SELECT i.idx_scan, i.idx_tup_read, s.idx_blks_hit + s.idx_blks_read \
             FROM pg_stat_user_indexes i JOIN pg_statio_user_indexes s USING (indexrelid) \
             WHERE i.schemaname = $1 AND i.indexrelname = $2",
        )
        .await?;
    let receive_index = format!("{}queue_receive_idx", namespace.prefix());
    let mut samples: Vec<Sample> = Vec::new();
    let mut held: Option<HeldSnapshot> = None;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut last_acked = stats.snapshot().acked;
    let release_at = plan.clean + plan.held;
    loop {
        ticker.tick().await;
        for (name, worker) in &workers {
            if worker.is_finished() {
                return Err(format!("the {name} stopped before the pass ended").into());
            }
        }
        if writer.is_finished() {
            return Err("the writer stopped before the pass ended".into());
        }
        let second = samples.len() + 1;
        let phase = if second <= plan.clean {
            Phase::Clean
        } else if second <= release_at {
            Phase::Held
        } else {
            Phase::Recovery
        };
        let acked = stats.snapshot().acked;
        let mut sample = Sample {
            phase,
            handled: acked - last_acked,
            latencies_ms: std::mem::take(&mut *latencies.lock().unwrap_or_else(PoisonError::into_inner)),
            backlog: written.load(Ordering::Relaxed).saturating_sub(acked),
            queue: TableStat::default(),
            outbox: TableStat::default(),
            receive_index: (0, 0, 0),
        };
        last_acked = acked;
        for row in monitor.query(&table_stats, &[&namespace.schema(), &names]).await? {
            let stat = TableStat { live: row.get(1), dead: row.get(2), autovacuums: row.get(3) };
            if row.get::<_, String>(0) == queue_name {
                sample.queue = stat;
            } else {
                sample.outbox = stat;
            }
        }
        if let Some(row) = monitor.query_opt(&index_stats, &[&namespace.schema(), &receive_index]).await? {
            sample.receive_index = (row.get(0), row.get(1), row.get(2));
        }
        samples.push(sample);
        if second.is_multiple_of(REPORT_EVERY) {
            print_interval(second, &samples[samples.len() - REPORT_EVERY..]);
            // The pump's own counters: full scans, conflicts, lapsed or given-up settlements.
            println!("           consumer {}", stats.snapshot());
        }
        if second == plan.clean {
            explain_claim(&monitor, scratch, "end of the clean phase").await?;
            held = Some(HeldSnapshot::open(scratch).await?);
        } else if second == release_at {
            explain_claim(&monitor, scratch, "end of the held phase").await?;
            if let Some(session) = held.take() {
                session.release().await?;
            }
            println!("  snapshot released at {second} s");
        } else if second > release_at {
            let recovery = Recovery::of(&samples, plan);
            if recovery.complete() || second >= release_at + plan.recovery_cap {
                explain_claim(&monitor, scratch, "end of the recovery").await?;
                break;
            }
        }
    }
    writing.cancel();
    writer.await??;
    shutdown.cancel();
    for (name, worker) in workers {
        match tokio::time::timeout(Duration::from_secs(30), worker).await {
            Ok(joined) => joined??,
            Err(_) => return Err(format!("the {name} did not stop within 30 s").into()),
        }
    }
    report(path, plan, &samples)
}

/// The paced writer: every tick it writes what the offered rate owes since the start (at
/// most [`MAX_BATCH`]), in one statement (direct) or one transaction (outbox), each
/// message stamped with the time it was written.
async fn write(
    config: tokio_postgres::Config,
    direct: QueueWriter,
    outbox: Option<OutboxWriter>,
    rate: f64,
    written: Arc<AtomicU64>,
    stop: CancellationToken,
) -> BenchResult<()> {
    let mut client = connect(&config).await?;
    let started = Instant::now();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = ticker.tick() => {}
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let due = (rate * started.elapsed().as_secs_f64()) as u64;
        let count = due.saturating_sub(sent).min(MAX_BATCH);
        if count == 0 {
            continue;
        }
        let stamp = now_us().to_string();
        let batch: Vec<NewMessage> = (0..count)
            .map(|i| {
                #[allow(clippy::cast_possible_truncation)]
                let n = (sent + i) as usize;
                NewMessage::new("queue", QUEUE, body(n)).header(WRITTEN_HEADER, stamp.clone())
            })
            .collect();
        match &outbox {
            None => {
                direct.enqueue(&client, &batch).await?;
            }
            Some(writer) => {
                let tx = client.transaction().await?;
                writer.enqueue(&tx, &batch).await?;
                tx.commit().await?;
            }
        }
        sent += count;
        written.fetch_add(count, Ordering::Relaxed);
    }
}

fn print_interval(second: usize, window: &[Sample]) {
    let mut latencies: Vec<f64> = window.iter().flat_map(|s| s.latencies_ms.iter().copied()).collect();
    latencies.sort_by(f64::total_cmp);
    let handled: u64 = window.iter().map(|s| s.handled).sum();
    let last = &window[window.len() - 1];
    #[allow(clippy::cast_precision_loss)]
    let rate = handled as f64 / window.len() as f64;
    let (first, end) = (window[0].receive_index, last.receive_index);
    let scans = (end.0 - first.0).max(1);
    #[allow(clippy::cast_precision_loss)]
    let (read_per_scan, buffers_per_scan) =
        ((end.1 - first.1) as f64 / scans as f64, (end.2 - first.2) as f64 / scans as f64);
    println!(
        "  {second:>4} s {:<8} handled {rate:>5.0}/s  pickup p50 {:>8.1} ms p99 {:>8.1} ms  backlog {:>6}  \
         queue dead/live {:>6}/{:<6} outbox dead/live {:>6}/{:<6} autovacuums {}/{}  \
         receive index: {read_per_scan:.0} entries read, {buffers_per_scan:.0} buffers touched per scan",
        last.phase.name(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        last.backlog,
        last.queue.dead,
        last.queue.live,
        last.outbox.dead,
        last.outbox.live,
        last.queue.autovacuums,
        last.outbox.autovacuums,
    );
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the receive's claim scan (its inner `SELECT … FOR UPDATE
/// SKIP LOCKED` of 100, as relayer's receive issues it) in a transaction rolled back: the
/// rows it locks are skipped by the consumer for a moment, nothing changes. Twice: as a full
/// scan (from the oldest `visible_at`, once per poll interval) and as a receive from the
/// cursor makes it in a steady state (from `ReceiveCursor::LAG` before the clock).
async fn explain_claim(monitor: &tokio_postgres::Client, scratch: &Scratch, when: &str) -> BenchResult<()> {
    let queue = scratch.namespace.table("queue");
    for (scan, from) in [("full scan", "'-infinity'"), ("from the cursor", "now() - interval '1 second'")] {
        monitor.batch_execute("BEGIN").await?;
        let plan = monitor
            .query(
                &format!(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) SELECT seq FROM {queue} \
                     WHERE queue = $1 AND visible_at <= now() AND visible_at >= {from} \
                     ORDER BY visible_at, seq LIMIT 100 FOR UPDATE SKIP LOCKED"
                ),
                &[&QUEUE],
            )
            .await;
        monitor.batch_execute("ROLLBACK").await?;
        println!("  claim scan at the {when}, {scan}:");
        for row in plan? {
            println!("    | {}", row.get::<_, String>(0));
        }
    }
    Ok(())
}

/// A phase's figures.
struct PhaseFigures {
    seconds: usize,
    rate: f64,
    p50: f64,
    p99: f64,
    backlog_peak: u64,
    queue_dead_peak: i64,
    outbox_dead_peak: i64,
}

impl PhaseFigures {
    fn of(samples: &[Sample], phase: Phase) -> PhaseFigures {
        let of_phase: Vec<&Sample> = samples.iter().filter(|s| s.phase == phase).collect();
        let mut latencies: Vec<f64> = of_phase.iter().flat_map(|s| s.latencies_ms.iter().copied()).collect();
        latencies.sort_by(f64::total_cmp);
        let handled: u64 = of_phase.iter().map(|s| s.handled).sum();
        #[allow(clippy::cast_precision_loss)]
        let rate = handled as f64 / of_phase.len().max(1) as f64;
        PhaseFigures {
            seconds: of_phase.len(),
            rate,
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            backlog_peak: of_phase.iter().map(|s| s.backlog).max().unwrap_or(0),
            queue_dead_peak: of_phase.iter().map(|s| s.queue.dead).max().unwrap_or(0),
            outbox_dead_peak: of_phase.iter().map(|s| s.outbox.dead).max().unwrap_or(0),
        }
    }
}

/// When, after the release, each measure came back to its clean-phase level (seconds after
/// the release, and stayed there [`STABLE`] seconds, or to the end of the samples).
struct Recovery {
    /// Backlog at most `backlog_limit` (twice the clean phase's 90th-percentile second, at
    /// least a tenth of a second's load) with at least 0.9 of the offered load handled.
    drained: Option<usize>,
    /// Each second's pickup p99 at most `p99_limit` (twice the clean phase's median second).
    latency: Option<usize>,
    /// Dead tuples of both tables at most the clean phase's peak (autovacuum's cycle).
    dead: Option<usize>,
    backlog_limit: u64,
    p99_limit: f64,
    queue_dead_limit: i64,
    outbox_dead_limit: i64,
    after: usize,
}

impl Recovery {
    #[allow(clippy::cast_precision_loss)] // backlogs far below 2^52
    fn of(samples: &[Sample], plan: &Plan) -> Recovery {
        // Baselines from the clean phase's typical second, not its worst: one slow second
        // (a busy machine, a vacuum) must not make any recovery look instant.
        let clean: Vec<&Sample> = samples.iter().filter(|s| s.phase == Phase::Clean).collect();
        let mut backlogs: Vec<f64> = clean.iter().map(|s| s.backlog as f64).collect();
        backlogs.sort_by(f64::total_cmp);
        let mut p99s: Vec<f64> = clean
            .iter()
            .filter(|s| !s.latencies_ms.is_empty())
            .map(|s| {
                let mut sorted = s.latencies_ms.clone();
                sorted.sort_by(f64::total_cmp);
                percentile(&sorted, 0.99)
            })
            .collect();
        p99s.sort_by(f64::total_cmp);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let backlog_limit = (2.0 * percentile(&backlogs, 0.9)).max(plan.rate / 10.0) as u64;
        let typical_p99 = percentile(&p99s, 0.5);
        let p99_limit = (2.0 * typical_p99).max(typical_p99 + 10.0);
        let queue_dead_limit = clean.iter().map(|s| s.queue.dead).max().unwrap_or(0).max(100);
        let outbox_dead_limit = clean.iter().map(|s| s.outbox.dead).max().unwrap_or(0).max(100);
        let after: Vec<&Sample> = samples.iter().filter(|s| s.phase == Phase::Recovery).collect();
        let first_stable = |ok: &dyn Fn(&Sample) -> bool| {
            (0..after.len())
                .find(|&i| after[i..after.len().min(i + STABLE)].iter().all(|s| ok(s)))
                .filter(|&i| i + STABLE <= after.len())
                .map(|i| i + 1)
        };
        let drained = first_stable(&|s| {
            #[allow(clippy::cast_precision_loss)]
            let keeping_up = s.handled as f64 >= 0.9 * plan.rate;
            s.backlog <= backlog_limit && keeping_up
        });
        let latency = first_stable(&|s| {
            let mut sorted = s.latencies_ms.clone();
            sorted.sort_by(f64::total_cmp);
            sorted.is_empty() || percentile(&sorted, 0.99) <= p99_limit
        });
        let dead = first_stable(&|s| s.queue.dead <= queue_dead_limit && s.outbox.dead <= outbox_dead_limit);
        Recovery {
            drained,
            latency,
            dead,
            backlog_limit,
            p99_limit,
            queue_dead_limit,
            outbox_dead_limit,
            after: after.len(),
        }
    }

    fn complete(&self) -> bool {
        self.drained.is_some() && self.latency.is_some() && self.dead.is_some()
    }
}

fn report(path: Path, plan: &Plan, samples: &[Sample]) -> BenchResult<PassResult> {
    println!(
        "  {} path by phase:  seconds  handled/s  pickup p50 ms  p99 ms  backlog peak  queue dead peak  outbox dead peak",
        path.name()
    );
    let phases: Vec<PhaseFigures> = [Phase::Clean, Phase::Held, Phase::Recovery]
        .iter()
        .map(|phase| PhaseFigures::of(samples, *phase))
        .collect();
    for (phase, f) in [Phase::Clean, Phase::Held, Phase::Recovery].iter().zip(&phases) {
        println!(
            "    {:<9} {:>16} {:>10.0} {:>14.1} {:>7.1} {:>13} {:>16} {:>17}",
            phase.name(),
            f.seconds,
            f.rate,
            f.p50,
            f.p99,
            f.backlog_peak,
            f.queue_dead_peak,
            f.outbox_dead_peak
        );
    }
    let recovery = Recovery::of(samples, plan);
    let when = |found: Option<usize>| match found {
        Some(s) => format!("{s} s"),
        None => format!("not within {} s", recovery.after),
    };
    println!(
        "  after the release: backlog ≤ {} at ≥ 0.9 of the offered load after {}; pickup p99 ≤ {:.1} ms after {}; \
         dead tuples ≤ {} (queue) and ≤ {} (outbox) after {}",
        recovery.backlog_limit,
        when(recovery.drained),
        recovery.p99_limit,
        when(recovery.latency),
        recovery.queue_dead_limit,
        recovery.outbox_dead_limit,
        when(recovery.dead)
    );
    let (clean, held) = (&phases[0], &phases[1]);
    if clean.rate < 0.95 * plan.rate {
        println!(
            "  note: the clean phase handled {:.0}/s of {:.0}/s offered: the load is above what this machine \
             keeps up with now (RELAYER_BENCH_XMIN_RATE lowers it)",
            clean.rate, plan.rate
        );
    }
    println!("  load average: {}", loadavg());
    #[allow(clippy::cast_precision_loss)]
    Ok(PassResult {
        path,
        clean_rate: clean.rate,
        held_rate: held.rate,
        held_p99_ms: held.p99,
        recovered_s: recovery.drained.map(|s| s as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_accept_plain_pairs_and_refuse_anything_that_could_splice() {
        let parsed = parse_settings("V", "autovacuum_naptime=10s, fillfactor=50,").unwrap();
        assert_eq!(parsed, ["autovacuum_naptime=10s", "fillfactor=50"]);
        for bad in ["fillfactor", "a=b c", "a=1);DROP", "a='x'", "=1", "a=", "a=b=c"] {
            let error = parse_settings("V", bad).unwrap_err().to_string();
            assert!(error.starts_with("V: `"), "{bad}: {error}");
        }
    }

    fn second(phase: Phase, handled: u64, backlog: u64, dead: i64, latency_ms: f64) -> Sample {
        Sample {
            phase,
            handled,
            latencies_ms: vec![latency_ms; 10],
            backlog,
            queue: TableStat { live: 0, dead, autovacuums: 0 },
            outbox: TableStat::default(),
            receive_index: (0, 0, 0),
        }
    }

    #[test]
    fn recovery_counts_from_the_release_and_needs_five_steady_seconds() {
        let plan = Plan { clean: 3, held: 2, recovery_cap: 20, rate: 800.0 };
        let mut samples: Vec<Sample> = (0..3).map(|_| second(Phase::Clean, 800, 20, 1_000, 20.0)).collect();
        samples.extend((0..2).map(|_| second(Phase::Held, 400, 5_000, 9_000, 3_000.0)));
        // Draining: the backlog is back in the 3rd second, then one relapse in the 5th.
        for (backlog, latency) in [(3_000, 2_000.0), (900, 500.0), (30, 30.0), (20, 20.0), (500, 20.0)] {
            samples.push(second(Phase::Recovery, 1_200, backlog, 9_000, latency));
        }
        let partial = Recovery::of(&samples, &plan);
        assert_eq!((partial.drained, partial.latency, partial.dead), (None, None, None));
        samples.extend((0..5).map(|_| second(Phase::Recovery, 800, 20, 500, 20.0)));
        let recovery = Recovery::of(&samples, &plan);
        assert_eq!(recovery.drained, Some(6)); // the relapse in the 5th second restarts the count
        assert_eq!(recovery.latency, Some(3));
        assert_eq!(recovery.dead, Some(6));
        assert!(recovery.complete());
    }
}
