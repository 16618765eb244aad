//! `relayer demo`: the end-to-end run against a real PostgreSQL.
//!
//! Eight steps, each through relayer's own components, with progress lines and a summary:
//!
//! 1. drop and recreate the demo schema — only ever one an earlier demo created
//!    ([`scratch`]) — and apply relayer's schema;
//! 2. write `--messages` orders (2,000 by default) through a host's writer in transactions
//!    of 10 (some on ordered lanes, some scheduled 2 s ahead, one in 25 marked for review),
//!    plus 10 poison messages;
//! 3. dispatch them to relayer's PostgreSQL queue with a host running a dispatcher, showing
//!    the outbox drain and the queue fill; the poison messages land in the dead table;
//! 4. crash: a dispatcher in a child process (`relayer demo-child`) sends a fresh batch of
//!    payments (half as many as orders) through a slow, flaky transport and is killed with
//!    SIGKILL mid-way;
//! 5. recover: a host running only the recovery sweeper finds every row the dead process
//!    left behind and sends it; every payment must be in the queue, duplicates are counted
//!    (delivery is at least once);
//! 6. consume: a host runs relayer's consumer on both queues inside the inbox boundary
//!    ([`billing`]) and a redrive policy for their dead-letter queues. The handler rejects
//!    each order marked for review on its first delivery; the policy puts it back on its
//!    queue and the consumer hands it over again, to be accepted. The inbox skips the
//!    payments' duplicates;
//! 7. clean up: a host running retention cleanup with 1 s retentions deletes the inbox and
//!    dead rows;
//! 8. the summary, ending with one line `RESULT lost=<n> duplicates=<n> redriven=<n>`. The
//!    exit status is non-zero if any message was lost or a lane arrived out of order.

mod billing;
pub(crate) mod child;
pub(crate) mod console;
mod scratch;
mod transports;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayer::consumer::{Handling, InboxHandler, Subscription};
use relayer::core::Uuid;
use relayer::postgres::{OutboxWriter, migrate};
use relayer::{
    CleanupOptions, ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule,
    Delivery, DispatcherOptions, Namespace, NewMessage, Relayer, Retention, SweeperOptions,
};
use tokio_postgres::Client;

use self::billing::{Billing, CONSUMER, REVIEW_MARK};
use self::transports::{STRICT, Strict};
use crate::args::Args;
use crate::connect::{CliResult, connect};

/// Messages per writing transaction.
const PER_TX: usize = 10;
/// The most ordered lanes the lane messages spread over; every tenth order is on one.
const LANES: usize = 20;
/// Messages written to a destination the strict transport refuses for good.
const POISON: usize = 10;
/// The destination the strict transport refuses.
const REFUSED: &str = "no-such-topic";
/// One order in this many is marked for review: rejected once, then redriven.
const REVIEW_EVERY: usize = 25;
/// The queues the demo's messages are dispatched to, and consumed from.
const QUEUES: [&str; 2] = ["orders", "payments"];
/// How long a dead letter waits before the policy redrives it.
const REDRIVE_AFTER: Duration = Duration::from_secs(1);
/// The child is killed once this share of the payments is in the queue.
const KILL_AT_PERCENT: usize = 40;
/// How long the child's claims hold rows: after the crash they are free again this late.
pub(crate) const CHILD_CLAIM: Duration = Duration::from_secs(3);
/// The interval of progress lines.
const TICK: Duration = Duration::from_millis(250);
/// A step that takes longer has failed.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// How many messages the demo writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Size {
    /// Orders written in step 2 (besides the poison messages).
    orders: usize,
    /// Payments written for the crash in step 4.
    payments: usize,
    /// Ordered lanes: every lane gets at least one message.
    lanes: usize,
}

impl Size {
    /// `messages` orders (at least 100, so that every lane and every kind of message
    /// occurs), half as many payments.
    pub(crate) fn new(messages: u32) -> Self {
        let orders = usize::try_from(messages).unwrap_or(usize::MAX).max(100);
        Size { orders, payments: orders / 2, lanes: (orders / 10).min(LANES) }
    }

