//! relayer's benchmarks, run by `cargo xtask bench <name> [--quick]`.
//!
//! `dispatch` measures, in one run on one PostgreSQL (so the ratio is trustworthy even when
//! absolute figures swing, docs/performance.md ("Raw limits")):
//!
//! - the **raw limit**: a plain loop on the same server doing the least SQL for the same
//!   work — writers insert rows in transactions of 1 and of 10; one drainer moves them in
//!   batches of 100 from the outbox into the queue table with one
//!   `DELETE … RETURNING` feeding an `INSERT`;
//! - **relayer**: writers enqueue through [`OutboxWriter`] in transactions of 1 and of 10;
//!   a [`Dispatcher`] (woken by the writers' NOTIFY) sends them through
//!   [`PgQueueTransport`] and deletes the outbox rows;
//! - **commit-to-send latency** at half relayer's measured rate: the writer records the
//!   instant its commit returned, a wrapping transport the instant the queue insert
//!   returned; p50 and p99 of the difference.
//!
//! - **claim buffers** of one 100-row claim on a large outbox, without and then with a
//!   tripped destination's 100,000 due rows, and behind 100,000 due rows of a transport the
//!   claiming process lacks (TRN-6; see [`tripped`]).
//!
//! Raw and relayer runs alternate over [`rounds::rounds`] rounds (at least 5, quick runs
//! too); each ratio is the median of its per-round ratios, printed with its min–max. The
//! last line is `RESULT dispatch_ratio=<the worse of the two medians>
//! dispatch_ratio_tx1=<x> dispatch_ratio_tx10=<x> p50_ms=<x> p99_ms=<x>
//! claim_buffers=<n> tripped_claim_buffers=<n> unregistered_claim_buffers=<n> hold_buffers=<n>
//! retrip_hold_buffers=<n> release_buffers=<n>`.
//!
//! `tripped` runs the claim-buffer part alone, with the same `RESULT` keys for it.
//!
//! `explain` fills a 1M-row outbox and prints `EXPLAIN (ANALYZE, BUFFERS)` of every hot
//! statement, captured with `auto_explain` exactly as relayer issues them.
//!
//! `maintenance` measures the buffers and time of idle and 1%-due recovery sweeper and
//! retention cleanup passes on 1M-row tables, and recovery throughput against the raw
//! limit; see [`maintenance`].
//!
//! `consumer` measures the queue consumer against the raw read-and-delete loop, direct
//! enqueue end to end, and the idle inbox cleanup pass; see [`consumer`].
//!
//! `enqueue` measures each writer (direct enqueue, outbox, inbox record) on each client kind
//! a user holds against a prepared single-row insert; see [`enqueue`].
//!
//! `brokers` measures outbox → broker throughput against a raw publish loop; see
//! [`brokers`]. `claims` measures what a claimed row costs PostgreSQL: relayer's
//! committed claim, a heap-only-update claim and a transaction-held one; see [`claims`].
//!
//! `peers` runs relayer's PostgreSQL queue beside pgmq on the same server, with
//! PostgreSQL's CPU per message of each; see [`peers`].
//!
//! `xmin` holds a snapshot open against a steady load, on a throwaway cluster with
//! PostgreSQL's default settings and on the shared server; see [`xmin`].
//!
//! Each run works in its own random schema, dropped at the end.
#![deny(missing_docs)]
#![allow(clippy::print_stdout)] // A benchmark's output is its report.

mod brokers;
mod claims;
mod consumer;
mod cpu;
mod enqueue;
mod explain;
mod maintenance;
mod peers;
mod raw_queue;
mod rounds;
mod scratch;
mod stock_cluster;
mod tripped;
mod xmin;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use relayer_core::{
    DispatcherOptions, Envelope, Namespace, NewMessage, SendOutcome, Transport, TransportError,
    TransportRegistry, async_trait,
};
use relayer_dispatcher::Dispatcher;
use relayer_postgres::{OutboxWriter, PgNotifications, PgPool, PgSource, asynchronous_commit, connect_pool};
use relayer_queue::PgQueueTransport;
use tokio_util::sync::CancellationToken;

