//! `cargo xtask bench consumer [--quick]`: the queue consumer against the raw SQL limit on
//! the same server in the same run.
//!
//! - **consumer_ratio**: a prefilled queue drained by a [`Consumer`] (receive → no-op
//!   handler → ack), against one raw loop doing the least SQL for the same work: a
//!   visibility-timeout read of a batch of 100 (the same `UPDATE … SKIP LOCKED RETURNING`
//!   columns) and a delete of what it read, both prepared.
//! - **queue_e2e_ratio**: four writers writing straight into the queue ([`QueueWriter`],
//!   one message per transaction, its NOTIFY throttled per queue) while a pump handles
//!   them, woken only by the database (LISTEN, as a consumer in another process is);
//!   against four raw single-row `INSERT` writers and the raw read-and-delete loop. The
//!   same run with a NOTIFY in every writing transaction is reported beside it.
//! - **idle_inbox_cleanup_buffers**: the shared buffers an idle retention pass reads on a
//!   1M-row inbox, after VACUUM and after an inbox-wrapped pump's churn (the larger).
//! - **ceiling_per_s**: a prefilled queue drained by a pump whose handler takes 1 ms, at
//!   concurrency 32 (batch 100): the pump's ceiling for the handlers a user asked for,
//!   printed beside the bound `concurrency ÷ handler time` (with the handler's measured
//!   time: a 1 ms timer sleeps a little longer).
//! - **pickup_p50_ms / pickup_p99_ms**: a steady 800 messages/s (20 per 25 ms tick, one
//!   transaction each, written with the default NOTIFY throttle) handled by that pump; the
//!   pickup is the time from the write's commit (as its writer hears of it) to the
//!   handler's start, after a warm-up second. The time from the write's call, and the
//!   write's own time, are printed beside it. The machine is shared: compare medians of
//!   several runs.
//!
//! `RELAYER_BENCH_ONLY=slots` runs only the ceiling and pickup runs (the others report
//! `not_run`).
//!
//! Both ratios are medians of at least 5 interleaved rounds (raw and relayer alternating),
//! printed with their min–max.
//!
//! It also prints the plans (`EXPLAIN ANALYZE, BUFFERS` through `auto_explain`) of the
//! consumer's statements on a 100k-row queue. The last line is
//! `RESULT consumer_ratio=<x> queue_e2e_ratio=<x> idle_inbox_cleanup_buffers=<n>`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use relayer_cleanup::{Cleanup, LEASE_JOB};
use relayer_consumer::{Consumer, Handler, Handling, InboxHandler, Outcome, Subscription};
use relayer_core::{CleanupOptions, ConsumerOptions, NewMessage};
use relayer_postgres::{
    ConsumeStatements, PgNotifications, PgSession, PgSource, QueueMessage, QueueWriter, connect_pool,
};
use relayer_worker::Leadership;
use tokio_util::sync::CancellationToken;

use crate::maintenance::{ExplainedSession, vacuum};
use crate::rounds::{Spread, rounds};
use crate::scratch::{BenchResult, Scratch, WRITERS, connect};

pub(crate) const QUEUE: &str = "bench";
const BATCH: u32 = 100;
/// The handlers running at once in the ceiling and pickup runs (issue 22's shape).
const CEILING_CONCURRENCY: u32 = 32;
/// The handler time of those runs.
const HANDLER_TIME: Duration = Duration::from_millis(1);
/// The steady load of the pickup run: `PICKUP_BATCH` messages every `PICKUP_TICK`.
const PICKUP_TICK: Duration = Duration::from_millis(25);
const PICKUP_BATCH: usize = 20;

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let (prefill, per_writer, inbox_rows) =
        if quick { (20_000, 1_500, 1_000_000) } else { (100_000, 5_000, 1_000_000) };
    let (ceiling_rows, pickup_seconds) = if quick { (20_000, 6) } else { (50_000, 20) };
    let only = std::env::var("RELAYER_BENCH_ONLY").ok();
    if let Some(only) = only.as_deref().filter(|only| *only != "slots") {
        return Err(format!("RELAYER_BENCH_ONLY is `{only}`; the consumer bench knows only `slots`").into());
    }
    let scratch = Scratch::new().await?;
    let outcome = async {
        let ceiling = ceiling(&scratch, ceiling_rows).await?;
        let pickup = pickup(&scratch, pickup_seconds).await?;
        let rest = match only {
            Some(_) => None,
            None => Some(run_in(&scratch, prefill, per_writer, inbox_rows, rounds(quick)).await?),
        };
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((ceiling, pickup, rest))
    }
    .await;
    scratch.drop_schema().await?;
    let (ceiling, (p50, p99), rest) = outcome?;
    let rest = match rest {
        Some((consumer_ratio, e2e_ratio, idle_buffers)) => format!(
            "consumer_ratio={consumer_ratio:.2} queue_e2e_ratio={e2e_ratio:.2} idle_inbox_cleanup_buffers={idle_buffers}"
        ),
        None => {
            "consumer_ratio=not_run queue_e2e_ratio=not_run idle_inbox_cleanup_buffers=not_run".to_owned()
        }
    };
    println!("RESULT {rest} ceiling_per_s={ceiling:.0} pickup_p50_ms={p50:.1} pickup_p99_ms={p99:.1}");
    Ok(())
}