    /// Orders marked for review.
    fn marked(self) -> usize {
        (0..self.orders).filter(|n| is_marked(*n)).count()
    }

    /// Orders scheduled 2 s ahead.
    fn scheduled(self) -> usize {
        (0..self.orders).filter(|n| is_scheduled(*n)).count()
    }
}

fn is_marked(n: usize) -> bool {
    n % REVIEW_EVERY == 11
}

fn is_scheduled(n: usize) -> bool {
    n % 100 == 7
}

fn is_on_lane(n: usize) -> bool {
    n % 10 == 3
}

/// The database of the command line, with its TLS (`sslmode`, `sslrootcert`, `--ca-file`).
pub(crate) fn database_config(args: &Args) -> Result<relayer::postgres::Connector, String> {
    args.connector()
}

pub(crate) async fn run(args: &Args, size: Size) -> CliResult {
    let ns = &args.namespace;
    if ns.schema() == "public" {
        return Err("the demo drops and recreates its schema: choose a scratch schema with --schema".into());
    }
    let started = Instant::now();
    let config = database_config(args)?;
    let mut client = connect(args).await?;
    let tables = Tables::new(ns);
    println!("relayer demo on namespace {ns}");

    println!("[1/8] schema");
    let found = scratch::recreate(&mut client, ns).await?;
    let migrated = migrate(&mut client, ns).await?;
    println!(
        "      {} schema {}, applied relayer schema version {}",
        match found {
            scratch::Found::Nothing => "created",
            scratch::Found::EarlierDemo => "dropped the earlier demo's and recreated",
        },
        ns.schema(),
        migrated.to
    );

    println!("[2/8] write");
    // A host without workers (LIF-4): only its writer is used.
    let writing_host = Relayer::builder(config.clone(), ns.clone())
        .queue_transport()
        .transport(Arc::new(Strict { refused: REFUSED }))
        .start()
        .await?;
    let writer = writing_host.writer();
    writing_host.shutdown().await;
    let clock = Instant::now();
    let orders = write_orders(&mut client, &writer, size).await?;
    let poison = write_batch(&mut client, &writer, POISON, |n| {
        NewMessage::new(STRICT, REFUSED, format!("{{\"poison\":{n}}}").into_bytes())
    })
    .await?;
    println!(
        "      {} orders in {} transactions of {PER_TX} ({} on {} ordered lanes, {} scheduled 2 s ahead, {} \
         marked for review) and {POISON} poison messages for {STRICT:?}/{REFUSED:?}, in {:.1} s",
        thousands(size.orders),
        size.orders.div_ceil(PER_TX),
        (0..size.orders).filter(|n| is_on_lane(*n)).count(),
        size.lanes,
        size.scheduled(),
        size.marked(),
        clock.elapsed().as_secs_f64()
    );

    println!("[3/8] dispatch to the PostgreSQL queue (a host with a dispatcher, max_attempts 3)");
    let dispatching_host = Relayer::builder(config.clone(), ns.clone())
        .queue_transport()
        .transport(Arc::new(Strict { refused: REFUSED }))
        .dispatcher(
            DispatcherOptions::builder()
                .poll_interval(Duration::from_millis(100))
                .max_attempts(std::num::NonZeroU32::new(3))
                .build()?,
        )
        .start()
        .await?;
    let clock = Instant::now();
    watch(&client, &tables, "orders", clock, |s| s.outbox == 0).await?;
    dispatching_host.shutdown().await;
    let dispatch_seconds = clock.elapsed().as_secs_f64();
    let missing_orders = missing_from_queue(&client, &tables, &orders).await?;
    let dead =
        count(&client, &format!("SELECT count(*) FROM {} WHERE message_id = ANY($1)", tables.dead), &poison)
            .await?;
    let lanes_in_order = lanes_in_order(&client, &tables, size.lanes).await?;
    println!(
        "      {} of {} orders in the queue after {dispatch_seconds:.1} s; {dead} poison messages in the dead \
         table; every lane in order: {}",
        thousands(orders.len() - missing_orders),
        thousands(orders.len()),
        if lanes_in_order { "yes" } else { "NO" }
    );

    println!("[4/8] crash: a dispatcher in a child process, slow and flaky transport, killed with SIGKILL");
    let payments = write_batch(&mut client, &writer, size.payments, |n| {
        NewMessage::new("queue", "payments", format!("{{\"payment\":{n}}}").into_bytes())
    })
    .await?;
    println!("      wrote {} payments; starting `relayer demo-child`", thousands(size.payments));
    let crash = crash_child(args, &client, &tables, size.payments).await?;
    println!(
        "      SIGKILL after {} of {} payments reached the queue: the outbox still holds {} rows, {} of them \
         claimed by the dead process (its claims lapse {} s after they were taken)",
        thousands(crash.delivered),
        thousands(size.payments),
        thousands(crash.left.outbox),
        thousands(crash.left.claimed),
        CHILD_CLAIM.as_secs()
    );

    println!("[5/8] recover: a host running only the recovery sweeper (recovery_delay 1s)");
    let recovering_host = Relayer::builder(config.clone(), ns.clone())
        .queue_transport()
        .sweeper(
            SweeperOptions::builder()
                .recovery_delay(Duration::from_secs(1))
                .sweep_interval(TICK)
                .lease_duration(Duration::from_secs(5))
                .batch_size(200)
                .build()?,
        )
        .start()
        .await?;
    let clock = Instant::now();
    watch(&client, &tables, "payments", clock, |s| s.outbox == 0).await?;
    recovering_host.shutdown().await;
    let recover_seconds = clock.elapsed().as_secs_f64();
    let missing_payments = missing_from_queue(&client, &tables, &payments).await?;
    let duplicates = count(
        &client,
        &format!(
            "SELECT count(*) - count(DISTINCT message_id) FROM {} WHERE message_id = ANY($1)",
            tables.queue
        ),
        &payments,
    )
    .await?;
    println!(
        "      outbox empty after {recover_seconds:.1} s: {} of {} payments in the queue, {duplicates} of them \
         twice (sent before the crash, never completed, sent again: at least once)",
        thousands(payments.len() - missing_payments),
        thousands(payments.len())
    );

    println!(
        "[6/8] consume: relayer's consumer (inbox {CONSUMER:?}) on {QUEUES:?}; a redrive policy for their dead \
         letters (after {} s)",
        REDRIVE_AFTER.as_secs()
    );
    let written: Vec<Uuid> = orders.iter().chain(&payments).copied().collect();
    let consumed = consume(&config, ns, &client, &tables, written.len()).await?;
    let unhandled = not_in_inbox(&client, &tables, &written).await?;
    println!(
        "      {} messages handled in {:.1} s: {} rejected into a dead-letter queue on their first delivery, {} \
         redriven by the policy and then handled; the inbox skipped {} duplicate deliveries",
        thousands(consumed.handled),
        consumed.seconds,
        thousands(consumed.rejected),
        thousands(consumed.redriven),
        thousands(consumed.skipped)
    );

    println!("[7/8] clean up: inbox and dead rows past a 1 s retention");
    let before = snapshot(&client, &tables, "orders").await?;
    let cleaning_host = Relayer::builder(config.clone(), ns.clone())
        .cleanup(
            CleanupOptions::builder()
                .dead_retention(Retention::After(Duration::from_secs(1)))
                .inbox_retention(Retention::After(Duration::from_secs(1)))
                .cleanup_interval(TICK)
                .batch_size(500)
                .build()?,
        )
        .start()
        .await?;
    let clock = Instant::now();
    watch(&client, &tables, "orders", clock, |s| s.dead == 0 && s.inbox == 0).await?;
    cleaning_host.shutdown().await;
    let cleaned = before.dead + before.inbox;
    println!(
        "      deleted {} dead and {} inbox rows in {:.1} s; pending, scheduled and parked outbox rows are never \
         deleted by age",
        thousands(before.dead),
        thousands(before.inbox),
        clock.elapsed().as_secs_f64()
    );

    println!("[8/8] summary");
    let delivered = orders.len() - missing_orders + payments.len() - missing_payments;
    // A message is lost unless relayer's consumer handled it (or, for poison, it is in the
    // dead table); a message missing from the queue is never handled, so it counts here too.
    let lost = unhandled + (poison.len() - usize::try_from(dead).unwrap_or(0));
    let rows: [(&str, String, String); 11] = [
        (
            "written",
            thousands(written.len() + poison.len()),
            format!(
                "{} orders + {POISON} poison, {} payments",
                thousands(size.orders),
                thousands(size.payments)
            ),
        ),
        ("delivered", thousands(delivered), "distinct message ids in the queue".to_owned()),
        ("duplicates", thousands(duplicates), "resent after the crash (at least once)".to_owned()),
        (
            "recovered after crash",
            thousands(crash.left.outbox),
            "left behind by the killed process".to_owned(),
        ),
        ("rejected", thousands(consumed.rejected), "by the handler, into the dead-letter queue".to_owned()),
        ("redriven", thousands(consumed.redriven), "by the policy, then handled".to_owned()),
        (
            "handled",
            thousands(consumed.handled),
            format!("distinct messages, by relayer's consumer ({} duplicates skipped)", consumed.skipped),
        ),
        ("dead", thousands(dead), "poison: refused permanently by their transport".to_owned()),
        (
            "cleaned",
            thousands(cleaned),
            format!("{} dead + {} inbox rows", thousands(before.dead), thousands(before.inbox)),
        ),
        (
            "lost",
            thousands(lost),
            if lost == 0 { "none".to_owned() } else { "MESSAGES WERE LOST".to_owned() },
        ),
        ("elapsed", format!("{:.1} s", started.elapsed().as_secs_f64()), String::new()),
    ];
    for (name, value, note) in rows {
        let line = format!("      {name:<22}{value:>8}  {note}");
        println!("{}", line.trim_end());
    }
    println!("RESULT lost={lost} duplicates={duplicates} redriven={}", consumed.redriven);
    if lost > 0 || !lanes_in_order {
        return Err(format!("the demo failed: {lost} messages lost, lanes in order: {lanes_in_order}").into());
    }
    Ok(())
}

