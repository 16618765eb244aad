//! `relayer-bench maintenance`: what the recovery sweeper and retention cleanup cost.
//!
//! NS-5 says a pass that finds nothing to do reads a handful of pages whatever the table
//! size. This benchmark fills the outbox, dead and inbox tables with 1M rows each (quick:
//! 200k) by `generate_series` — hand-written bulk rows, since no component writes a million
//! rows that are already days old — and measures, with `auto_explain` (`log_analyze`,
//! `log_buffers`, JSON) on the pass's own session, the shared buffers (hit + read) of every
//! statement the *real* worker issues in one `run_once` pass, and the pass's wall time:
//!
//! 1. **idle, after VACUUM**: every outbox row scheduled an hour ahead, every dead and inbox
//!    row inside its retention;
//! 2. **1% due**: every hundredth row made due (outbox visible, dead older than 30 days,
//!    inbox older than 7 days), then VACUUM ANALYZE; one sweeper pass (one page, sent to the
//!    PostgreSQL queue) and one cleanup pass (which deletes every due row, batch by batch);
//! 3. **idle, after churn**: the due outbox rows drained by sweeper passes, no VACUUM; the
//!    dead index entries left behind are what an idle pass then has to step over
//!    (docs/performance.md ("Raw limits"): ~1,400 buffers instead of 3 for an unvacuumed retention index).
//!
//! Then **recovery throughput**: a backlog of 100k due rows (quick: 20k) drained by the real
//! sweeper, default options but the batch size, twice — `run_once` back to back, and the
//! running worker's own loop (`Sweeper::run`, its default 5 s `sweep_interval` included:
//! a pass that found a full page is followed at once, SWP-6) — against the raw limit
//! measured in the same run: per page, lock the rows, insert them into the queue table on
//! a second connection, delete them, commit. A one-statement move
//! (`DELETE … RETURNING` feeding an `INSERT`) is printed beside it as a floor.
//!
//! The last line is `RESULT idle_sweep_buffers=<n> idle_cleanup_buffers=<n> recovery_ratio=<x>
//! recovery_loop_ratio=<x>`: the larger idle figure of the two conditions, and the ratios of
//! `run_once` and of the loop to the raw limit at the default batch size: each the median
//! of at least 5 interleaved rounds (a fresh schema per round and batch size), printed
//! with its min–max.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayer_cleanup::{Cleanup, CleanupReport, LEASE_JOB as CLEANUP_JOB};
use relayer_core::{CleanupOptions, DispatcherOptions, StoreSource, SweeperOptions, TransportRegistry};
use relayer_delivery::SendPath;
use relayer_postgres::{PgClient, PgConnectionManager, PgSession, PgSource, StatementMode, connect_pool};
use relayer_queue::PgQueueTransport;
use relayer_sweeper::{LEASE_JOB as SWEEPER_JOB, SweepReport, Sweeper};
use relayer_worker::{Leadership, PassOutcome, WorkerEvent};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::{AsyncMessage, Client, NoTls};
use tokio_util::sync::CancellationToken;

use crate::raw_queue::{prepare_raw_queue_insert, raw_queue_insert};
use crate::rounds::{Spread, rounds};
use crate::scratch::{BenchResult, Scratch, connect};

