//! `cargo xtask bench brokers [--quick]`: outbox → broker throughput of the NATS JetStream
//! and RabbitMQ transports against a raw publish loop to the same broker, in one run.
//!
//! - **raw**: `PUBLISHERS` loops publish `messages` messages straight to the broker in
//!   batches of `BATCH` — every message of a batch published, then every ack (JetStream)
//!   or publisher confirm (RabbitMQ, persistent and mandatory) awaited together — with the
//!   same message id and creation-context header relayer sends. No database.
//! - **relayer**: a [`Dispatcher`] with `PUBLISHERS` unordered loops and batches of
//!   `BATCH` sends the same number of messages through the transport (publishing and
//!   awaiting acks the same way) and deletes their rows. The clock stops when the outbox
//!   is empty.
//!
//! Both clocks time the steady work only. The raw run connects and opens its channels
//! before its clock starts; the relayer run likewise finishes starting before its clock:
//! the dispatcher checks the schema, its pool's connections are opened, a warm-up round
//! of one batch per loop goes through the whole path (opening the transport's connection
//! and channels, preparing the statements) and its LISTEN session is registered. Then the
//! timed rows are written in one transaction, so they become claimable all at once at
//! its commit — whose notification wakes the loops — and the clock starts as the commit
//! returns. Writing the rows is not timed (the raw run has no such step); the loops'
//! linger after the notification, every claim, send and completion are. Quick runs move
//! enough messages (`QUICK_MESSAGES`) to last a second or more against the fastest broker.
//!
//! A third run per round sends through a transport that accepts at once: the dispatch
//! path's own ceiling on this database, which bounds the relayer run whatever the broker.
//! The ratio relayer/raw (the median over at least 5 interleaved rounds, printed with its
//! min–max) is what the outbox costs on top of the broker.
//!
//! Each timed run also measures CPU from `/proc` (see [`crate::cpu`]): PostgreSQL's
//! backends serving this process, nats-server, and this process (the publishing client or
//! the dispatcher). From them each round computes the **2-core bound** (see [`compare`]),
//! and `nats_bound_ratio` is relayer ÷ that bound, the median over the rounds.
//!
//! The last line is `RESULT nats_ratio=<x> nats_bound_ratio=<x> nats_pg_us_per_msg=<x>
//! rabbitmq_ratio=<x>`; a broker that does not answer is reported as `skipped` there.
//!
//! Knobs: `RELAYER_BENCH_BATCH`, `RELAYER_BENCH_PUBLISHERS`; `RELAYER_BENCH_ONLY=nats` or
//! `=rabbitmq` runs one broker (the other reports `not_run`); `RELAYER_BENCH_WINDOWS=1`
//! prints each timed run's window for a system-wide profile (see [`report_window`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use relayer_core::context_headers::CREATED_AT;
use relayer_core::{
    DispatcherOptions, Envelope, NewMessage, SendOutcome, Transport, TransportError, TransportRegistry,
    async_trait,
};
use relayer_dispatcher::Dispatcher;
use relayer_nats::async_nats::{self, jetstream};
use relayer_nats::{NatsOptions, NatsTransport};
use relayer_rabbitmq::lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use relayer_rabbitmq::lapin::types::{AMQPValue, FieldTable, LongString};
use relayer_rabbitmq::lapin::{BasicProperties, Connection, ConnectionProperties};
use relayer_rabbitmq::{RabbitMqOptions, RabbitMqTransport};
use tokio_util::sync::CancellationToken;

use crate::cpu::{PgCpu, PgCpuUsed, ProcessCpu};
use crate::rounds::Spread;
use crate::scratch::{BenchResult, Scratch, body, connect, report_window};