/// What step 6 counted.
struct Consumed {
    /// Distinct messages the handler accepted.
    handled: u64,
    /// Messages the handler rejected into a dead-letter queue.
    rejected: usize,
    /// Rejected messages that came back through the policy and were accepted.
    redriven: u64,
    /// Deliveries the inbox acked without calling the handler (duplicates).
    skipped: u64,
    seconds: f64,
}

/// Runs relayer's consumer on [`QUEUES`] with the [`Billing`] handler and a redrive policy,
/// until `expected` messages are in the inbox and the queues and their dead-letter queues
/// are empty.
async fn consume(
    config: &relayer::postgres::Connector,
    ns: &Namespace,
    client: &Client,
    tables: &Tables,
    expected: usize,
) -> Result<Consumed, Box<dyn std::error::Error + Send + Sync>> {
    let billing = Arc::new(Billing::default());
    let options = ConsumerOptions::builder().poll_interval(Duration::from_millis(200)).build()?;
    // Redrive once a dead letter has waited REDRIVE_AFTER; give up on messages older than
    // an hour (none here).
    let redrive = DeadLetterPolicy::redrive(REDRIVE_AFTER, Duration::from_secs(3_600))?;
    let mut builder = Relayer::builder(config.clone(), ns.clone());
    let mut rules = Vec::new();
    let mut dead_letter_queues = Vec::new();
    for queue in QUEUES {
        let subscription = Subscription::new(queue, options.clone())?.with_inbox_consumer(CONSUMER)?;
        rules.push(DeadLetterRule::queue(queue, subscription.dead_letter_queue(), redrive));
        dead_letter_queues.push(subscription.dead_letter_queue().to_owned());
        let handler: Arc<dyn InboxHandler<relayer::postgres::PgSession>> = Arc::<Billing>::clone(&billing);
        builder = builder.consumer(subscription, Handling::Inbox(handler));
    }
    let host = builder
        .dead_letters(DeadLetterPolicies::new(rules)?, DeadLetterOptions::builder().interval(TICK).build()?)
        .start()
        .await?;
    let sql = format!(
        "SELECT (SELECT count(*) FROM {queue} WHERE queue = ANY($1)), \
                (SELECT count(*) FROM {queue} WHERE queue = ANY($2)), \
                (SELECT count(*) FROM {inbox} WHERE consumer = $3)",
        queue = tables.queue,
        inbox = tables.inbox
    );
    let queues: Vec<&str> = QUEUES.to_vec();
    let clock = Instant::now();
    let outcome: CliResult = async {
        loop {
            tokio::time::sleep(TICK).await;
            let row = client.query_one(&sql, &[&queues, &dead_letter_queues, &CONSUMER]).await?;
            let (pending, dead_letters, inbox): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            println!(
                "      {:>5.2} s  queues {pending:>5}  dead-letter queues {dead_letters:>4}  inbox {inbox:>5}  \
                 rejected {:>4}  redriven and handled {:>4}",
                clock.elapsed().as_secs_f64(),
                billing.rejected(),
                billing.redriven()
            );
            if pending == 0 && dead_letters == 0 && usize::try_from(inbox).is_ok_and(|n| n >= expected) {
                return Ok(());
            }
            if clock.elapsed() > STEP_TIMEOUT {
                return Err(format!(
                    "the consumer did not finish within {} s: {pending} messages in the queues, {dead_letters} \
                     in the dead-letter queues, {inbox} of {expected} in the inbox",
                    STEP_TIMEOUT.as_secs()
                )
                .into());
            }
        }
    }
    .await;
    let seconds = clock.elapsed().as_secs_f64();
    let skipped = QUEUES
        .iter()
        .filter_map(|queue| host.consumer_stats(queue))
        .map(|stats| stats.snapshot().duplicates)
        .sum();
    host.shutdown().await;
    outcome?;
    Ok(Consumed {
        handled: billing.handled(),
        rejected: billing.rejected(),
        redriven: billing.redriven(),
        skipped,
        seconds,
    })
}