/// A handler that takes [`HANDLER_TIME`] and records how long it took, and — for bodies
/// that carry the microseconds since `epoch` at which they were written — each pickup.
struct Timed {
    epoch: Instant,
    /// Each handler start and the write it picked up, in microseconds since `epoch`.
    pickups: Mutex<Vec<(u64, u64)>>,
    /// Handler calls and their total time in microseconds.
    handled: Mutex<(u64, u64)>,
}

impl Timed {
    fn new(epoch: Instant) -> Arc<Self> {
        Arc::new(Timed { epoch, pickups: Mutex::default(), handled: Mutex::default() })
    }

    fn micros_since_epoch(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The mean handler time.
    fn mean(&self) -> Duration {
        let (calls, micros) = *self.handled.lock().unwrap_or_else(PoisonError::into_inner);
        Duration::from_micros(micros.checked_div(calls).unwrap_or(0))
    }
}

#[relayer_core::async_trait]
impl Handler for Timed {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        let started = Instant::now();
        let now = self.micros_since_epoch();
        if let Some(written) = std::str::from_utf8(&message.body).ok().and_then(|b| b.parse::<u64>().ok()) {
            self.pickups.lock().unwrap_or_else(PoisonError::into_inner).push((now, written));
        }
        tokio::time::sleep(HANDLER_TIME).await;
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let mut handled = self.handled.lock().unwrap_or_else(PoisonError::into_inner);
        *handled = (handled.0 + 1, handled.1 + took);
        Outcome::Ack
    }
}

/// The options of the ceiling and pickup runs: issue 22's shape.
fn ceiling_options() -> BenchResult<ConsumerOptions> {
    Ok(ConsumerOptions::builder().concurrency(CEILING_CONCURRENCY).batch_size(BATCH).build()?)
}

/// Drains `rows` prefilled messages with a 1 ms handler at concurrency 32; returns msg/s.
async fn ceiling(scratch: &Scratch, rows: i64) -> BenchResult<f64> {
    println!(
        "=== ceiling: drain {rows} prefilled messages, handler {HANDLER_TIME:?}, concurrency {CEILING_CONCURRENCY}, \
         batch {BATCH}"
    );
    fill_queue(scratch, rows).await?;
    let handler = Timed::new(Instant::now());
    let rate =
        pump_drain(scratch, usize::try_from(rows)?, None, ceiling_options()?, Arc::clone(&handler) as _)
            .await?;
    let mean = handler.mean();
    let bound = f64::from(CEILING_CONCURRENCY) / mean.as_secs_f64().max(1e-6);
    println!(
        "  {rate:>8.0} msg/s   bound {bound:>8.0} msg/s (concurrency {CEILING_CONCURRENCY} ÷ the handler's measured \
         {mean:?})   {:.0}% of it",
        100.0 * rate / bound
    );
    truncate_queue(scratch).await?;
    Ok(rate)
}

