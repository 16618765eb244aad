//! `cargo xtask bench peers [--quick]`: relayer's PostgreSQL queue beside pgmq, in one run
//! on one server, with the same shapes.
//!
//! pgmq is installed from the SQL its Rust crate embeds (no extension needed), into its own
//! `pgmq` schema, with one queue per run (dropped at the end). Its calls go through the
//! crate as a user's would (sqlx, statements prepared per connection). Every round runs,
//! pgmq then relayer each time:
//!
//! - **send**: four writers, one message per transaction (`pgmq.send` / [`QueueWriter`]);
//! - **send_batch**: four writers, 100 messages per transaction;
//! - **drain**: a prefilled queue read and deleted in batches of 100 by one consumer
//!   (pgmq's `read` + `delete` of the ids read / relayer's [`Consumer`] acking a no-op
//!   handler);
//! - **end to end**: four writers (one message per transaction) and one consumer at once,
//!   until every message is handled. pgmq's reader polls (an empty read sleeps 1 ms);
//!   relayer's consumer is woken by the writers' throttled NOTIFY. relayer runs it twice:
//!   direct enqueue → consumer, and outbox → dispatcher → queue transport → consumer.
//!
//! Each run's window also sums the CPU time of the PostgreSQL backends serving this process
//! (`/proc`, see [`crate::cpu`]); divided by the messages delivered, that is PostgreSQL's
//! cost per message. The WAL writer, background writer and checkpointer are reported
//! apart: they are server-wide, and other sessions on a shared server add to them.
//!
//! Every ratio is relayer ÷ pgmq (above 1: relayer is faster), the median of the
//! interleaved rounds. The last line is `RESULT pgmq_e2e_ratio=<x> pgmq_drain_ratio=<x>
//! pgmq_send_ratio=<x> pgmq_send_batch_ratio=<x> relayer_pg_us_per_msg=<x>
//! pgmq_pg_us_per_msg=<x> relayer_outbox_pg_us_per_msg=<x>`, the CPU figures from the end-to-end runs
//! (relayer's direct path, and its outbox path).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgmq::PGMQueueExt;
use relayer_consumer::{Consumer, Handler, Subscription};
use relayer_core::{DispatcherOptions, NewMessage, TransportRegistry};
use relayer_dispatcher::Dispatcher;
use relayer_postgres::{
    OutboxWriter, PgNotifications, PgSource, QueueWriter, asynchronous_commit, connect_pool,
};
use relayer_queue::PgQueueTransport;
use tokio_util::sync::CancellationToken;

use crate::consumer::{Noop, QUEUE, drain_options, fill_queue, pump_drain, truncate_queue};
use crate::cpu::{PgCpu, PgCpuUsed};
use crate::rounds::{Spread, rounds};
use crate::scratch::{BenchResult, Scratch, WRITERS, application_name, body, connect};

/// Messages per transaction in the batch runs, and per read in the drains.
const BATCH: usize = 100;

/// The sizes of one round.
struct Sizes {
    /// Messages each writer sends one per transaction (send and end to end).
    per_writer: usize,
    /// Batches of [`BATCH`] each writer sends (send_batch).
    batches_per_writer: usize,
    /// Messages prefilled for the drains.
    prefill: usize,
}

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let sizes = if quick {
        Sizes { per_writer: 1_000, batches_per_writer: 20, prefill: 20_000 }
    } else {
        Sizes { per_writer: 3_000, batches_per_writer: 60, prefill: 60_000 }
    };
    let rounds = rounds(quick);
    let scratch = Scratch::new().await?;
    let queue = format!("bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let outcome = async {
        let pgmq = Pgmq::install(&scratch.config, &queue).await?;
        let measured = run_in(&scratch, &pgmq, &sizes, rounds).await;
        pgmq.ext.drop_queue(&queue).await?;
        measured
    }
    .await;
    scratch.drop_schema().await?;
    let results = outcome?;
    let Results { send, send_batch, drain, e2e, relayer_pg, outbox_pg, pgmq_pg } = results;
    println!(
        "RESULT pgmq_e2e_ratio={:.2} pgmq_drain_ratio={:.2} pgmq_send_ratio={:.2} pgmq_send_batch_ratio={:.2} \
         relayer_pg_us_per_msg={:.1} pgmq_pg_us_per_msg={:.1} relayer_outbox_pg_us_per_msg={:.1}",
        e2e.median(),
        drain.median(),
        send.median(),
        send_batch.median(),
        relayer_pg.median(),
        pgmq_pg.median(),
        outbox_pg.median()
    );
    Ok(())
}