/// The sweeper's default batch size: the ratio in the RESULT line is measured at it.
const DEFAULT_BATCH: u32 = 100;

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let (rows, backlog) = if quick { (200_000, 20_000) } else { (1_000_000, 100_000) };
    let scratch = Scratch::new().await?;
    let passes = passes_in(&scratch, rows).await;
    scratch.drop_schema().await?;
    let (idle_sweep, idle_cleanup) = passes?;

    let rounds = rounds(quick);
    println!(
        "\n=== recovery throughput: a backlog of {backlog} due rows, same server, {rounds} interleaved rounds"
    );
    // Per batch size: run_once/raw, loop/raw, run_once/one-statement move.
    let batches = [DEFAULT_BATCH, 1_000];
    let mut spreads: [[Spread; 3]; 2] = Default::default();
    for round in 1..=rounds {
        for (batch, spread) in batches.into_iter().zip(spreads.iter_mut()) {
            let scratch = Scratch::new().await?;
            let measured = throughput_in(&scratch, backlog, batch).await;
            scratch.drop_schema().await?;
            let Throughput { raw, floor, sweeper, looped } = measured?;
            println!(
                "  round {round}, batch {batch:>5}: raw {raw:>8.0} rows/s   run_once {sweeper:>8.0} rows/s   \
                 ratio {:.2}   loop {looped:>8.0} rows/s   ratio {:.2}   (one-statement move {floor:>8.0} rows/s, \
                 run_once/move {:.2})",
                sweeper / raw,
                looped / raw,
                sweeper / floor
            );
            for (series, value) in spread.iter_mut().zip([sweeper / raw, looped / raw, sweeper / floor]) {
                series.push(value);
            }
        }
    }
    for (batch, [ratio, loop_ratio, moved]) in batches.into_iter().zip(&spreads) {
        println!(
            "  batch {batch:>5}: run_once ratio {ratio}   loop ratio {loop_ratio}   run_once/move {moved}"
        );
    }
    let (ratio, loop_ratio) = (spreads[0][0].median(), spreads[0][1].median());
    println!(
        "RESULT idle_sweep_buffers={idle_sweep} idle_cleanup_buffers={idle_cleanup} recovery_ratio={ratio:.2} \
         recovery_loop_ratio={loop_ratio:.2}"
    );
    Ok(())
}

/// The idle and 1%-due passes; returns the worst idle buffers of the sweeper and of cleanup.
async fn passes_in(scratch: &Scratch, rows: i64) -> BenchResult<(u64, u64)> {
    let ns = &scratch.namespace;
    let (outbox, dead, inbox) = (ns.table("outbox"), ns.table("dead"), ns.table("inbox"));
    let filler = connect(&scratch.config).await?;
    let clock = Instant::now();
    // Hand-written bulk rows: no component writes rows that are already hours or days old.
    filler
        .execute(
            &format!(
                "INSERT INTO {outbox} (message_id, transport, destination, body, created_at, deliver_at, visible_at) \
                 SELECT gen_random_uuid(), 'queue', 'orders', '\\x7b7d', now() - interval '1 hour', \
                        now() + interval '1 hour', now() + interval '1 hour' \
                 FROM generate_series(1, $1::bigint)"
            ),
            &[&rows],
        )
        .await?;
    filler
        .execute(
            &format!(
                "INSERT INTO {dead} (seq, message_id, transport, destination, body, created_at, failed_at, attempts, last_error) \
                 SELECT n, gen_random_uuid(), 'queue', 'orders', '\\x7b7d', now() - interval '2 days', \
                        now() - interval '1 day', 3, 'permanent send failure: bench' \
                 FROM generate_series(1, $1::bigint) AS n"
            ),
            &[&rows],
        )
        .await?;
    filler
        .execute(
            &format!(
                "INSERT INTO {inbox} (consumer, message_id, processed_at) \
                 SELECT 'billing', gen_random_uuid(), now() - interval '1 hour' FROM generate_series(1, $1::bigint)"
            ),
            &[&rows],
        )
        .await?;
    vacuum(&filler, scratch).await?;
    println!(
        "maintenance benchmark: outbox, dead and inbox filled with {rows} rows each in {:.1} s (namespace {ns})",
        clock.elapsed().as_secs_f64()
    );

    let mut session = ExplainedSession::open(scratch).await?;
    let queue_pool = connect_pool(scratch.config.clone(), 2).await?;
    let transports =
        Arc::new(TransportRegistry::new().with(Arc::new(PgQueueTransport::new(queue_pool, ns)))?);
    let pool = connect_pool(scratch.config.clone(), 1).await?;
    let sweeper_options = SweeperOptions::default();
    let sweeper = Sweeper::new(
        PgSource::new(pool.clone(), ns).with_transports(transports.names()),
        ns.clone(),
        sweeper_options.clone(),
        SendPath::new(Arc::clone(&transports), DispatcherOptions::default()),
        Leadership::lease(SWEEPER_JOB, "bench", sweeper_options.lease_duration()),
    );
    let cleanup_options = CleanupOptions::default();
    let cleanup = Cleanup::new(
        PgSource::new(pool, ns),
        ns.clone(),
        cleanup_options.clone(),
        Leadership::lease(CLEANUP_JOB, "bench", cleanup_options.lease_duration()),
    );

    // A first pass of each warms the session's catalog caches and takes the leases.
    sweeper.run_once(&mut session.session).await?;
    cleanup.run_once(&mut session.session).await?;
    session.drain();

    println!("\n=== idle, right after VACUUM ANALYZE (nothing due)");
    let idle_sweep_vacuumed = session.sweep(&sweeper, true).await?;
    let idle_cleanup_vacuumed = session.clean(&cleanup, true).await?;

    println!("\n=== 1% due ({} rows per table), after VACUUM ANALYZE", rows / 100);
    filler
        .execute(
            &format!(
                "UPDATE {outbox} SET deliver_at = now() - interval '1 minute', visible_at = now() - interval '1 minute' \
                 WHERE seq % 100 = 0"
            ),
            &[],
        )
        .await?;
    filler
        .execute(
            &format!("UPDATE {dead} SET failed_at = now() - interval '31 days' WHERE seq % 100 = 0"),
            &[],
        )
        .await?;
    // Every hundredth inbox row in processed_at order (all rows share one timestamp, so
    // pick by ctid page instead: an even spread over the table).
    filler
        .execute(
            &format!(
                "UPDATE {inbox} SET processed_at = now() - interval '8 days' \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM {inbox} TABLESAMPLE SYSTEM (1) REPEATABLE (7)))"
            ),
            &[],
        )
        .await?;
    vacuum(&filler, scratch).await?;
    session.sweep(&sweeper, true).await?;
    session.clean(&cleanup, false).await?;

    println!(
        "\n=== idle, after churn (due outbox rows drained by sweeper passes, due rows deleted; no VACUUM)"
    );
    let clock = Instant::now();
    let (mut passes, mut sent, mut empty_in_a_row) = (0u32, 0u64, 0u32);
    while empty_in_a_row < 2 && passes < 100_000 {
        let report = sweeper.run_once(&mut session.session).await?;
        passes += 1;
        sent += report.sent;
        empty_in_a_row = if report.scanned == 0 { empty_in_a_row + 1 } else { 0 };
    }
    session.drain();
    println!(
        "  drained {sent} due outbox rows in {passes} sweeper passes, {:.1} s",
        clock.elapsed().as_secs_f64()
    );
    let idle_sweep_churned = session.sweep(&sweeper, true).await?;
    let idle_cleanup_churned = session.clean(&cleanup, true).await?;
    println!(
        "\nidle sweeper pass: {idle_sweep_vacuumed} buffers after VACUUM, {idle_sweep_churned} after churn; \
         idle cleanup pass: {idle_cleanup_vacuumed} after VACUUM, {idle_cleanup_churned} after churn"
    );
    Ok((idle_sweep_vacuumed.max(idle_sweep_churned), idle_cleanup_vacuumed.max(idle_cleanup_churned)))
}