/// A steady 800 messages/s for `seconds` (20 per 25 ms tick, one transaction each, the
/// writer's default NOTIFY throttle) through a pump with a 1 ms handler at concurrency 32;
/// returns the pickup's p50 and p99 in milliseconds, after a warm-up second.
async fn pickup(scratch: &Scratch, seconds: u64) -> BenchResult<(f64, f64)> {
    #[allow(clippy::cast_precision_loss)] // small constants
    let rate = PICKUP_BATCH as f64 / PICKUP_TICK.as_secs_f64();
    println!(
        "\n=== pickup: {rate:.0} msg/s ({PICKUP_BATCH} per {PICKUP_TICK:?} tick) for {seconds} s, handler {HANDLER_TIME:?}, \
         concurrency {CEILING_CONCURRENCY}"
    );
    truncate_queue(scratch).await?;
    let epoch = Instant::now();
    let handler = Timed::new(epoch);
    let pool = connect_pool(scratch.config.clone(), 3).await?;
    let consumer = Consumer::new(
        PgNotifications::queue(scratch.config.clone(), &scratch.namespace),
        PgSource::new(pool, &scratch.namespace),
        scratch.namespace.clone(),
        Subscription::new(QUEUE, ceiling_options()?)?,
        Arc::clone(&handler) as Arc<dyn Handler>,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(consumer.run(shutdown.clone()));
    let client = connect(&scratch.config).await?;
    let writer = QueueWriter::new(&scratch.namespace, "queue");
    let mut tick = tokio::time::interval(PICKUP_TICK);
    let ticks = seconds * 1000 / u64::try_from(PICKUP_TICK.as_millis())?;
    let (mut writes, mut committed) = (Vec::new(), std::collections::HashMap::new());
    for _ in 0..ticks {
        tick.tick().await;
        let written = handler.micros_since_epoch();
        let messages: Vec<NewMessage> = (0..PICKUP_BATCH)
            .map(|_| NewMessage::new("queue", QUEUE, written.to_string().into_bytes()))
            .collect();
        writer.enqueue(&client, &messages).await?;
        let commit = handler.micros_since_epoch();
        writes.push(commit - written);
        committed.insert(written, commit);
    }
    writes.sort_unstable();
    #[allow(clippy::cast_precision_loss)] // µs far below 2^52
    let write_p50 = writes[writes.len() / 2] as f64 / 1000.0;
    let total = ticks * PICKUP_BATCH as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while stats.snapshot().acked < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    running.await??;
    // From the write's call (insert and commit included), and from its commit (what the
    // pump controls; a handler may start just before the writer hears of its commit).
    let (mut from_call, mut from_commit): (Vec<u64>, Vec<u64>) = handler
        .pickups
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(at, _)| *at > 1_000_000)
        .map(|&(at, written)| {
            (at - written, at.saturating_sub(committed.get(&written).copied().unwrap_or(written)))
        })
        .unzip();
    if from_call.is_empty() {
        return Err("the pickup run handled nothing after its warm-up second".into());
    }
    from_call.sort_unstable();
    from_commit.sort_unstable();
    let quantile = |sorted: &[u64], q: f64| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let index = ((sorted.len() - 1) as f64 * q).round() as usize;
        #[allow(clippy::cast_precision_loss)] // pickups far below 2^52 µs
        let ms = sorted[index] as f64 / 1000.0;
        ms
    };
    let (p50, p99) = (quantile(&from_commit, 0.5), quantile(&from_commit, 0.99));
    println!(
        "  handled {} of {total}   pickup after the commit: p50 {p50:.1} ms   p99 {p99:.1} ms   max {:.1} ms",
        stats.snapshot().acked,
        quantile(&from_commit, 1.0)
    );
    println!(
        "  from the write's call: p50 {:.1} ms   p99 {:.1} ms   (the write itself, insert and commit: p50 {write_p50:.1} ms)",
        quantile(&from_call, 0.5),
        quantile(&from_call, 0.99)
    );
    truncate_queue(scratch).await?;
    Ok((p50, p99))
}