/// How many of `ids` relayer's consumer has not recorded in the inbox.
async fn not_in_inbox(
    client: &Client,
    tables: &Tables,
    ids: &[Uuid],
) -> Result<usize, tokio_postgres::Error> {
    let sql = format!(
        "SELECT count(*) FROM unnest($1::uuid[]) AS written(id) \
         WHERE NOT EXISTS (SELECT 1 FROM {} i WHERE i.consumer = '{CONSUMER}' AND i.message_id = written.id)",
        tables.inbox
    );
    Ok(usize::try_from(count(client, &sql, ids).await?).unwrap_or(usize::MAX))
}

/// The namespace's tables the demo reads.
struct Tables {
    outbox: String,
    queue: String,
    dead: String,
    inbox: String,
}

impl Tables {
    fn new(ns: &Namespace) -> Self {
        Tables {
            outbox: ns.table("outbox"),
            queue: ns.table("queue"),
            dead: ns.table("dead"),
            inbox: ns.table("inbox"),
        }
    }
}

/// Counts at one instant. Whole-table counts: fine for a demo's few thousand rows.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    outbox: usize,
    claimed: usize,
    queue: usize,
    dead: usize,
    inbox: usize,
}

async fn snapshot(client: &Client, tables: &Tables, queue: &str) -> Result<Snapshot, tokio_postgres::Error> {
    let row = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {outbox}), \
                        (SELECT count(*) FROM {outbox} WHERE claim_token IS NOT NULL AND visible_at > now()), \
                        (SELECT count(*) FROM {queue_table} WHERE queue = $1), \
                        (SELECT count(*) FROM {dead}), (SELECT count(*) FROM {inbox})",
                outbox = tables.outbox,
                queue_table = tables.queue,
                dead = tables.dead,
                inbox = tables.inbox
            ),
            &[&queue],
        )
        .await?;
    let get = |index: usize| row.try_get::<_, i64>(index).map(|n| usize::try_from(n).unwrap_or(0));
    Ok(Snapshot { outbox: get(0)?, claimed: get(1)?, queue: get(2)?, dead: get(3)?, inbox: get(4)? })
}