pub(crate) async fn vacuum(client: &Client, scratch: &Scratch) -> BenchResult<()> {
    for table in ["outbox", "dead", "inbox", "queue"] {
        // VACUUM cannot run inside the implicit transaction of a multi-statement batch.
        client.batch_execute(&format!("VACUUM ANALYZE {}", scratch.namespace.table(table))).await?;
    }
    Ok(())
}

/// A session whose every statement's plan, with buffers, arrives as a notice.
pub(crate) struct ExplainedSession {
    /// A store session on the explained connection, as the workers' passes take one.
    pub(crate) session: PgSession,
    plans: UnboundedReceiver<String>,
}

/// One executed statement, as auto_explain reported it.
pub(crate) struct Explained {
    pub(crate) query: String,
    pub(crate) buffers: u64,
    pub(crate) plan: String,
}

impl ExplainedSession {
    pub(crate) async fn open(scratch: &Scratch) -> BenchResult<Self> {
        let (client, mut connection) = scratch.config.connect(NoTls).await?;
        let (plans_tx, plans) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) = poll_fn(|cx| connection.poll_message(cx)).await {
                if let AsyncMessage::Notice(notice) = message {
                    let _ = plans_tx.send(notice.message().to_owned());
                }
            }
        });
        client
            .batch_execute(
                "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on; \
                 SET auto_explain.log_buffers = on; SET auto_explain.log_timing = off; \
                 SET auto_explain.log_format = 'json'; SET auto_explain.log_level = 'notice'",
            )
            .await?;
        // A pool of that one connection, so the workers' passes run on it as on any
        // session of their source.
        let pool = bb8::Pool::builder()
            .max_size(1)
            .build_unchecked(PgConnectionManager::new(scratch.config.clone(), StatementMode::Prepared));
        pool.add(PgClient::new(client)).map_err(|_| "the explained connection did not fit its pool")?;
        // The PostgreSQL queue transport is the only one the benchmarks register.
        let session = PgSource::new(pool, &scratch.namespace).with_transports(["queue"]).open().await?;
        Ok(ExplainedSession { session, plans })
    }

    /// The explained connection, for statements no worker capability covers.
    pub(crate) fn client(&self) -> &PgClient {
        self.session.connection()
    }

    /// The statements reported since the last call.
    pub(crate) fn drain(&mut self) -> Vec<Explained> {
        let mut explained = Vec::new();
        while let Ok(notice) = self.plans.try_recv() {
            let Some(json) = notice.find('{').map(|at| &notice[at..]) else { continue };
            let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else { continue };
            let query = value["Query Text"]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let top = &value["Plan"];
            let mut plan = String::new();
            render(top, 0, &mut plan);
            explained.push(Explained { query, buffers: buffers(top), plan });
        }
        explained
    }

    /// One sweeper pass: prints each statement's buffers (and plans); returns the total.
    async fn sweep(&mut self, sweeper: &Sweeper<PgSource>, show_plans: bool) -> BenchResult<u64> {
        let clock = Instant::now();
        let report: SweepReport = sweeper.run_once(&mut self.session).await?;
        let elapsed = clock.elapsed();
        Ok(self.report("sweeper", &report.to_string(), elapsed, show_plans))
    }

    /// One cleanup pass: prints each statement's buffers (and plans); returns the total.
    pub(crate) async fn clean(&mut self, cleanup: &Cleanup<PgSource>, show_plans: bool) -> BenchResult<u64> {
        let clock = Instant::now();
        let report: CleanupReport = cleanup.run_once(&mut self.session).await?;
        let elapsed = clock.elapsed();
        Ok(self.report("cleanup", &report.to_string(), elapsed, show_plans))
    }

    pub(crate) fn report(&mut self, worker: &str, report: &str, elapsed: Duration, show_plans: bool) -> u64 {
        let statements = self.drain();
        let total: u64 = statements.iter().map(|s| s.buffers).sum();
        println!(
            "  {worker} pass: {total} buffers in {} statements, {:.2} ms ({report})",
            statements.len(),
            elapsed.as_secs_f64() * 1e3
        );
        // Statements repeated by a pass (cleanup's batches) are summed per text.
        let mut by_text: Vec<(String, u64, u32, String)> = Vec::new();
        for statement in statements {
            match by_text.iter_mut().find(|(query, ..)| *query == statement.query) {
                Some(entry) => {
                    entry.1 += statement.buffers;
                    entry.2 += 1;
                }
                None => by_text.push((statement.query, statement.buffers, 1, statement.plan)),
            }
        }
        for (query, buffers, times, plan) in by_text {
            let short: String = query.chars().take(110).collect();
            println!("    {buffers:>7} buffers  x{times:<4} {short}");
            if show_plans && buffers > 0 {
                print!("{plan}");
            }
        }
        total
    }
}