async fn run_in(
    scratch: &Scratch,
    prefill: i64,
    per_writer: usize,
    inbox_rows: i64,
    rounds: usize,
) -> BenchResult<(f64, f64, u64)> {
    let total = usize::try_from(prefill)?;
    let messages = per_writer * WRITERS;
    println!(
        "=== consumer: drain {prefill} prefilled messages (batch {BATCH}); end to end: {WRITERS} writers × \
         {per_writer} (1 message per transaction) → handler ack; same server, {rounds} interleaved rounds"
    );
    let (mut consumer, mut e2e, mut e2e_every) = (Spread::default(), Spread::default(), Spread::default());
    for round in 1..=rounds {
        fill_queue(scratch, prefill).await?;
        let raw = raw_drain(scratch, total, None).await?;
        fill_queue(scratch, prefill).await?;
        let pumped = pump_drain(scratch, total, None, drain_options()?, Arc::new(Noop)).await?;
        println!(
            "  round {round}: drain: raw {raw:>8.0} msg/s   consumer {pumped:>8.0} msg/s   ratio {:.2}",
            pumped / raw
        );
        consumer.push(pumped / raw);

        truncate_queue(scratch).await?;
        let raw_e2e = raw_end_to_end(scratch, per_writer).await?;
        truncate_queue(scratch).await?;
        let throttled = pump_drain(
            scratch,
            messages,
            Some((per_writer, relayer_postgres::DEFAULT_NOTIFY_INTERVAL)),
            drain_options()?,
            Arc::new(Noop),
        )
        .await?;
        truncate_queue(scratch).await?;
        let every = pump_drain(
            scratch,
            messages,
            Some((per_writer, Duration::ZERO)),
            drain_options()?,
            Arc::new(Noop),
        )
        .await?;
        println!(
            "  round {round}: end to end: raw {raw_e2e:>8.0} msg/s   relayer {throttled:>8.0} msg/s   ratio {:.2}   \
             (NOTIFY in every transaction: {every:>8.0} msg/s, ratio {:.2})",
            throttled / raw_e2e,
            every / raw_e2e
        );
        e2e.push(throttled / raw_e2e);
        e2e_every.push(every / raw_e2e);
        truncate_queue(scratch).await?;
    }
    println!("  consumer_ratio {consumer}");
    println!("  queue_e2e_ratio {e2e}   (NOTIFY in every transaction: {e2e_every})");
    let (consumer_ratio, e2e_ratio) = (consumer.median(), e2e.median());

    println!("\n=== plans of the consumer's statements on a 100k-row queue");
    explain_statements(scratch).await?;

    println!("\n=== idle inbox cleanup pass on a {inbox_rows}-row inbox");
    let idle = idle_inbox_cleanup(scratch, inbox_rows).await?;
    Ok((consumer_ratio, e2e_ratio, idle))
}

/// Bulk rows for the drain runs (no component writes 100k rows in one statement).
pub(crate) async fn fill_queue(scratch: &Scratch, rows: i64) -> BenchResult<()> {
    let client = connect(&scratch.config).await?;
    let queue = scratch.namespace.table("queue");
    client
        .execute(
            &format!(
                "INSERT INTO {queue} (message_id, queue, body, headers) \
                 SELECT gen_random_uuid(), $1, '\\x7b226e223a317d', '{{\"content-type\":\"application/json\"}}' \
                 FROM generate_series(1, $2::bigint)"
            ),
            &[&QUEUE, &rows],
        )
        .await?;
    vacuum(&client, scratch).await
}

pub(crate) async fn truncate_queue(scratch: &Scratch) -> BenchResult<()> {
    let client = connect(&scratch.config).await?;
    let queue = scratch.namespace.table("queue");
    client.batch_execute(&format!("TRUNCATE {queue}")).await?;
    client.batch_execute(&format!("VACUUM ANALYZE {queue}")).await?;
    Ok(())
}