/// Messages per batch, raw and relayer alike (the dispatcher's default batch size);
/// `RELAYER_BENCH_BATCH` overrides it.
static BATCH: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| knob("RELAYER_BENCH_BATCH", 100));
/// Concurrent publishers: the dispatcher's default unordered loops;
/// `RELAYER_BENCH_PUBLISHERS` overrides it.
static PUBLISHERS: std::sync::LazyLock<usize> =
    std::sync::LazyLock::new(|| knob("RELAYER_BENCH_PUBLISHERS", 2));

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(default)
}

/// Messages per run: enough that a quick run lasts about a second or more against the
/// fastest broker here (raw JetStream, ~20–40k msg/s), so what is left of fixed costs
/// weighs little.
const QUICK_MESSAGES: usize = 20_000;
const FULL_MESSAGES: usize = 60_000;

const NATS: &str = "127.0.0.1:4222";
const RABBITMQ: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let messages = if quick { QUICK_MESSAGES } else { FULL_MESSAGES };
    let rounds = crate::rounds::rounds(quick);
    println!(
        "brokers benchmark: {messages} messages per run, batches of {}, {} publishers, \
         median of {rounds} interleaved rounds",
        *BATCH, *PUBLISHERS
    );
    let only = std::env::var("RELAYER_BENCH_ONLY").ok();
    if let Some(only) = only.as_deref().filter(|only| !matches!(*only, "nats" | "rabbitmq")) {
        return Err(format!("RELAYER_BENCH_ONLY is `{only}`; it names one broker: nats or rabbitmq").into());
    }
    let wanted = |broker: &str| only.as_deref().is_none_or(|only| only == broker);
    let scratch = Scratch::new().await?;
    let (nats, nats_bound, nats_pg) = if !wanted("nats") {
        ("not_run".to_owned(), "not_run".to_owned(), "not_run".to_owned())
    } else {
        match nats_bench(&scratch, messages, rounds).await {
            Ok(compared) => (
                format!("{:.2}", compared.ratio.median()),
                format!("{:.2}", compared.bound_ratio.median()),
                format!("{:.1}", compared.pg_us.median()),
            ),
            Err(error) => {
                let skipped = report_skip("NATS", &*error);
                (skipped.clone(), skipped.clone(), skipped)
            }
        }
    };
    let rabbitmq = if !wanted("rabbitmq") {
        "not_run".to_owned()
    } else {
        match rabbitmq_bench(&scratch, messages, rounds).await {
            Ok(compared) => format!("{:.2}", compared.ratio.median()),
            Err(error) => report_skip("RabbitMQ", &*error),
        }
    };
    scratch.drop_schema().await?;
    println!(
        "RESULT nats_ratio={nats} nats_bound_ratio={nats_bound} nats_pg_us_per_msg={nats_pg} rabbitmq_ratio={rabbitmq}"
    );
    Ok(())
}

fn report_skip(broker: &str, error: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    eprintln!("  {broker}: skipped: {}", relayer_core::error_chain(error));
    "skipped".to_owned()
}