/// Shared buffers hit and read by a plan node, its children included.
fn buffers(node: &serde_json::Value) -> u64 {
    let get = |key: &str| node[key].as_u64().unwrap_or(0);
    get("Shared Hit Blocks") + get("Shared Read Blocks")
}

/// A plan as indented lines: node, relation or index, rows, buffers.
fn render(node: &serde_json::Value, depth: usize, out: &mut String) {
    let name = node["Node Type"].as_str().unwrap_or("?");
    let mut line = format!("{:width$}-> {name}", "", width = 14 + depth * 2);
    if let Some(index) = node["Index Name"].as_str() {
        line.push_str(&format!(" using {index}"));
    } else if let Some(relation) = node["Relation Name"].as_str() {
        line.push_str(&format!(" on {relation}"));
    }
    if let Some(relationship) =
        node["Parent Relationship"].as_str().filter(|r| *r != "Outer" && *r != "Inner")
    {
        line.push_str(&format!(" [{relationship}]"));
    }
    line.push_str(&format!("  rows={} buffers={}", node["Actual Rows"].as_u64().unwrap_or(0), buffers(node)));
    if let Some(filter) = node["Index Cond"].as_str() {
        line.push_str(&format!("  cond: {filter}"));
    }
    out.push_str(&line);
    out.push('\n');
    if let Some(children) = node["Plans"].as_array() {
        for child in children {
            render(child, depth + 1, out);
        }
    }
}