/// The raw limit: one loop reading a batch with a visibility timeout, then deleting it.
/// With `writers`, raw single-row inserts run meanwhile; returns messages per second.
async fn raw_drain(scratch: &Scratch, total: usize, writers: Option<usize>) -> BenchResult<f64> {
    let queue = scratch.namespace.table("queue");
    let client = connect(&scratch.config).await?;
    let read = client
        .prepare(&format!(
            "UPDATE {queue} AS q SET visible_at = now() + interval '30 seconds', receipt = gen_random_uuid() \
             WHERE q.seq = ANY(ARRAY(SELECT seq FROM {queue} WHERE queue = $1 AND visible_at <= now() \
                                     ORDER BY visible_at, seq LIMIT {BATCH} FOR UPDATE SKIP LOCKED)) \
             RETURNING q.seq, q.message_id, q.queue, q.body, q.headers, q.trace_context, q.created_at, q.handled_count"
        ))
        .await?;
    let delete = client.prepare(&format!("DELETE FROM {queue} WHERE seq = ANY($1)")).await?;
    let clock = Instant::now();
    let mut tasks = Vec::new();
    if let Some(per_writer) = writers {
        for _ in 0..WRITERS {
            let config = scratch.config.clone();
            let queue = queue.clone();
            tasks.push(tokio::spawn(async move {
                let client = connect(&config).await?;
                let insert = client
                    .prepare(&format!("INSERT INTO {queue} (message_id, queue, body) VALUES ($1, $2, $3)"))
                    .await?;
                for n in 0..per_writer {
                    let body = format!("{{\"n\":{n}}}").into_bytes();
                    client.execute(&insert, &[&uuid::Uuid::new_v4(), &QUEUE, &body]).await?;
                }
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            }));
        }
    }
    let mut handled = 0;
    while handled < total {
        let rows = client.query(&read, &[&QUEUE]).await?;
        if rows.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let seqs: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
        client.execute(&delete, &[&seqs]).await?;
        handled += seqs.len();
    }
    let elapsed = clock.elapsed();
    for task in tasks {
        task.await??;
    }
    Ok(count_per_second(total, elapsed))
}

async fn raw_end_to_end(scratch: &Scratch, per_writer: usize) -> BenchResult<f64> {
    raw_drain(scratch, per_writer * WRITERS, Some(per_writer)).await
}

pub(crate) struct Noop;

#[relayer_core::async_trait]
impl Handler for Noop {
    async fn handle(&self, _message: &QueueMessage) -> Outcome {
        Outcome::Ack
    }
}

/// The drain runs' options: a no-op handler, so many slots.
pub(crate) fn drain_options() -> BenchResult<ConsumerOptions> {
    Ok(ConsumerOptions::builder().concurrency(2 * BATCH).batch_size(BATCH).build()?)
}

/// A pump running `handler` with `options` draining `total` messages; with `writers`
/// (`per_writer`, notify interval), four direct-enqueue writers run meanwhile.
pub(crate) async fn pump_drain(
    scratch: &Scratch,
    total: usize,
    writers: Option<(usize, Duration)>,
    options: ConsumerOptions,
    handler: Arc<dyn Handler>,
) -> BenchResult<f64> {
    let subscription = Subscription::new(QUEUE, options)?;
    let pool = connect_pool(scratch.config.clone(), 3).await?;
    let consumer = Consumer::new(
        PgNotifications::queue(scratch.config.clone(), &scratch.namespace),
        PgSource::new(pool, &scratch.namespace),
        scratch.namespace.clone(),
        subscription,
        handler,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let mut tasks = Vec::new();
    if let Some((per_writer, interval)) = writers {
        // Connected before the clock starts, as the raw writers' are before their first insert.
        let writer = QueueWriter::new(&scratch.namespace, "queue").with_notify_interval(interval);
        for _ in 0..WRITERS {
            let client = connect(&scratch.config).await?;
            let writer = writer.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..per_writer {
                    let message = NewMessage::new("queue", QUEUE, format!("{{\"n\":{n}}}").into_bytes());
                    writer.enqueue(&client, &[message]).await?;
                }
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            }));
        }
    }
    let clock = Instant::now();
    let running = tokio::spawn(consumer.run(shutdown.clone()));
    while usize::try_from(stats.snapshot().acked)? < total {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = clock.elapsed();
    shutdown.cancel();
    running.await??;
    for task in tasks {
        task.await??;
    }
    Ok(count_per_second(total, elapsed))
}

fn count_per_second(count: usize, elapsed: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let count = count as f64;
    count / elapsed.as_secs_f64()
}