/// Runs `rounds` rounds of a raw run, a relayer run and a relayer run through a transport
/// that accepts at once (the dispatch path's own ceiling on this database); prints each
/// round, then the median of the per-round ratios relayer/raw with their range.
/// Back-to-back runs share the machine's momentary load, so their ratio is steadier than
/// either rate.
///
/// Each round also measures the CPU each message costs (see [`Measured`]) and from it the
/// round's **2-core bound**: the rate two cores reach if every message costs what
/// PostgreSQL spends in the relayer run plus what the broker and the publishing client
/// spend in the raw run, and no core is ever idle — `2 s ÷ (PostgreSQL + broker + client
/// µs per message)`. The bound ratio is relayer ÷ that bound: how much of what this
/// machine allows the dispatcher reaches.
///
/// `empty` empties the stream or queue (untimed) before each broker run, so every run
/// publishes into an empty one, whatever the runs before it left there; a short pause
/// after it lets the broker finish deleting what it purged before a clock starts.
async fn compare<Empty, EmptyFut, Raw, RawFut, Relay, RelayFut>(
    broker: &str,
    scratch: &Scratch,
    messages: usize,
    rounds: usize,
    mut empty: Empty,
    mut raw: Raw,
    mut relay: Relay,
) -> BenchResult<Compared>
where
    Empty: FnMut() -> EmptyFut,
    EmptyFut: Future<Output = BenchResult<()>>,
    Raw: FnMut() -> RawFut,
    RawFut: Future<Output = BenchResult<Measured>>,
    Relay: FnMut() -> RelayFut,
    RelayFut: Future<Output = BenchResult<Measured>>,
{
    let mut compared = Compared::default();
    for round in 1..=rounds {
        empty().await?;
        tokio::time::sleep(PURGE_SETTLE).await;
        let raw = raw().await?;
        empty().await?;
        tokio::time::sleep(PURGE_SETTLE).await;
        let relayer = relay().await?;
        let ceiling = relayer_run(scratch, Arc::new(AcceptAll), "accept-all", "orders", messages).await?;
        let per = |seconds: f64| seconds * 1e6 / f64::from(u32::try_from(messages).unwrap_or(u32::MAX));
        let (pg, pg_background) = (per(relayer.pg.backends), per(relayer.pg.background));
        let (broker_raw, client_raw) = (per(raw.broker), per(raw.client));
        let bound = 2e6 / (pg + broker_raw + client_raw).max(1e-9);
        println!(
            "  {broker:<8} round {round}: raw {:>8.0} msg/s   relayer {:>8.0} msg/s   ratio {:.2}   \
             (dispatch through a transport that accepts at once: {:>8.0} msg/s)",
            raw.rate,
            relayer.rate,
            relayer.rate / raw.rate,
            ceiling.rate
        );
        println!(
            "  {broker:<8} round {round}: CPU µs/msg: PostgreSQL backends {pg:.1} (WAL/bg writer, checkpointer \
             {pg_background:.1}; accept-all run {:.1})   broker raw/relayer {broker_raw:.1}/{:.1}   \
             client raw/relayer {client_raw:.1}/{:.1}   2-core bound {bound:>8.0} msg/s   relayer/bound {:.2}",
            per(ceiling.pg.backends),
            per(relayer.broker),
            per(relayer.client),
            relayer.rate / bound
        );
        compared.ratio.push(relayer.rate / raw.rate);
        compared.bound_ratio.push(relayer.rate / bound);
        compared.pg_us.push(pg);
    }
    println!(
        "  {broker:<8}: ratio {}   relayer/bound {}   PostgreSQL µs/msg {}",
        compared.ratio, compared.bound_ratio, compared.pg_us
    );
    Ok(compared)
}

/// One timed run: its rate and the CPU seconds spent in its window.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    rate: f64,
    /// PostgreSQL's (zero in a raw run, which uses no database).
    pg: PgCpuUsed,
    /// The broker's (nats-server; zero for RabbitMQ, whose Erlang VM is not looked for).
    broker: f64,
    /// This benchmark process's: the publishing client, or the dispatcher.
    client: f64,
}

/// The CPU of a timed window: PostgreSQL (for relayer runs), nats-server, this process.
struct Window {
    pg: Option<PgCpu>,
    broker: Option<ProcessCpu>,
    client: ProcessCpu,
}

impl Window {
    async fn start(database: Option<&tokio_postgres::Config>) -> BenchResult<Self> {
        let pg = match database {
            Some(config) => Some(PgCpu::start(config).await?),
            None => None,
        };
        Ok(Window { pg, broker: ProcessCpu::nats_server(), client: ProcessCpu::this_process() })
    }

    async fn stop(self, rate: f64) -> BenchResult<Measured> {
        let (broker, client) = (self.broker.as_ref().map_or(0.0, ProcessCpu::seconds), self.client.seconds());
        let pg = match self.pg {
            Some(pg) => pg.stop().await?,
            None => PgCpuUsed::default(),
        };
        Ok(Measured { rate, pg, broker, client })
    }
}

