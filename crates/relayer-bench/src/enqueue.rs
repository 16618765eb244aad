//! `enqueue`: what writing a message costs on the clients users hold, against the raw
//! limit of a prepared single-row `INSERT` into an equivalent table, in the same run.
//!
//! For each **writer** — a direct enqueue of one message ([`QueueWriter`]), an outbox write
//! of one and of ten messages ([`OutboxWriter`]), and of one by a writer without NOTIFY
//! (`outbox1q`: what the NOTIFY in every transaction costs), an inbox record ([`Inbox`]) — and each
//! **client kind** a user writes on:
//!
//! - `client`: a tokio-postgres `Client`, each call its own (autocommitted) transaction;
//! - `transaction`: a tokio-postgres `Transaction` (`BEGIN`, the write, `COMMIT`);
//! - `bb8`: a transaction on a connection borrowed from a bb8-postgres pool for each write;
//! - `sqlx`: an sqlx transaction on an sqlx `PgConnection` ([`SqlxQueueWriter`] and
//!   friends, whose statements sqlx prepares and caches per connection);
//! - `kept`: a transaction on a [`PgClient`] the caller keeps, its statements run through
//!   [`Prepared`] (the per-connection handle);
//!
//! [`WRITERS`] tasks write as fast as they can, each on its own connection, for a fixed
//! time; the raw side does the same with a prepared single-row `INSERT` (ten rows in one
//! prepared `INSERT … VALUES` for the write of ten) into a table made `LIKE` relayer's,
//! indexes included, in the same transaction shape (autocommit for `client`, `BEGIN` …
//! `COMMIT` for the others). Raw and relayer alternate over the rounds (which goes first
//! alternates too); each cell reports the medians of the rates and the median ratio with
//! its min–max.
//!
//! Before the throughput, **where the time goes**: one connection runs each writer's
//! statement back to back inside a transaction that is rolled back (no commit cost), sent
//! unnamed (parsed and planned each call) and prepared (only bound and executed). The
//! difference per call is what parsing and planning that statement costs.
//!
//! The last line is `RESULT enqueue_ratio_min=<min of all medians> <writer>_<kind>=<median
//! ratio> …`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bb8_postgres::PostgresConnectionManager;
use relayer_core::{MessageId, NewMessage};
use relayer_postgres::{
    Executor, Inbox, OutboxWriter, PgClient, Prepared, QueueWriter, StatementCache, StatementMode,
};
use relayer_sqlx::{SqlxInbox, SqlxQueueWriter, SqlxWriter};
use sqlx::Connection as _;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Statement};

use crate::scratch::{BenchResult, Scratch, WRITERS, body, connect};

/// One kind of write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    /// [`QueueWriter::enqueue`] of one message.
    Direct1,
    /// [`OutboxWriter::enqueue`] of one message.
    Outbox1,
    /// [`OutboxWriter::enqueue`] of ten messages in one call.
    Outbox10,
    /// [`OutboxWriter::enqueue`] of one message by a writer
    /// [`without_notify`](OutboxWriter::without_notify): what the NOTIFY costs.
    Outbox1Quiet,
    /// [`Inbox::record`] of one new message id.
    Inbox,
}

const ALL_WRITERS: [Writer; 5] =
    [Writer::Direct1, Writer::Outbox1, Writer::Outbox10, Writer::Outbox1Quiet, Writer::Inbox];

impl Writer {
    fn name(self) -> &'static str {
        match self {
            Writer::Direct1 => "direct1",
            Writer::Outbox1 => "outbox1",
            Writer::Outbox10 => "outbox10",
            Writer::Outbox1Quiet => "outbox1q",
            Writer::Inbox => "inbox",
        }
    }

    /// Messages one write carries.
    fn messages(self) -> usize {
        if self == Writer::Outbox10 { 10 } else { 1 }
    }
}

/// The client a write runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Client,
    Transaction,
    Bb8,
    Sqlx,
    Kept,
}

const ALL_KINDS: [Kind; 5] = [Kind::Client, Kind::Transaction, Kind::Bb8, Kind::Sqlx, Kind::Kept];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Transaction => "transaction",
            Kind::Bb8 => "bb8",
            Kind::Sqlx => "sqlx",
            Kind::Kept => "kept",
        }
    }
}