/// Receive, heartbeat, requeue, dead-letter and ack once each on a 100k-row queue, with
/// their plans.
async fn explain_statements(scratch: &Scratch) -> BenchResult<()> {
    truncate_queue(scratch).await?;
    fill_queue(scratch, 100_000).await?;
    let mut session = ExplainedSession::open(scratch).await?;
    let statements = ConsumeStatements::new(&scratch.namespace);
    let visibility = Duration::from_secs(30);
    // Warm the session's caches and prepared statements first.
    let warm = statements.receive(session.client(), QUEUE, BATCH, visibility).await?;
    let receipts: Vec<_> = warm.iter().map(|r| r.receipt).collect();
    statements.ack(session.client(), &receipts).await?;
    session.drain();
    let clock = Instant::now();
    let received = statements.receive(session.client(), QUEUE, BATCH, visibility).await?;
    let receipts: Vec<_> = received.iter().map(|r| r.receipt).collect();
    statements.extend(session.client(), &receipts, visibility).await?;
    let requeue = [relayer_postgres::Requeue { receipt: receipts[0], delay: Duration::from_secs(1) }];
    statements.requeue(session.client(), &requeue).await?;
    let dead = [relayer_postgres::DeadLetter {
        receipt: receipts[1],
        queue: "bench.dead_letters".into(),
        reason: relayer_core::RejectionReason::Rejected,
        message: "bench".into(),
        handled: true,
    }];
    statements.dead_letter(session.client(), &dead).await?;
    statements.ack(session.client(), &receipts[2..]).await?;
    session.report(
        "consumer",
        "receive 100, heartbeat, requeue 1, dead-letter 1, ack 98",
        clock.elapsed(),
        true,
    );
    Ok(())
}

struct InboxNoop;

#[relayer_core::async_trait]
impl InboxHandler<PgSession> for InboxNoop {
    async fn handle(&self, _tx: &PgSession, _message: &QueueMessage) -> Outcome {
        Outcome::Ack
    }
}

/// An idle cleanup pass on a `rows`-row inbox after VACUUM, then after an inbox-wrapped
/// pump recorded 5,000 messages and a pass deleted 10,000 expired rows (no VACUUM);
/// returns the larger buffer count.
async fn idle_inbox_cleanup(scratch: &Scratch, rows: i64) -> BenchResult<u64> {
    let client = connect(&scratch.config).await?;
    let inbox = scratch.namespace.table("inbox");
    let clock = Instant::now();
    client
        .execute(
            &format!(
                "INSERT INTO {inbox} (consumer, message_id, processed_at) \
                 SELECT 'billing', gen_random_uuid(), now() - interval '1 hour' FROM generate_series(1, $1::bigint)"
            ),
            &[&rows],
        )
        .await?;
    vacuum(&client, scratch).await?;
    println!("  inbox filled with {rows} rows in {:.1} s", clock.elapsed().as_secs_f64());
    let mut session = ExplainedSession::open(scratch).await?;
    let options = CleanupOptions::default();
    let cleanup = Cleanup::new(
        PgSource::new(connect_pool(scratch.config.clone(), 1).await?, &scratch.namespace),
        scratch.namespace.clone(),
        options.clone(),
        Leadership::lease(LEASE_JOB, "bench", options.lease_duration()),
    );
    cleanup.run_once(&mut session.session).await?;
    session.drain();
    println!("  idle, after VACUUM:");
    let vacuumed = session.clean(&cleanup, true).await?;

    // Churn: an inbox-wrapped pump records 5,000 messages; 10,000 rows expire and are deleted.
    truncate_queue(scratch).await?;
    fill_queue(scratch, 5_000).await?;
    let options = ConsumerOptions::builder().concurrency(16).build()?;
    let pool = connect_pool(scratch.config.clone(), 19).await?;
    let handling = Handling::Inbox(Arc::new(InboxNoop));
    let consumer = Consumer::new(
        PgNotifications::queue(scratch.config.clone(), &scratch.namespace),
        PgSource::new(pool, &scratch.namespace),
        scratch.namespace.clone(),
        Subscription::new(QUEUE, options)?,
        handling,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(consumer.run(shutdown.clone()));
    while stats.snapshot().acked < 5_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    running.await??;
    client
        .execute(
            &format!(
                "UPDATE {inbox} SET processed_at = now() - interval '8 days' \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM {inbox} LIMIT 10000))"
            ),
            &[],
        )
        .await?;
    println!("  a pass deleting 10,000 expired rows:");
    session.clean(&cleanup, false).await?;
    println!("  idle, after that churn (no VACUUM):");
    let churned = session.clean(&cleanup, true).await?;
    println!("  idle inbox cleanup pass: {vacuumed} buffers after VACUUM, {churned} after churn");
    Ok(vacuumed.max(churned))
}