use crate::raw_queue::{prepare_raw_queue_insert, raw_queue_insert};
use crate::rounds::Spread;
use crate::scratch::{BenchResult, Scratch, WRITERS, body, connect, percentile};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let outcome = match args.first().map(String::as_str) {
        Some("dispatch") => dispatch(quick).await,
        Some("explain") => explain::run(quick).await,
        Some("maintenance") => maintenance::run(quick).await,
        Some("consumer") => consumer::run(quick).await,
        Some("enqueue") => enqueue::run(quick).await,
        Some("brokers") => brokers::run(quick).await,
        Some("claims") => claims::run(quick).await,
        Some("peers") => peers::run(quick).await,
        Some("xmin") => xmin::run(quick).await,
        Some("tripped") => tripped_only(quick).await,
        _ => {
            Err("usage: relayer-bench dispatch|tripped|explain|maintenance|consumer|enqueue|brokers|claims|peers|xmin [--quick]"
                .into())
        }
    };
    if let Err(error) = outcome {
        eprintln!("relayer-bench: {}", relayer_core::error_chain(error.as_ref()));
        std::process::exit(1);
    }
}

async fn dispatch(quick: bool) -> BenchResult<()> {
    let scratch = Scratch::new().await?;
    let outcome = dispatch_in(&scratch, quick).await;
    scratch.drop_schema().await?;
    outcome
}

/// `tripped`: the claim-buffer part of `dispatch` alone (DSP-6, TRN-6).
async fn tripped_only(quick: bool) -> BenchResult<()> {
    let scratch = Scratch::new().await?;
    let outcome = tripped::claim_buffers(&scratch, quick).await;
    scratch.drop_schema().await?;
    println!("RESULT {}", outcome?.result());
    Ok(())
}

async fn dispatch_in(scratch: &Scratch, quick: bool) -> BenchResult<()> {
    let messages = if quick { 6_000 } else { 40_000 };
    println!(
        "dispatch benchmark: {messages} messages per run, {WRITERS} writers, namespace {}",
        scratch.namespace
    );
    let rounds = rounds::rounds(quick);
    println!("  every ratio: the median of {rounds} interleaved rounds (min–max beside it)");
    // Per transaction size: relayer/raw, NOTIFY-woken/raw, relayer/one-statement move, and
    // relayer's rate.
    let mut spreads: [[Spread; 4]; 2] = Default::default();
    for round in 1..=rounds {
        for (per_tx, spread) in [1usize, 10].into_iter().zip(spreads.iter_mut()) {
            scratch.truncate().await?;
            let raw = raw_run(scratch, messages, per_tx, RawDrain::ClaimSendDelete).await?;
            scratch.truncate().await?;
            let relayer = relayer_run(scratch, messages, per_tx, None, Wakeup::InProcess).await?.rate;
            scratch.truncate().await?;
            let floor = raw_run(scratch, messages, per_tx, RawDrain::OneStatementMove).await?;
            scratch.truncate().await?;
            let notified = relayer_run(scratch, messages, per_tx, None, Wakeup::Notify).await?.rate;
            println!(
                "  round {round}, tx of {per_tx:>2}: raw {raw:>8.0} msg/s   relayer {relayer:>8.0} msg/s   ratio {:.2}   \
                 (NOTIFY in every transaction: {notified:>8.0} msg/s, ratio {:.2}; \
                 one-statement move {floor:>8.0} msg/s, relayer/move {:.2})",
                relayer / raw,
                notified / raw,
                relayer / floor
            );
            for (series, value) in
                spread.iter_mut().zip([relayer / raw, notified / raw, relayer / floor, relayer])
            {
                series.push(value);
            }
        }
    }
    for (per_tx, [ratio, notified, moved, rate]) in [1usize, 10].into_iter().zip(&spreads) {
        println!(
            "  tx of {per_tx:>2}: ratio {ratio}   relayer {} msg/s   NOTIFY in every transaction: ratio {notified}   \
             relayer/move {moved}",
            rate.rate()
        );
    }
    let ratios = [spreads[0][0].median(), spreads[1][0].median()];
    let relayer_rate_1 = spreads[0][3].median();
    scratch.truncate().await?;
    let rate = relayer_rate_1 / 2.0;
    let seconds = if quick { 10 } else { 30 };
    let paced = Some((rate, Duration::from_secs(seconds)));
    let latency = relayer_run(scratch, 0, 1, paced, Wakeup::InProcess).await?;
    let (p50, p99) = (percentile(&latency.latencies_ms, 0.50), percentile(&latency.latencies_ms, 0.99));
    println!(
        "  latency at {rate:.0} msg/s (half of relayer's tx-of-1 rate) over {seconds} s, {} messages: p50 {p50:.2} ms, p99 {p99:.2} ms",
        latency.latencies_ms.len()
    );
    scratch.truncate().await?;
    let notified = relayer_run(scratch, 0, 1, paced, Wakeup::Notify).await?;
    println!(
        "  latency with a NOTIFY-woken dispatcher, same rate: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&notified.latencies_ms, 0.50),
        percentile(&notified.latencies_ms, 0.99)
    );
    println!("  claim buffers, without and with a tripped destination's backlog:");
    let tripped = tripped::claim_buffers(scratch, quick).await?;
    // The worse of the two transaction sizes' medians.
    let ratio = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "RESULT dispatch_ratio={ratio:.2} dispatch_ratio_tx1={:.2} dispatch_ratio_tx10={:.2} p50_ms={p50:.2} p99_ms={p99:.2} {}",
        ratios[0],
        ratios[1],
        tripped.result()
    );
    Ok(())
}