/// What [`compare`] measured over its rounds.
#[derive(Default)]
struct Compared {
    ratio: Spread,
    bound_ratio: Spread,
    pg_us: Spread,
}

/// The pause after emptying the stream or queue: both brokers delete purged messages
/// from their files in the background.
const PURGE_SETTLE: Duration = Duration::from_millis(500);

/// Accepts every message at once: what dispatch costs without a broker.
struct AcceptAll;

#[async_trait]
impl Transport for AcceptAll {
    fn name(&self) -> &str {
        "accept-all"
    }
    fn batch_limit(&self) -> std::num::NonZeroUsize {
        std::num::NonZeroUsize::MAX
    }
    async fn send(&self, _: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        Ok(vec![SendOutcome::Accepted; batch.len()])
    }
}

// NATS JetStream.

async fn nats_bench(scratch: &Scratch, messages: usize, rounds: usize) -> BenchResult<Compared> {
    let client = async_nats::connect(NATS).await?;
    let context = jetstream::new(client);
    let stream = scratch.namespace.schema().to_owned();
    context
        .create_stream(jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec![format!("{stream}.>")],
            ..Default::default()
        })
        .await?;
    let subject = format!("{stream}.orders");
    let outcome = compare(
        "NATS",
        scratch,
        messages,
        rounds,
        || async {
            context.get_stream(&stream).await?.purge().await?;
            Ok(())
        },
        || nats_raw(&context, &subject, messages),
        || async {
            // The transport's batch limit is the run's batch, so both sides wait for the
            // same number of acks per round trip.
            let options = NatsOptions::default().with_batch_limit(batch_limit());
            let transport = NatsTransport::connect(NATS, options).await?;
            relayer_run(scratch, Arc::new(transport), "nats", &subject, messages).await
        },
    )
    .await;
    context.delete_stream(&stream).await?;
    outcome
}

async fn nats_raw(context: &jetstream::Context, subject: &str, messages: usize) -> BenchResult<Measured> {
    let window = Window::start(None).await?;
    let started = Instant::now();
    let publishers = (0..*PUBLISHERS).map(|publisher| async move {
        let share = messages / *PUBLISHERS;
        for start in (0..share).step_by(*BATCH) {
            let mut acks = Vec::with_capacity(*BATCH);
            for n in start..(start + *BATCH).min(share) {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(CREATED_AT, "2026-12-03T00:00:00.000000Z");
                let message = jetstream::message::PublishMessage::build()
                    .payload(body(publisher * messages + n).into())
                    .headers(headers)
                    .message_id(uuid::Uuid::now_v7().to_string());
                acks.push(context.send_publish(subject.to_owned(), message).await?);
            }
            for ack in join_all(acks.into_iter().map(IntoFuture::into_future)).await {
                ack?;
            }
        }
        BenchResult::Ok(())
    });
    for outcome in join_all(publishers).await {
        outcome?;
    }
    report_window("raw nats", started);
    window.stop(rate(messages / *PUBLISHERS * *PUBLISHERS, started)).await
}

// RabbitMQ.

async fn rabbitmq_bench(scratch: &Scratch, messages: usize, rounds: usize) -> BenchResult<Compared> {
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current());
    let connection = Connection::connect(RABBITMQ, properties).await?;
    let admin = connection.create_channel().await?;
    let queue = scratch.namespace.schema().to_owned();
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    admin.queue_declare(&queue, durable, FieldTable::default()).await?;
    let outcome = compare(
        "RabbitMQ",
        scratch,
        messages,
        rounds,
        || async {
            admin.queue_purge(&queue, QueuePurgeOptions::default()).await?;
            Ok(())
        },
        || rabbitmq_raw(&connection, &queue, messages),
        || async {
            let options = RabbitMqOptions::default()
                .with_batch_limit(batch_limit())
                .with_channels(std::num::NonZeroUsize::new(*PUBLISHERS + 1).expect("not zero"));
            let transport = RabbitMqTransport::new(RABBITMQ, options)?;
            relayer_run(scratch, Arc::new(transport), "rabbitmq", &queue, messages).await
        },
    )
    .await;
    admin.queue_delete(&queue, QueueDeleteOptions::default()).await?;
    outcome
}