/// relayer's writers, shared by every task (clones of a [`QueueWriter`] share its NOTIFY
/// throttle, as a service's would).
struct Writers {
    queue: QueueWriter,
    outbox: OutboxWriter,
    quiet_outbox: OutboxWriter,
    inbox: Inbox,
    sqlx_queue: SqlxQueueWriter,
    sqlx_outbox: SqlxWriter,
    sqlx_quiet_outbox: SqlxWriter,
    sqlx_inbox: SqlxInbox,
}

/// The raw side's prepared inserts on one connection.
struct RawStatements {
    queue: Statement,
    outbox: Statement,
    outbox10: Statement,
    inbox: Statement,
}

/// One task's connection.
enum Conn {
    Raw(tokio_postgres::Client, RawStatements),
    Plain(tokio_postgres::Client),
    Pool(bb8::Pool<PostgresConnectionManager<NoTls>>),
    Sqlx(sqlx::PgConnection),
    Kept(PgClient),
}

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let scratch = Scratch::new().await?;
    let outcome = run_in(&scratch, quick).await;
    scratch.drop_schema().await?;
    outcome
}

async fn run_in(scratch: &Scratch, quick: bool) -> BenchResult<()> {
    let rounds = 5;
    let half = if quick { Duration::from_millis(600) } else { Duration::from_secs(2) };
    let namespace = &scratch.namespace;
    let setup = connect(&scratch.config).await?;
    let schema = namespace.quoted_schema();
    for (raw, table) in [("raw_queue", "queue"), ("raw_outbox", "outbox"), ("raw_inbox", "inbox")] {
        setup
            .batch_execute(&format!(
                "CREATE TABLE {schema}.\"{raw}\" (LIKE {} INCLUDING ALL)",
                namespace.table(table)
            ))
            .await?;
    }
    let writers = Arc::new(Writers {
        queue: QueueWriter::new(namespace, "queue"),
        outbox: OutboxWriter::new(namespace, ["queue"]),
        quiet_outbox: OutboxWriter::new(namespace, ["queue"]).without_notify(),
        inbox: Inbox::new(namespace),
        sqlx_queue: SqlxQueueWriter::new(namespace, "queue"),
        sqlx_outbox: SqlxWriter::new(namespace, ["queue"]),
        sqlx_quiet_outbox: SqlxWriter::from(OutboxWriter::new(namespace, ["queue"]).without_notify()),
        sqlx_inbox: SqlxInbox::new(namespace),
    });
    println!(
        "enqueue benchmark: {WRITERS} writers, {rounds} interleaved rounds of {} ms per side, namespace {namespace} \
         (a shared, noisy 2-core machine: compare ratios, not absolute rates)",
        half.as_millis()
    );

    println!("  where the time goes (one connection, back to back, rolled back: no commit):");
    for writer in ALL_WRITERS {
        let (unnamed, prepared) =
            plan_cost(scratch, &writers, writer, if quick { 300 } else { 1500 }).await?;
        println!(
            "    {:<9} unnamed {unnamed:>7.1} µs/call   prepared {prepared:>7.1} µs/call   parse+plan {:>6.1} µs",
            writer.name(),
            unnamed - prepared
        );
    }

    println!("  throughput, msg/s (median of {rounds}; ratio median and min–max):");
    let mut results = Vec::new();
    for writer in ALL_WRITERS {
        for kind in ALL_KINDS {
            truncate(scratch).await?;
            let cell = cell(scratch, &writers, writer, kind, rounds, half).await?;
            println!(
                "    {:<9} {:<12} raw {:>7.0}   relayer {:>7.0}   ratio {:.2} ({:.2}–{:.2})",
                writer.name(),
                kind.name(),
                cell.raw,
                cell.relayer,
                cell.ratio,
                cell.min,
                cell.max
            );
            results.push((format!("{}_{}", writer.name(), kind.name()), cell.ratio));
        }
    }
    let min = results.iter().map(|(_, ratio)| *ratio).fold(f64::INFINITY, f64::min);
    let cells: Vec<String> = results.iter().map(|(name, ratio)| format!("{name}={ratio:.2}")).collect();
    println!("RESULT enqueue_ratio_min={min:.2} {}", cells.join(" "));
    Ok(())
}