/// Prints a progress line every [`TICK`] until `done` holds, or fails after [`STEP_TIMEOUT`].
async fn watch(
    client: &Client,
    tables: &Tables,
    queue: &str,
    clock: Instant,
    done: impl Fn(&Snapshot) -> bool,
) -> CliResult {
    loop {
        tokio::time::sleep(TICK).await;
        let now = snapshot(client, tables, queue).await?;
        println!("{}", progress_line(clock, queue, &now));
        if done(&now) {
            return Ok(());
        }
        if clock.elapsed() > STEP_TIMEOUT {
            return Err(
                format!("the step did not finish within {} s: {now:?}", STEP_TIMEOUT.as_secs()).into()
            );
        }
    }
}

fn progress_line(clock: Instant, queue: &str, s: &Snapshot) -> String {
    format!(
        "      {:>5.2} s  outbox pending {:>5} (claimed {:>4})  queue {queue} {:>5}  dead {:>3}  inbox {:>5}",
        clock.elapsed().as_secs_f64(),
        s.outbox,
        s.claimed,
        s.queue,
        s.dead,
        s.inbox
    )
}

/// Writes the orders in transactions of [`PER_TX`]: every tenth on one of the ordered
/// lanes, every hundredth scheduled 2 s ahead, one in [`REVIEW_EVERY`] marked for review.
/// Returns their ids in order.
async fn write_orders(
    client: &mut Client,
    writer: &OutboxWriter,
    size: Size,
) -> Result<Vec<Uuid>, Box<dyn std::error::Error + Send + Sync>> {
    write_batch(client, writer, size.orders, |n| {
        let body = if is_marked(n) {
            format!("{{\"order\":{n},{REVIEW_MARK}}}")
        } else {
            format!("{{\"order\":{n}}}")
        };
        let message = NewMessage::new("queue", "orders", body.into_bytes()).header("n", n.to_string());
        if is_scheduled(n) {
            message.delivery(Delivery::After(Duration::from_secs(2)))
        } else if is_on_lane(n) {
            let lane = format!("customer-{}", (n / 10) % size.lanes);
            message.header("lane", lane.clone()).lane(lane)
        } else {
            message
        }
    })
    .await
}