async fn rabbitmq_raw(connection: &Connection, queue: &str, messages: usize) -> BenchResult<Measured> {
    let mut channels = Vec::new();
    for _ in 0..*PUBLISHERS {
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        channels.push(channel);
    }
    let mandatory = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
    let window = Window::start(None).await?;
    let started = Instant::now();
    let publishers = channels.iter().enumerate().map(|(publisher, channel)| async move {
        let share = messages / *PUBLISHERS;
        for start in (0..share).step_by(*BATCH) {
            let mut confirms = Vec::with_capacity(*BATCH);
            for n in start..(start + *BATCH).min(share) {
                let mut headers = FieldTable::default();
                headers.insert(
                    CREATED_AT.into(),
                    AMQPValue::LongString(LongString::from("2026-12-03T00:00:00.000000Z")),
                );
                let properties = BasicProperties::default()
                    .with_message_id(uuid::Uuid::now_v7().to_string().into())
                    .with_delivery_mode(2)
                    .with_headers(headers);
                let payload = body(publisher * messages + n);
                confirms.push(channel.basic_publish("", queue, mandatory, &payload, properties).await?);
            }
            for confirm in join_all(confirms).await {
                if !confirm?.is_ack() {
                    return Err("the broker did not confirm a raw publish".into());
                }
            }
        }
        BenchResult::Ok(())
    });
    for outcome in join_all(publishers).await {
        outcome?;
    }
    report_window("raw rabbitmq", started);
    let measured = window.stop(rate(messages / *PUBLISHERS * *PUBLISHERS, started)).await?;
    for channel in channels {
        channel.close(200, "raw run done").await?;
    }
    Ok(measured)
}

// The relayer side, for either transport.

/// Counts the messages a transport accepted, so the run watches a counter rather than
/// polling `count(*)` (which would load the database the raw run does not use).
struct Counted {
    inner: Arc<dyn Transport>,
    accepted: Arc<AtomicUsize>,
}

#[async_trait]
impl Transport for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn batch_limit(&self) -> std::num::NonZeroUsize {
        self.inner.batch_limit()
    }
    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let outcomes = self.inner.send(destination, batch).await?;
        let accepted = outcomes.iter().filter(|outcome| **outcome == SendOutcome::Accepted).count();
        self.accepted.fetch_add(accepted, Ordering::Relaxed);
        Ok(outcomes)
    }
}

/// The run's batch as a transport batch limit.
fn batch_limit() -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(*BATCH).expect("the batch size is at least 1")
}