/// The medians' series over the rounds: ratios relayer ÷ pgmq, and PostgreSQL µs per
/// message in the end-to-end runs.
struct Results {
    send: Spread,
    send_batch: Spread,
    drain: Spread,
    e2e: Spread,
    relayer_pg: Spread,
    outbox_pg: Spread,
    pgmq_pg: Spread,
}

/// One timed run: messages per second and PostgreSQL's CPU in its window.
struct Run {
    rate: f64,
    cpu: PgCpuUsed,
    messages: usize,
}

impl Run {
    fn us(&self) -> f64 {
        self.cpu.backend_us_per(self.messages)
    }

    fn describe(&self) -> String {
        format!(
            "{:>7.0} msg/s, PG {:>5.1} µs/msg (+{:.1} WAL/bg)",
            self.rate,
            self.us(),
            self.cpu.background_us_per(self.messages)
        )
    }
}

/// Runs `work` inside a CPU window; `work` returns its rate.
async fn measured<F: Future<Output = BenchResult<f64>>>(
    scratch: &Scratch,
    messages: usize,
    work: F,
) -> BenchResult<Run> {
    let window = PgCpu::start(&scratch.config).await?;
    let rate = work.await?;
    Ok(Run { rate, cpu: window.stop().await?, messages })
}

async fn run_in(scratch: &Scratch, pgmq: &Pgmq, sizes: &Sizes, rounds: usize) -> BenchResult<Results> {
    let e2e_messages = sizes.per_writer * WRITERS;
    let batch_messages = sizes.batches_per_writer * BATCH * WRITERS;
    println!(
        "peers benchmark: relayer and pgmq on one server, {rounds} interleaved rounds; {WRITERS} writers × {} \
         (1 message per transaction), {WRITERS} × {} batches of {BATCH}, drain of {} prefilled (reads of {BATCH})",
        sizes.per_writer, sizes.batches_per_writer, sizes.prefill
    );
    let mut results = Results {
        send: Spread::default(),
        send_batch: Spread::default(),
        drain: Spread::default(),
        e2e: Spread::default(),
        relayer_pg: Spread::default(),
        outbox_pg: Spread::default(),
        pgmq_pg: Spread::default(),
    };
    for round in 1..=rounds {
        pgmq.purge().await?;
        let pgmq_send = measured(scratch, e2e_messages, pgmq.send(sizes.per_writer, 1)).await?;
        truncate_queue(scratch).await?;
        let relayer_single =
            measured(scratch, e2e_messages, relayer_send(scratch, sizes.per_writer, 1)).await?;
        pgmq.purge().await?;
        let pgmq_batch =
            measured(scratch, batch_messages, pgmq.send(sizes.batches_per_writer, BATCH)).await?;
        truncate_queue(scratch).await?;
        let relayer_batch =
            measured(scratch, batch_messages, relayer_send(scratch, sizes.batches_per_writer, BATCH)).await?;

        pgmq.purge().await?;
        pgmq.fill(sizes.prefill).await?;
        let pgmq_drain = measured(scratch, sizes.prefill, pgmq.drain(sizes.prefill, None)).await?;
        truncate_queue(scratch).await?;
        fill_queue(scratch, i64::try_from(sizes.prefill)?).await?;
        let relayer_drain = measured(
            scratch,
            sizes.prefill,
            pump_drain(scratch, sizes.prefill, None, drain_options()?, Arc::new(Noop)),
        )
        .await?;

        pgmq.purge().await?;
        let pgmq_e2e =
            measured(scratch, e2e_messages, pgmq.drain(e2e_messages, Some(sizes.per_writer))).await?;
        truncate_queue(scratch).await?;
        let relayer_e2e = measured(
            scratch,
            e2e_messages,
            pump_drain(
                scratch,
                e2e_messages,
                Some((sizes.per_writer, relayer_postgres::DEFAULT_NOTIFY_INTERVAL)),
                drain_options()?,
                Arc::new(Noop),
            ),
        )
        .await?;
        truncate_queue(scratch).await?;
        let outbox_e2e =
            measured(scratch, e2e_messages, outbox_end_to_end(scratch, sizes.per_writer)).await?;
        truncate_queue(scratch).await?;

        println!("  round {round}:");
        for (what, pgmq_run, relayer_run) in [
            ("send (1/tx)", &pgmq_send, &relayer_single),
            ("send_batch", &pgmq_batch, &relayer_batch),
            ("drain", &pgmq_drain, &relayer_drain),
            ("end to end", &pgmq_e2e, &relayer_e2e),
        ] {
            println!(
                "    {what:<12} pgmq {}   relayer {}   relayer/pgmq {:.2}",
                pgmq_run.describe(),
                relayer_run.describe(),
                relayer_run.rate / pgmq_run.rate
            );
        }
        println!(
            "    {:<12} outbox → queue transport → consumer {}   relayer/pgmq {:.2}",
            "end to end",
            outbox_e2e.describe(),
            outbox_e2e.rate / pgmq_e2e.rate
        );
        results.send.push(relayer_single.rate / pgmq_send.rate);
        results.send_batch.push(relayer_batch.rate / pgmq_batch.rate);
        results.drain.push(relayer_drain.rate / pgmq_drain.rate);
        results.e2e.push(relayer_e2e.rate / pgmq_e2e.rate);
        results.relayer_pg.push(relayer_e2e.us());
        results.outbox_pg.push(outbox_e2e.us());
        results.pgmq_pg.push(pgmq_e2e.us());
    }
    println!("  relayer ÷ pgmq over {rounds} rounds:");
    println!("    send (1/tx)  {}", results.send);
    println!("    send_batch   {}", results.send_batch);
    println!("    drain        {}", results.drain);
    println!("    end to end   {}", results.e2e);
    println!("  PostgreSQL backend CPU per message, end to end (µs):");
    println!("    relayer direct → consumer              {}", results.relayer_pg);
    println!("    relayer outbox → queue → consumer      {}", results.outbox_pg);
    println!("    pgmq send → read + delete              {}", results.pgmq_pg);
    Ok(results)
}