/// Drain rates (rows/s) of one backlog, batches of the same size.
struct Throughput {
    /// The raw limit: the sweeper's work in the least SQL ([`raw_recovery`]).
    raw: f64,
    /// One `DELETE … RETURNING` feeding an `INSERT` ([`one_statement_move`]): less work
    /// than recovery (no transport, no second commit), reported as a floor.
    floor: f64,
    /// The real sweeper, `run_once` in a loop.
    sweeper: f64,
    /// The real sweeper's own running loop (`Sweeper::run`), default interval.
    looped: f64,
}

/// Raw and sweeper drain rates (rows/s) of a `backlog` of due rows, batches of `batch`.
async fn throughput_in(scratch: &Scratch, backlog: i64, batch: u32) -> BenchResult<Throughput> {
    let ns = &scratch.namespace;
    let outbox = ns.table("outbox");
    let client = connect(&scratch.config).await?;
    let fill = format!(
        "INSERT INTO {outbox} (message_id, transport, destination, body, created_at) \
         SELECT gen_random_uuid(), 'queue', 'orders', \
                convert_to('{{\"order\":' || n || ',\"payload\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}', 'UTF8'), \
                now() - interval '1 hour' \
         FROM generate_series(1, $1::bigint) AS n"
    );
    reset(&client, scratch, &fill, backlog).await?;
    let raw = raw_recovery(scratch, batch).await?;
    reset(&client, scratch, &fill, backlog).await?;
    let floor = one_statement_move(&client, scratch, batch).await?;

    reset(&client, scratch, &fill, backlog).await?;
    let queue_pool = connect_pool(scratch.config.clone(), 2).await?;
    let transports =
        Arc::new(TransportRegistry::new().with(Arc::new(PgQueueTransport::new(queue_pool, ns)))?);
    let options = SweeperOptions::builder().batch_size(batch).build()?;
    let sweeper = Sweeper::new(
        PgSource::new(connect_pool(scratch.config.clone(), 1).await?, ns).with_transports(transports.names()),
        ns.clone(),
        options.clone(),
        SendPath::new(Arc::clone(&transports), DispatcherOptions::default()),
        Leadership::lease(SWEEPER_JOB, "bench", options.lease_duration()),
    );
    let mut pass_session = sweeper.source().open().await?;
    let clock = Instant::now();
    let mut sent = 0u64;
    let mut passes = 0u32;
    let total = u64::try_from(backlog).unwrap_or(0);
    while sent < total {
        let report = sweeper.run_once(&mut pass_session).await?;
        sent += report.sent;
        passes += 1;
        if passes > 1_000_000 {
            return Err(format!("the sweeper sent only {sent} of {backlog} rows").into());
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let swept = sent as f64 / clock.elapsed().as_secs_f64();
    let left: i64 = client.query_one(&format!("SELECT count(*) FROM {outbox}"), &[]).await?.get(0);
    if left != 0 {
        return Err(format!("{left} rows left in the outbox after the sweeper sent {sent}").into());
    }

    reset(&client, scratch, &fill, backlog).await?;
    let looped = sweeper_loop(scratch, &transports, &options, total).await?;
    Ok(Throughput { raw, floor, sweeper: swept, looped })
}

/// Drains `total` due rows through a running sweeper's loop (`Sweeper::run`) and returns its
/// rate (rows/s): from the start of the loop until its passes' reports add up to `total`.
async fn sweeper_loop(
    scratch: &Scratch,
    transports: &Arc<TransportRegistry>,
    options: &SweeperOptions,
    total: u64,
) -> BenchResult<f64> {
    let sweeper = Sweeper::new(
        PgSource::new(connect_pool(scratch.config.clone(), 1).await?, &scratch.namespace)
            .with_transports(transports.names()),
        scratch.namespace.clone(),
        options.clone(),
        SendPath::new(Arc::clone(transports), DispatcherOptions::default()),
        // The owner of the `run_once` measurement's lease, still live: a new owner would wait
        // out its expiry.
        Leadership::lease(SWEEPER_JOB, "bench", options.lease_duration()),
    );
    let mut events = sweeper.subscribe();
    let shutdown = CancellationToken::new();
    let clock = Instant::now();
    let task = tokio::spawn(sweeper.run(shutdown.clone()));
    let mut sent = 0u64;
    while sent < total {
        match events.recv().await {
            Ok(WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), .. }) => sent += report.sent,
            Ok(WorkerEvent::PassFailed { consecutive, .. }) => {
                shutdown.cancel();
                return Err(
                    format!("a sweeper pass failed ({consecutive} in a row) after {sent} rows").into()
                );
            }
            Ok(_) => {}
            Err(error) => return Err(format!("the sweeper's events: {error}").into()),
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = sent as f64 / clock.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await?;
    Ok(rate)
}

/// The raw limit of recovery: the sweeper's work in the least SQL, without relayer. Per
/// page, in one transaction on one connection: lock the first `batch` due unordered rows
/// in seq order (`FOR UPDATE SKIP LOCKED`, returning what a send needs), insert them into
/// the queue table on a second connection (the transport: its own durable commit), delete
/// them, commit. Prepared statements; no lease, no cursor, no grouping.
async fn raw_recovery(scratch: &Scratch, batch: u32) -> BenchResult<f64> {
    let ns = &scratch.namespace;
    let outbox = ns.table("outbox");
    let mut pass = connect(&scratch.config).await?;
    let transport = connect(&scratch.config).await?;
    let lock = pass
        .prepare(&format!(
            "SELECT seq, message_id, destination, body, headers, trace_context, created_at FROM {outbox} \
             WHERE lane IS NULL AND visible_at <= now() ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED"
        ))
        .await?;
    let delete = pass.prepare(&format!("DELETE FROM {outbox} WHERE seq = ANY($1::int8[])")).await?;
    let insert = prepare_raw_queue_insert(&transport, ns).await?;
    let clock = Instant::now();
    let mut moved = 0u64;
    loop {
        let tx = pass.transaction().await?;
        let rows = tx.query(&lock, &[&i64::from(batch)]).await?;
        if rows.is_empty() {
            break;
        }
        let seqs = raw_queue_insert(&transport, &insert, &rows).await?;
        moved += tx.execute(&delete, &[&seqs]).await?;
        tx.commit().await?;
    }
    #[allow(clippy::cast_precision_loss)]
    Ok(moved as f64 / clock.elapsed().as_secs_f64())
}

/// One statement per batch moving rows from the outbox into the queue table:
/// `DELETE … RETURNING` feeding an `INSERT`, one commit. It skips the transport's own
/// commit and holds no lock across a send, so it is less work than recovery: a floor.
async fn one_statement_move(client: &Client, scratch: &Scratch, batch: u32) -> BenchResult<f64> {
    let (outbox, queue) = (scratch.namespace.table("outbox"), scratch.namespace.table("queue"));
    let drain = format!(
        "WITH taken AS (DELETE FROM {outbox} WHERE seq = ANY(ARRAY( \
             SELECT seq FROM {outbox} ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED)) \
           RETURNING seq, message_id, destination, body, headers, trace_context, created_at) \
         INSERT INTO {queue} (message_id, queue, body, headers, trace_context, created_at) \
         SELECT message_id, destination, body, headers, trace_context, created_at FROM taken ORDER BY seq"
    );
    let clock = Instant::now();
    let mut moved = 0u64;
    loop {
        let n = client.execute(&drain, &[&i64::from(batch)]).await?;
        if n == 0 {
            break;
        }
        moved += n;
    }
    #[allow(clippy::cast_precision_loss)]
    Ok(moved as f64 / clock.elapsed().as_secs_f64())
}

/// Empties the outbox and queue, writes `backlog` due rows with `fill`, and vacuums.
async fn reset(client: &Client, scratch: &Scratch, fill: &str, backlog: i64) -> BenchResult<()> {
    let (outbox, queue) = (scratch.namespace.table("outbox"), scratch.namespace.table("queue"));
    client.batch_execute(&format!("TRUNCATE {outbox}, {queue}")).await?;
    client.execute(fill, &[&backlog]).await?;
    client.batch_execute(&format!("VACUUM ANALYZE {outbox}")).await?;
    client.batch_execute(&format!("VACUUM ANALYZE {queue}")).await?;
    Ok(())
}