/// A dispatcher that has finished starting — schema checked, LISTEN registered, every
/// pooled connection open, the transport's connection and channels opened by a warm-up
/// round — is handed `messages` rows committed in one transaction; the clock runs from
/// that commit until the outbox is empty. Returns messages per second.
async fn relayer_run(
    scratch: &Scratch,
    transport: Arc<dyn Transport>,
    name: &str,
    destination: &str,
    messages: usize,
) -> BenchResult<Measured> {
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = Counted { inner: transport, accepted: Arc::clone(&accepted) };
    let registry = Arc::new(TransportRegistry::new().with(Arc::new(counted))?);
    let options = DispatcherOptions::builder()
        .batch_size(u32::try_from(*BATCH)?)
        .concurrency(u32::try_from(*PUBLISHERS)?)
        .build()?;
    let pool_size = *PUBLISHERS + 1;
    let pool = relayer_postgres::connect_pool(
        relayer_postgres::asynchronous_commit(scratch.config.clone()),
        u32::try_from(pool_size)?,
    )
    .await?;
    // Every pooled connection opened now, as the raw run's channels are before its clock.
    let held = join_all((0..pool_size).map(|_| pool.get())).await;
    for connection in held {
        drop(connection?);
    }
    // The writer notifies: the timed commit below is what wakes the dispatcher's loops.
    let writer = relayer_postgres::OutboxWriter::for_registry(&scratch.namespace, &registry);
    let source = relayer_postgres::PgSource::new(pool, &scratch.namespace).with_transports(registry.names());
    let dispatcher = Dispatcher::new(source, scratch.namespace.clone(), options, registry)?
        .listening(relayer_postgres::PgNotifications::outbox(scratch.config.clone(), &scratch.namespace));
    let mut client = connect(&scratch.config).await?;
    let outbox = scratch.namespace.table("outbox");
    // The previous run's dead rows gone, so neither run pays for the other's.
    client.batch_execute(&format!("VACUUM ANALYZE {outbox}")).await?;

    let shutdown = CancellationToken::new();
    let worker = tokio::spawn({
        let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
        async move { dispatcher.run(shutdown).await }
    });
    // A failed run stops its dispatcher too: left running, it would take the next runs' rows.
    let _stop_on_error = shutdown.clone().drop_guard();
    // Warm-up, untimed: one full batch per loop through the whole path, which opens the
    // transport's connection and channels (RabbitMQ opens them on first use) and prepares
    // every statement; and the LISTEN session registered, so the timed rows wake the loops.
    let warm_up = *PUBLISHERS * *BATCH;
    let rows: Vec<NewMessage> = (0..warm_up).map(|n| NewMessage::new(name, destination, body(n))).collect();
    writer.enqueue(&client, &rows).await?;
    drain(&client, &outbox, &accepted, warm_up).await?;
    wait_for_listen(&client, &relayer_postgres::notify_channel(&scratch.namespace)).await?;
    accepted.store(0, Ordering::Relaxed);

    // The timed rows become claimable all at once, at the commit that also wakes the loops;
    // the clock starts as the commit returns (the loops may hear it a fraction of a
    // millisecond earlier).
    let tx = client.transaction().await?;
    for start in (0..messages).step_by(1000) {
        let batch: Vec<NewMessage> = (start..(start + 1000).min(messages))
            .map(|n| NewMessage::new(name, destination, body(n)))
            .collect();
        writer.enqueue(&tx, &batch).await?;
    }
    // The CPU window opens just before the commit: the commit itself is in it, the
    // writing before it is not.
    let window = Window::start(Some(&scratch.config)).await?;
    tx.commit().await?;
    let started = Instant::now();
    drain(&client, &outbox, &accepted, messages).await?;
    report_window(&format!("relayer {name}"), started);
    let measured = window.stop(rate(messages, started)).await?;
    shutdown.cancel();
    worker.await??;
    Ok(measured)
}

/// Waits until the transport accepted `messages` and the outbox is empty.
async fn drain(
    client: &tokio_postgres::Client,
    outbox: &str,
    accepted: &AtomicUsize,
    messages: usize,
) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while accepted.load(Ordering::Relaxed) < messages {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {messages} messages sent after 300 s",
                accepted.load(Ordering::Relaxed)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Every message is at the broker; the run ends when their rows are gone too.
    loop {
        let left: i64 = client.query_one(&format!("SELECT count(*) FROM {outbox}"), &[]).await?.get(0);
        if left == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until a session of this database listens on `channel`.
async fn wait_for_listen(client: &tokio_postgres::Client, channel: &str) -> BenchResult<()> {
    let statement = format!("LISTEN \"{channel}\"");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listening: i64 = client
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE query = $1", &[&statement])
            .await?
            .get(0);
        if listening > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the dispatcher's LISTEN session did not start within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn rate(messages: usize, started: Instant) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let messages = messages as f64;
    messages / started.elapsed().as_secs_f64()
}