/// Four writers enqueueing `transactions` transactions of `per_tx` messages each straight
/// into the queue; returns messages per second.
async fn relayer_send(scratch: &Scratch, transactions: usize, per_tx: usize) -> BenchResult<f64> {
    let writer = QueueWriter::new(&scratch.namespace, "queue");
    let mut clients = Vec::with_capacity(WRITERS);
    for _ in 0..WRITERS {
        clients.push(connect(&scratch.config).await?);
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(w, client)| {
            let writer = writer.clone();
            tokio::spawn(async move {
                for t in 0..transactions {
                    let messages: Vec<NewMessage> = (0..per_tx)
                        .map(|i| NewMessage::new("queue", QUEUE, body((w * transactions + t) * per_tx + i)))
                        .collect();
                    writer.enqueue(&client, &messages).await?;
                }
                BenchResult::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(per_second(WRITERS * transactions * per_tx, started.elapsed()))
}

/// Four writers enqueueing one message per transaction into the outbox (NOTIFY on), a
/// dispatcher sending them through the queue transport, and a consumer handling them;
/// returns messages per second, until the consumer has acked every one.
async fn outbox_end_to_end(scratch: &Scratch, per_writer: usize) -> BenchResult<f64> {
    let total = per_writer * WRITERS;
    let queue_pool = connect_pool(scratch.config.clone(), 2).await?;
    let registry = Arc::new(
        TransportRegistry::new().with(Arc::new(PgQueueTransport::new(queue_pool, &scratch.namespace)))?,
    );
    let dispatch_pool = connect_pool(asynchronous_commit(scratch.config.clone()), 3).await?;
    let writer = OutboxWriter::for_registry(&scratch.namespace, &registry);
    let source = PgSource::new(dispatch_pool, &scratch.namespace).with_transports(registry.names());
    let dispatcher =
        Dispatcher::new(source, scratch.namespace.clone(), DispatcherOptions::default(), registry)?
            .listening(PgNotifications::outbox(scratch.config.clone(), &scratch.namespace));
    let consumer = Consumer::new(
        PgNotifications::queue(scratch.config.clone(), &scratch.namespace),
        PgSource::new(connect_pool(scratch.config.clone(), 3).await?, &scratch.namespace),
        scratch.namespace.clone(),
        Subscription::new(QUEUE, drain_options()?)?,
        Arc::new(Noop) as Arc<dyn Handler>,
    );
    let stats = consumer.stats();
    let shutdown = CancellationToken::new();
    let _stop_on_error = shutdown.clone().drop_guard();
    let dispatching = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await }
    });
    let consuming = tokio::spawn(consumer.run(shutdown.clone()));
    let mut clients = Vec::with_capacity(WRITERS);
    for _ in 0..WRITERS {
        clients.push(connect(&scratch.config).await?);
    }
    // Both LISTEN sessions registered before the clock starts, as in the direct run.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let writer = Arc::new(writer);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(w, client)| {
            let writer = Arc::clone(&writer);
            tokio::spawn(async move {
                for n in 0..per_writer {
                    let message = NewMessage::new("queue", QUEUE, body(w * per_writer + n));
                    writer.enqueue(&client, &[message]).await?;
                }
                BenchResult::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while usize::try_from(stats.snapshot().acked)? < total {
        if Instant::now() > deadline {
            return Err(
                format!("only {} of {total} messages handled after 120 s", stats.snapshot().acked).into()
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = per_second(total, started.elapsed());
    shutdown.cancel();
    dispatching.await??;
    consuming.await??;
    Ok(rate)
}

/// pgmq, installed from the crate's embedded SQL, and this run's queue.
struct Pgmq {
    ext: PGMQueueExt,
    queue: String,
    /// For the untimed VACUUMs.
    config: tokio_postgres::Config,
}

impl Pgmq {
    /// Installs (or upgrades to) the crate's pgmq SQL and creates `queue`.
    async fn install(config: &tokio_postgres::Config, queue: &str) -> BenchResult<Self> {
        // Writers, the reader and one spare: connections tagged like every other of this
        // run, so their backends' CPU is counted.
        let ext = PGMQueueExt::new_with_pool(sqlx_pool(config, u32::try_from(WRITERS + 2)?).await?).await;
        // Concurrent benchmark runs would race on the install: one at a time.
        let lock = connect(config).await?;
        lock.batch_execute("SELECT pg_advisory_lock(hashtext('relayer-bench pgmq install'))").await?;
        let installed = ext.install_sql_from_embedded().await;
        lock.batch_execute("SELECT pg_advisory_unlock(hashtext('relayer-bench pgmq install'))").await?;
        installed?;
        ext.create(queue).await?;
        Ok(Pgmq { ext, queue: queue.to_owned(), config: config.clone() })
    }

    /// Empties the queue (untimed) and vacuums its table.
    async fn purge(&self) -> BenchResult<()> {
        self.ext.purge_queue(&self.queue).await?;
        self.vacuum().await
    }

    async fn vacuum(&self) -> BenchResult<()> {
        let client = connect(&self.config).await?;
        client.batch_execute(&format!("VACUUM ANALYZE pgmq.\"q_{}\"", self.queue)).await?;
        Ok(())
    }

    /// `count` messages sent in batches of 1,000 (untimed).
    async fn fill(&self, count: usize) -> BenchResult<()> {
        for start in (0..count).step_by(1000) {
            let messages: Vec<serde_json::Value> = (start..(start + 1000).min(count)).map(message).collect();
            self.ext.send_batch(&self.queue, &messages).await?;
        }
        self.vacuum().await
    }

    /// Four writers, each sending `transactions` transactions of `per_tx` messages (`send`
    /// for one, `send_batch` for more), each on its own connection; returns messages per second.
    async fn send(&self, transactions: usize, per_tx: usize) -> BenchResult<f64> {
        let mut connections = Vec::with_capacity(WRITERS);
        for _ in 0..WRITERS {
            connections.push(self.ext.connection.acquire().await?);
        }
        let started = Instant::now();
        let writers = connections.into_iter().enumerate().map(|(w, mut connection)| async move {
            for t in 0..transactions {
                let first = (w * transactions + t) * per_tx;
                if per_tx == 1 {
                    self.ext.send_with_cxn(&self.queue, &message(first), &mut *connection).await?;
                } else {
                    let messages: Vec<serde_json::Value> = (first..first + per_tx).map(message).collect();
                    self.ext.send_batch_with_cxn(&self.queue, &messages, &mut *connection).await?;
                }
            }
            BenchResult::Ok(())
        });
        for outcome in futures_util::future::join_all(writers).await {
            outcome?;
        }
        Ok(per_second(WRITERS * transactions * per_tx, started.elapsed()))
    }

    /// One reader taking batches of [`BATCH`] (visibility timeout 30 s) and deleting what
    /// it read, until `total` messages are gone; with `writers`, four writers send that
    /// many each meanwhile, one per transaction. An empty read sleeps 1 ms: pgmq's reader
    /// polls. Returns messages per second.
    async fn drain(&self, total: usize, writers: Option<usize>) -> BenchResult<f64> {
        let mut reader = self.ext.connection.acquire().await?;
        let mut connections = Vec::new();
        for _ in 0..writers.map_or(0, |_| WRITERS) {
            connections.push(self.ext.connection.acquire().await?);
        }
        let empty_reads = AtomicUsize::new(0);
        let started = Instant::now();
        let writing = connections.into_iter().enumerate().map(|(w, mut connection)| async move {
            let per_writer = writers.unwrap_or(0);
            for n in 0..per_writer {
                self.ext.send_with_cxn(&self.queue, &message(w * per_writer + n), &mut *connection).await?;
            }
            BenchResult::Ok(())
        });
        let reading = async {
            let mut handled = 0;
            while handled < total {
                let read: Vec<pgmq::Message<serde_json::Value>> = self
                    .ext
                    .read_batch_with_cxn(&self.queue, 30, i32::try_from(BATCH)?, &mut *reader)
                    .await?;
                if read.is_empty() {
                    empty_reads.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let ids: Vec<i64> = read.iter().map(|m| m.msg_id).collect();
                handled += self.ext.delete_batch_with_cxn(&self.queue, &ids, &mut *reader).await?;
            }
            BenchResult::Ok(())
        };
        let (written, read) = tokio::join!(futures_util::future::join_all(writing), reading);
        read?;
        for outcome in written {
            outcome?;
        }
        Ok(per_second(total, started.elapsed()))
    }
}

/// pgmq's message: the benchmark body as JSON (pgmq stores `jsonb`).
fn message(n: usize) -> serde_json::Value {
    serde_json::json!({ "order": n, "payload": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" })
}

/// A sqlx pool of `size` on the benchmark database, tagged with this run's
/// `application_name` (pgmq's own URL constructor drops it, and insists on a password).
async fn sqlx_pool(config: &tokio_postgres::Config, size: u32) -> BenchResult<sqlx::PgPool> {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => return Err("the peers benchmark needs a TCP host in DATABASE_URL (for pgmq's sqlx pool)".into()),
    };
    let mut options = sqlx::postgres::PgConnectOptions::new()
        .host(&host)
        .port(config.get_ports().first().copied().unwrap_or(5432))
        .username(config.get_user().unwrap_or("postgres"))
        .database(config.get_dbname().or(config.get_user()).unwrap_or("postgres"))
        .application_name(&application_name());
    if let Some(password) = config.get_password() {
        options = options.password(std::str::from_utf8(password)?);
    }
    Ok(sqlx::postgres::PgPoolOptions::new().max_connections(size).connect_with(options).await?)
}

fn per_second(count: usize, elapsed: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let count = count as f64;
    count / elapsed.as_secs_f64()
}