/// How the dispatcher learns of new rows in a relayer run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wakeup {
    /// The writing process wakes its own dispatcher after each commit
    /// (`Dispatcher::committed`); the writer sends no NOTIFY.
    InProcess,
    /// Every enqueue NOTIFYs in its transaction and the dispatcher LISTENs, as a dispatcher
    /// in another process would be woken.
    Notify,
}

/// How the raw run's drainers move rows from the outbox into the queue table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RawDrain {
    /// The raw limit of relayer's work (the "claim-and-delete in batches"): a
    /// conditional claim committed on its own, the queue insert on a second connection
    /// (the transport, its own durable commit), then the delete fenced by the claim token.
    /// Claims and deletes commit with `synchronous_commit = off`, as relayer's do (DSP-7a).
    ClaimSendDelete,
    /// One `DELETE … RETURNING` feeding an `INSERT` per batch: no claim, no transport
    /// commit — less work than dispatch, reported as a floor.
    OneStatementMove,
}

/// Raw drainers running side by side, as many as the dispatcher's default unordered loops.
const RAW_DRAINERS: usize = 2;

/// The raw limit: minimal inserts by the writers, drainers moving rows into the queue.
async fn raw_run(scratch: &Scratch, messages: usize, per_tx: usize, drain: RawDrain) -> BenchResult<f64> {
    let outbox = scratch.namespace.table("outbox");
    let insert = format!(
        "INSERT INTO {outbox} (message_id, transport, destination, body) \
         SELECT id, 'queue', 'orders', b FROM unnest($1::uuid[], $2::bytea[]) AS m(id, b)"
    );
    let started = Instant::now();
    let writers_done = CancellationToken::new();
    let mut drainers = Vec::new();
    for _ in 0..RAW_DRAINERS {
        let (config, namespace, done) =
            (scratch.config.clone(), scratch.namespace.clone(), writers_done.clone());
        drainers.push(tokio::spawn(async move { raw_drainer(&config, &namespace, drain, &done).await }));
    }
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let (config, insert) = (scratch.config.clone(), insert.clone());
        writers.push(tokio::spawn(async move {
            let mut client = connect(&config).await?;
            let share = messages / WRITERS;
            for start in (0..share).step_by(per_tx) {
                let count = per_tx.min(share - start);
                let ids: Vec<uuid::Uuid> = (0..count).map(|_| uuid::Uuid::now_v7()).collect();
                let bodies: Vec<Vec<u8>> = (0..count).map(|i| body(writer * share + start + i)).collect();
                let tx = client.transaction().await?;
                tx.execute(&insert, &[&ids, &bodies]).await?;
                tx.commit().await?;
            }
            BenchResult::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    writers_done.cancel();
    let mut moved = 0;
    for drainer in drainers {
        moved += drainer.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    Ok(moved as f64 / elapsed)
}

/// One raw drainer: moves batches of 100 until the writers are done and nothing is left.
async fn raw_drainer(
    config: &tokio_postgres::Config,
    namespace: &Namespace,
    drain: RawDrain,
    writers_done: &CancellationToken,
) -> BenchResult<u64> {
    let (outbox, queue) = (namespace.table("outbox"), namespace.table("queue"));
    let client = connect(config).await?;
    let transport = connect(config).await?;
    let mut moved = 0u64;
    let statements = match drain {
        RawDrain::OneStatementMove => [client
            .prepare(&format!(
                "WITH taken AS (DELETE FROM {outbox} WHERE seq = ANY(ARRAY( \
                         SELECT seq FROM {outbox} ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED)) \
                       RETURNING seq, message_id, destination, body, headers, trace_context, created_at) \
                     INSERT INTO {queue} (message_id, queue, body, headers, trace_context, created_at) \
                     SELECT message_id, destination, body, headers, trace_context, created_at \
                     FROM taken ORDER BY seq"
            ))
            .await?]
        .to_vec(),
        RawDrain::ClaimSendDelete => {
            client.batch_execute("SET synchronous_commit = off").await?;
            vec![
                client
                    .prepare(&format!(
                        "UPDATE {outbox} SET claim_token = $1, visible_at = now() + interval '30 s' \
                         WHERE seq = ANY(ARRAY(SELECT seq FROM {outbox} \
                           WHERE lane IS NULL AND visible_at <= now() \
                           ORDER BY visible_at LIMIT 100 FOR UPDATE SKIP LOCKED)) \
                         RETURNING seq, message_id, destination, body, headers, trace_context, created_at"
                    ))
                    .await?,
                prepare_raw_queue_insert(&transport, namespace).await?,
                client
                    .prepare(&format!(
                        "DELETE FROM {outbox} WHERE seq = ANY($1::int8[]) AND claim_token = $2"
                    ))
                    .await?,
            ]
        }
    };
    loop {
        let n = match drain {
            RawDrain::OneStatementMove => client.execute(&statements[0], &[]).await?,
            RawDrain::ClaimSendDelete => {
                let token = uuid::Uuid::new_v4();
                let rows = client.query(&statements[0], &[&token]).await?;
                if rows.is_empty() {
                    0
                } else {
                    let seqs = raw_queue_insert(&transport, &statements[1], &rows).await?;
                    client.execute(&statements[2], &[&seqs, &token]).await?
                }
            }
        };
        moved += n;
        if n == 0 {
            if writers_done.is_cancelled() {
                return Ok(moved);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Records when each message's queue insert returned, around the real queue transport.
struct TimedQueue {
    inner: PgQueueTransport,
    sent_at: Arc<Mutex<HashMap<uuid::Uuid, Instant>>>,
    /// Messages the queue accepted: the run watches this instead of polling `count(*)`,
    /// which would load the server the raw run does not.
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl Transport for TimedQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn batch_limit(&self) -> NonZeroUsize {
        self.inner.batch_limit()
    }
    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let outcomes = self.inner.send(destination, batch).await?;
        let now = Instant::now();
        self.accepted.fetch_add(batch.len(), std::sync::atomic::Ordering::Relaxed);
        let mut sent_at = self.sent_at.lock().unwrap_or_else(PoisonError::into_inner);
        for envelope in batch {
            sent_at.insert(*envelope.id.as_uuid(), now);
        }
        Ok(outcomes)
    }
}

struct RelayerRun {
    rate: f64,
    latencies_ms: Vec<f64>,
}

/// relayer end to end: enqueue in transactions, a NOTIFY-woken dispatcher sends into the
/// queue table. With `paced`, writers hold `(rate, duration)` and latencies are measured.
async fn relayer_run(
    scratch: &Scratch,
    messages: usize,
    per_tx: usize,
    paced: Option<(f64, Duration)>,
    wakeup: Wakeup,
) -> BenchResult<RelayerRun> {
    let queue_pool: PgPool = connect_pool(scratch.config.clone(), 4).await?;
    let sent_at = Arc::new(Mutex::new(HashMap::new()));
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let transport = TimedQueue {
        inner: PgQueueTransport::new(queue_pool, &scratch.namespace),
        sent_at: Arc::clone(&sent_at),
        accepted: Arc::clone(&accepted),
    };
    let registry = Arc::new(TransportRegistry::new().with(Arc::new(transport))?);
    let dispatch_pool = connect_pool(asynchronous_commit(scratch.config.clone()), 4).await?;
    let outbox_writer = OutboxWriter::for_registry(&scratch.namespace, &registry);
    let source = PgSource::new(dispatch_pool, &scratch.namespace).with_transports(registry.names());
    let dispatcher =
        Dispatcher::new(source, scratch.namespace.clone(), DispatcherOptions::default(), registry)?
            .listening(PgNotifications::outbox(scratch.config.clone(), &scratch.namespace));
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await; // let it LISTEN
    let committed_at = Arc::new(Mutex::new(HashMap::new()));
    let writer = match wakeup {
        Wakeup::InProcess => Arc::new(outbox_writer.without_notify()),
        Wakeup::Notify => Arc::new(outbox_writer),
    };
    let local = (wakeup == Wakeup::InProcess).then(|| dispatcher.clone());
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (config, writer, committed_at, local) =
            (scratch.config.clone(), Arc::clone(&writer), Arc::clone(&committed_at), local.clone());
        writers.push(tokio::spawn(async move {
            let share = messages / WRITERS;
            write_messages(&config, &writer, local.as_ref(), &committed_at, w, share, per_tx, paced).await
        }));
    }
    let mut written = 0usize;
    for task in writers {
        written += task.await??;
    }
    let client = connect(&scratch.config).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while accepted.load(std::sync::atomic::Ordering::Relaxed) < written {
        if Instant::now() > deadline {
            let sent = accepted.load(std::sync::atomic::Ordering::Relaxed);
            return Err(format!("only {sent} of {written} messages dispatched after 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Every message is in the queue; the run ends when their outbox rows are gone too.
    loop {
        let queued = scratch.count(&client, "queue").await?;
        let pending = scratch.count(&client, "outbox").await?;
        if usize::try_from(queued).unwrap_or(0) >= written && pending == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {queued} of {written} messages dispatched after 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    worker.await??;
    let committed = committed_at.lock().unwrap_or_else(PoisonError::into_inner);
    let sent = sent_at.lock().unwrap_or_else(PoisonError::into_inner);
    let mut latencies_ms: Vec<f64> = committed
        .iter()
        .filter_map(|(id, commit)| {
            sent.get(id).map(|send| send.saturating_duration_since(*commit).as_secs_f64() * 1e3)
        })
        .collect();
    latencies_ms.sort_by(f64::total_cmp);
    #[allow(clippy::cast_precision_loss)]
    Ok(RelayerRun { rate: written as f64 / elapsed, latencies_ms })
}

#[allow(clippy::too_many_arguments)] // A benchmark loop's knobs, passed straight through.
async fn write_messages(
    config: &tokio_postgres::Config,
    writer: &OutboxWriter,
    local_dispatcher: Option<&Dispatcher<PgSource>>,
    committed_at: &Mutex<HashMap<uuid::Uuid, Instant>>,
    writer_index: usize,
    share: usize,
    per_tx: usize,
    paced: Option<(f64, Duration)>,
) -> BenchResult<usize> {
    let mut client = connect(config).await?;
    let mut written = 0usize;
    let (mut ticker, until) = match paced {
        Some((rate, duration)) => {
            #[allow(clippy::cast_precision_loss)]
            let period = Duration::from_secs_f64(WRITERS as f64 * per_tx as f64 / rate.max(1.0));
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            (Some(ticker), Some(Instant::now() + duration))
        }
        None => (None, None),
    };
    loop {
        match until {
            Some(until) if Instant::now() >= until => break,
            None if written >= share => break,
            _ => {}
        }
        if let Some(ticker) = ticker.as_mut() {
            ticker.tick().await;
        }
        let batch: Vec<NewMessage> = (0..per_tx)
            .map(|i| NewMessage::new("queue", "orders", body(writer_index * 1_000_000 + written + i)))
            .collect();
        let tx = client.transaction().await?;
        writer.enqueue(&tx, &batch).await?;
        tx.commit().await?;
        let now = Instant::now();
        if let Some(dispatcher) = local_dispatcher {
            dispatcher.committed();
        }
        let mut committed = committed_at.lock().unwrap_or_else(PoisonError::into_inner);
        for message in &batch {
            committed.insert(*message.message_id().as_uuid(), now);
        }
        written += per_tx;
    }
    Ok(written)
}