/// Writes `count` messages made by `make` through `writer`, [`PER_TX`] per transaction.
async fn write_batch(
    client: &mut Client,
    writer: &OutboxWriter,
    count: usize,
    make: impl Fn(usize) -> NewMessage,
) -> Result<Vec<Uuid>, Box<dyn std::error::Error + Send + Sync>> {
    let mut ids = Vec::with_capacity(count);
    for first in (0..count).step_by(PER_TX) {
        let messages: Vec<NewMessage> = (first..count.min(first + PER_TX)).map(&make).collect();
        let tx = client.transaction().await?;
        // … a service's own writes would go here, in the same transaction (OUT-1) …
        let written = writer.enqueue(&tx, &messages).await?;
        tx.commit().await?;
        ids.extend(written.iter().map(|w| *w.id.as_uuid()));
    }
    Ok(ids)
}

/// How many of `ids` are not in the queue table at all.
async fn missing_from_queue(
    client: &Client,
    tables: &Tables,
    ids: &[Uuid],
) -> Result<usize, tokio_postgres::Error> {
    let sql = format!(
        "SELECT count(*) FROM unnest($1::uuid[]) AS written(id) \
         WHERE NOT EXISTS (SELECT 1 FROM {} q WHERE q.message_id = written.id)",
        tables.queue
    );
    Ok(usize::try_from(count(client, &sql, ids).await?).unwrap_or(usize::MAX))
}