/// The medians of one cell.
struct Cell {
    raw: f64,
    relayer: f64,
    ratio: f64,
    min: f64,
    max: f64,
}

async fn cell(
    scratch: &Scratch,
    writers: &Arc<Writers>,
    writer: Writer,
    kind: Kind,
    rounds: usize,
    half: Duration,
) -> BenchResult<Cell> {
    let mut raw_conns = Vec::with_capacity(WRITERS);
    let mut relayer_conns = Vec::with_capacity(WRITERS);
    let pool = if kind == Kind::Bb8 {
        let manager = PostgresConnectionManager::new(scratch.config.clone(), NoTls);
        Some(bb8::Pool::builder().max_size(u32::try_from(WRITERS)?).build(manager).await?)
    } else {
        None
    };
    for _ in 0..WRITERS {
        let raw = connect(&scratch.config).await?;
        let statements = raw_statements(scratch, &raw).await?;
        raw_conns.push(Conn::Raw(raw, statements));
        relayer_conns.push(match kind {
            Kind::Client | Kind::Transaction => Conn::Plain(connect(&scratch.config).await?),
            Kind::Bb8 => Conn::Pool(pool.clone().ok_or("no pool")?),
            Kind::Sqlx => {
                Conn::Sqlx(sqlx::PgConnection::connect_with(&sqlx_options(&scratch.config)?).await?)
            }
            Kind::Kept => Conn::Kept(PgClient::new(connect(&scratch.config).await?)),
        });
    }
    let (mut raws, mut relayers, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (raw, relayer);
        if round % 2 == 0 {
            (raw_conns, raw) = timed(raw_conns, writers, writer, kind, half).await?;
            (relayer_conns, relayer) = timed(relayer_conns, writers, writer, kind, half).await?;
        } else {
            (relayer_conns, relayer) = timed(relayer_conns, writers, writer, kind, half).await?;
            (raw_conns, raw) = timed(raw_conns, writers, writer, kind, half).await?;
        }
        raws.push(raw);
        relayers.push(relayer);
        ratios.push(relayer / raw);
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    Ok(Cell { raw: median(raws), relayer: median(relayers), ratio: median(ratios), min, max })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    crate::scratch::percentile(&values, 0.5)
}

/// Runs `conns` (one task each) writing for `half` and returns them with the message rate.
async fn timed(
    conns: Vec<Conn>,
    writers: &Arc<Writers>,
    writer: Writer,
    kind: Kind,
    half: Duration,
) -> BenchResult<(Vec<Conn>, f64)> {
    let started = Instant::now();
    let deadline = started + half;
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(task, mut conn)| {
            let writers = Arc::clone(writers);
            tokio::spawn(async move {
                let mut written = 0usize;
                let mut n = task * 1_000_000_000;
                while Instant::now() < deadline {
                    write(&mut conn, &writers, writer, kind, n).await?;
                    n += writer.messages();
                    written += writer.messages();
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((conn, written))
            })
        })
        .collect();
    let mut conns = Vec::with_capacity(tasks.len());
    let mut written = 0;
    for task in tasks {
        let (conn, count) = task.await??;
        conns.push(conn);
        written += count;
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = written as f64 / started.elapsed().as_secs_f64();
    Ok((conns, rate))
}

/// One write of `writer` on `conn`, as `kind` does it; `n` numbers its messages.
async fn write(conn: &mut Conn, writers: &Writers, writer: Writer, kind: Kind, n: usize) -> BenchResult<()> {
    match conn {
        Conn::Raw(client, statements) => {
            if kind == Kind::Client {
                raw_write(&*client, statements, writer, n).await
            } else {
                let tx = client.transaction().await?;
                raw_write(&tx, statements, writer, n).await?;
                Ok(tx.commit().await?)
            }
        }
        Conn::Plain(client) => {
            if kind == Kind::Client {
                relayer_write(&*client, writers, writer, n).await
            } else {
                let tx = client.transaction().await?;
                relayer_write(&tx, writers, writer, n).await?;
                Ok(tx.commit().await?)
            }
        }
        Conn::Pool(pool) => {
            let mut connection = pool.get().await?;
            let tx = connection.transaction().await?;
            relayer_write(&tx, writers, writer, n).await?;
            Ok(tx.commit().await?)
        }
        Conn::Kept(client) => {
            let (client, statements) = client.split();
            let tx = client.transaction().await?;
            relayer_write(&Prepared::new(&tx, statements), writers, writer, n).await?;
            Ok(tx.commit().await?)
        }
        Conn::Sqlx(connection) => {
            let mut tx = connection.begin().await?;
            match writer {
                Writer::Direct1 => {
                    writers.sqlx_queue.enqueue(&mut *tx, &direct_messages(n, 1)).await?;
                }
                Writer::Outbox1 | Writer::Outbox10 => {
                    writers.sqlx_outbox.enqueue(&mut *tx, &outbox_messages(n, writer.messages())).await?;
                }
                Writer::Outbox1Quiet => {
                    writers.sqlx_quiet_outbox.enqueue(&mut *tx, &outbox_messages(n, 1)).await?;
                }
                Writer::Inbox => {
                    writers.sqlx_inbox.record(&mut *tx, "bench", MessageId::new()).await?;
                }
            }
            Ok(tx.commit().await?)
        }
    }
}

async fn relayer_write(
    client: &impl Executor,
    writers: &Writers,
    writer: Writer,
    n: usize,
) -> BenchResult<()> {
    match writer {
        Writer::Direct1 => {
            writers.queue.enqueue(client, &direct_messages(n, 1)).await?;
        }
        Writer::Outbox1 | Writer::Outbox10 => {
            writers.outbox.enqueue(client, &outbox_messages(n, writer.messages())).await?;
        }
        Writer::Outbox1Quiet => {
            writers.quiet_outbox.enqueue(client, &outbox_messages(n, 1)).await?;
        }
        Writer::Inbox => {
            writers.inbox.record(client, "bench", MessageId::new()).await?;
        }
    }
    Ok(())
}

fn direct_messages(n: usize, count: usize) -> Vec<NewMessage> {
    (n..n + count).map(|i| NewMessage::new("queue", "bench", body(i))).collect()
}

fn outbox_messages(n: usize, count: usize) -> Vec<NewMessage> {
    (n..n + count).map(|i| NewMessage::new("queue", "bench.created", body(i))).collect()
}

/// The raw side's inserts, prepared on `client`: the same columns relayer's writers fill,
/// into tables made `LIKE` relayer's (indexes included), reading back what they read back.
async fn raw_statements(scratch: &Scratch, client: &tokio_postgres::Client) -> BenchResult<RawStatements> {
    let schema = scratch.namespace.quoted_schema();
    let outbox_row = |i: usize| {
        let p = i * 5;
        format!("(${}, ${}, ${}, ${}, ${}, now())", p + 1, p + 2, p + 3, p + 4, p + 5)
    };
    let outbox_types: Vec<Type> =
        (0..10).flat_map(|_| [Type::UUID, Type::TEXT, Type::TEXT, Type::BYTEA, Type::JSONB]).collect();
    let outbox_insert = |rows: usize| {
        format!(
            "INSERT INTO {schema}.\"raw_outbox\" (message_id, transport, destination, body, headers, visible_at) \
             VALUES {} RETURNING seq, message_id",
            (0..rows).map(outbox_row).collect::<Vec<_>>().join(", ")
        )
    };
    Ok(RawStatements {
        queue: client
            .prepare_typed(
                &format!(
                    "INSERT INTO {schema}.\"raw_queue\" (message_id, queue, body, headers, visible_at) \
                     VALUES ($1, $2, $3, $4, now()) RETURNING seq, message_id"
                ),
                &[Type::UUID, Type::TEXT, Type::BYTEA, Type::JSONB],
            )
            .await?,
        outbox: client.prepare_typed(&outbox_insert(1), &outbox_types[..5]).await?,
        outbox10: client.prepare_typed(&outbox_insert(10), &outbox_types).await?,
        inbox: client
            .prepare_typed(
                &format!(
                    "INSERT INTO {schema}.\"raw_inbox\" (consumer, message_id) VALUES ($1, $2) \
                     ON CONFLICT DO NOTHING"
                ),
                &[Type::TEXT, Type::UUID],
            )
            .await?,
    })
}

async fn raw_write(
    client: &impl tokio_postgres::GenericClient,
    statements: &RawStatements,
    writer: Writer,
    n: usize,
) -> BenchResult<()> {
    let headers = serde_json::json!({});
    match writer {
        Writer::Direct1 => {
            let (id, body) = (uuid::Uuid::now_v7(), body(n));
            client.query(&statements.queue, &[&id, &"bench", &body, &headers]).await?;
        }
        Writer::Outbox1 | Writer::Outbox10 | Writer::Outbox1Quiet => {
            let count = writer.messages();
            let rows: Vec<(uuid::Uuid, Vec<u8>)> =
                (n..n + count).map(|i| (uuid::Uuid::now_v7(), body(i))).collect();
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(count * 5);
            for (id, body) in &rows {
                params.extend([id as &(dyn ToSql + Sync), &"queue", &"bench.created", body, &headers]);
            }
            let statement = if count == 1 { &statements.outbox } else { &statements.outbox10 };
            client.query(statement, &params).await?;
        }
        Writer::Inbox => {
            client.execute(&statements.inbox, &[&"bench", &uuid::Uuid::now_v7()]).await?;
        }
    }
    Ok(())
}

/// Microseconds per call of `writer`'s statement sent unnamed and prepared, back to back on
/// one connection inside a transaction rolled back at the end: the medians of three
/// alternations of `calls` calls each.
async fn plan_cost(
    scratch: &Scratch,
    writers: &Writers,
    writer: Writer,
    calls: usize,
) -> BenchResult<(f64, f64)> {
    let mut client = connect(&scratch.config).await?;
    let statements = StatementCache::new(StatementMode::Prepared);
    let (mut unnamed, mut prepared) = (Vec::new(), Vec::new());
    let tx = client.transaction().await?;
    // Warm both paths (the prepared one prepares here, once).
    relayer_write(&tx, writers, writer, 0).await?;
    relayer_write(&Prepared::new(&tx, &statements), writers, writer, 0).await?;
    for _ in 0..3 {
        let started = Instant::now();
        for n in 0..calls {
            relayer_write(&tx, writers, writer, n).await?;
        }
        unnamed.push(per_call_us(started, calls));
        let executor = Prepared::new(&tx, &statements);
        let started = Instant::now();
        for n in 0..calls {
            relayer_write(&executor, writers, writer, n).await?;
        }
        prepared.push(per_call_us(started, calls));
    }
    tx.rollback().await?;
    Ok((median(unnamed), median(prepared)))
}

#[allow(clippy::cast_precision_loss)]
fn per_call_us(started: Instant, calls: usize) -> f64 {
    started.elapsed().as_secs_f64() * 1e6 / calls as f64
}

async fn truncate(scratch: &Scratch) -> BenchResult<()> {
    let client = connect(&scratch.config).await?;
    let namespace = &scratch.namespace;
    let schema = namespace.quoted_schema();
    client
        .batch_execute(&format!(
            "TRUNCATE {}, {}, {}, {schema}.\"raw_queue\", {schema}.\"raw_outbox\", {schema}.\"raw_inbox\"",
            namespace.table("queue"),
            namespace.table("outbox"),
            namespace.table("inbox"),
        ))
        .await?;
    Ok(())
}

/// sqlx's settings for the server of `config`.
fn sqlx_options(config: &tokio_postgres::Config) -> BenchResult<sqlx::postgres::PgConnectOptions> {
    let mut options = sqlx::postgres::PgConnectOptions::new();
    if let Some(tokio_postgres::config::Host::Tcp(host)) = config.get_hosts().first() {
        options = options.host(host);
    }
    if let Some(port) = config.get_ports().first() {
        options = options.port(*port);
    }
    if let Some(user) = config.get_user() {
        options = options.username(user);
    }
    if let Some(password) = config.get_password() {
        options = options.password(std::str::from_utf8(password)?);
    }
    if let Some(database) = config.get_dbname() {
        options = options.database(database);
    }
    Ok(options.application_name("relayer-bench"))
}