async fn count(client: &Client, sql: &str, ids: &[Uuid]) -> Result<i64, tokio_postgres::Error> {
    client.query_one(sql, &[&ids]).await?.try_get(0)
}

/// Whether each lane's messages reached the queue in the order they were written (LAN-1).
async fn lanes_in_order(
    client: &Client,
    tables: &Tables,
    lanes: usize,
) -> Result<bool, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT headers->>'lane', (headers->>'n')::bigint FROM {} \
                 WHERE queue = 'orders' AND headers ? 'lane' ORDER BY seq",
                tables.queue
            ),
            &[],
        )
        .await?;
    let mut last: HashMap<String, i64> = HashMap::new();
    for row in rows {
        let (lane, n): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
        if last.insert(lane, n).is_some_and(|previous| previous >= n) {
            return Ok(false);
        }
    }
    Ok(last.len() == lanes)
}

/// What the killed child left behind.
struct Crash {
    /// Distinct payments in the queue when it was killed.
    delivered: usize,
    /// The outbox right after the kill.
    left: Snapshot,
}

/// Runs `relayer demo-child` over the `payments`, kills it with SIGKILL once
/// [`KILL_AT_PERCENT`] of them are in the queue, and reports what it left behind.
async fn crash_child(
    args: &Args,
    client: &Client,
    tables: &Tables,
    payments: usize,
) -> Result<Crash, Box<dyn std::error::Error + Send + Sync>> {
    let mut child: Child = Command::new(std::env::current_exe()?)
        // Through the environment, not argv: the URL may carry a password, and any local
        // user can read a process's arguments.
        .arg("demo-child")
        .env("DATABASE_URL", &args.database_url)
        .args(args.ca_file.iter().flat_map(|file| [std::ffi::OsStr::new("--ca-file"), file.as_os_str()]))
        .args(["--schema", args.namespace.schema(), "--prefix", args.namespace.prefix()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?;
    let clock = Instant::now();
    let kill_at = payments * KILL_AT_PERCENT / 100;
    let outcome = async {
        loop {
            tokio::time::sleep(TICK).await;
            let now = snapshot(client, tables, "payments").await?;
            println!("{}", progress_line(clock, "payments", &now));
            if now.queue >= kill_at {
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                return Err(format!("the demo child exited by itself ({status})").into());
            }
            if clock.elapsed() > STEP_TIMEOUT {
                return Err(format!("the demo child delivered only {} payments in 30 s", now.queue).into());
            }
        }
    }
    .await;
    // std's Child::kill sends SIGKILL on Unix: no shutdown, no completion, nothing released.
    let killed = child.kill().and_then(|()| child.wait());
    let outcome: CliResult = outcome;
    outcome?;
    let status = killed?;
    let left = snapshot(client, tables, "payments").await?;
    let distinct =
        format!("SELECT count(DISTINCT message_id) FROM {} WHERE queue = 'payments'", tables.queue);
    let delivered: i64 = client.query_one(&distinct, &[]).await?.try_get(0)?;
    println!("      killed the child ({status})");
    Ok(Crash { delivered: usize::try_from(delivered).unwrap_or(0), left })
}

/// `1234567` as `1,234,567`.
fn thousands(value: impl TryInto<u64>) -> String {
    let digits = value.try_into().map_or_else(|_| "?".to_owned(), |v: u64| v.to_string());
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0u64), "0");
        assert_eq!(thousands(999u64), "999");
        assert_eq!(thousands(1_000usize), "1,000");
        assert_eq!(thousands(1_234_567i64), "1,234,567");
    }
}
