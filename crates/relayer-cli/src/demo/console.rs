//! `relayer demo --console`: after the summary, the demo leaves something for an operator to
//! look at and serves the console on it until SIGINT or SIGTERM.
//!
//! What it leaves, each through relayer's own components: a lane parked behind a refused head
//! (a dispatcher with `max_attempts = 1` and the strict transport), dead outbox rows (poison
//! sent unordered), queue dead letters (a consumer that rejects every return), and a backlog
//! on a `webhook` transport no instance registers (TRN-6). Then one host runs a dispatcher, a
//! sweeper and the demo's redrive policy — so the workers page has leases, terms and instances —
//! beside the console, whose chart is fed by the sidecar's sampler.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::{
    ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule,
    DispatcherOptions, NewMessage, Relayer, SweeperOptions, async_trait,
};
use relayer_console::{ActorSource, Console, ConsoleSettings, History};

use super::transports::{STRICT, Strict};
use super::{REFUSED, STEP_TIMEOUT};
use crate::args::Args;
use crate::connect::CliResult;
use crate::stop_signals::StopSignals;

/// The queue whose messages the rejecting consumer dead-letters.
const RETURNS: &str = "returns";
/// The lane left parked.
const LANE: &str = "account-42";
/// How often the console's chart is sampled in the demo: often, so it fills while you look.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Rejects every return: each lands in the dead-letter queue.
struct RejectReturns;

#[async_trait]
impl Handler for RejectReturns {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        Outcome::reject(format!(
            "return of {} bytes needs a manual check (the demo rejects every return)",
            message.body.len()
        ))
    }
}

/// Leaves the scene described in the module docs and serves the console on `listen` until a
/// stop signal.
pub(crate) async fn serve(args: &Args, listen: SocketAddr) -> CliResult {
    let mut signals = StopSignals::install()?;
    let config = args.connector()?;
    let ns = &args.namespace;
    let client = crate::connect::connect(args).await?;
    println!("[console] leaving a parked lane, dead rows, dead letters and a backlog to look at");

    // A parked lane and dead rows: the strict transport refuses, one attempt only.
    let scene = Relayer::builder(config.clone(), ns.clone())
        .transport(Arc::new(Strict { refused: REFUSED }))
        .dispatcher(
            DispatcherOptions::builder()
                .poll_interval(Duration::from_millis(100))
                .max_attempts(Some(NonZeroU32::MIN))
                .build()?,
        )
        .start()
        .await?;
    let mut messages = vec![NewMessage::new(STRICT, REFUSED, b"{\"entry\":\"head\"}".to_vec()).lane(LANE)];
    messages.extend(
        (0..4)
            .map(|n| NewMessage::new(STRICT, REFUSED, format!("{{\"entry\":{n}}}").into_bytes()).lane(LANE)),
    );
    messages
        .extend((0..6).map(|n| NewMessage::new(STRICT, REFUSED, format!("{{\"poison\":{n}}}").into_bytes())));
    scene.writer().enqueue(&client, &messages).await?;
    let settled = format!(
        "SELECT (SELECT count(*) FROM {} WHERE parked_at IS NOT NULL AND lane = $1), \
                (SELECT count(*) FROM {} WHERE lane IS NULL AND destination = $2)",
        ns.table("lanes"),
        ns.table("dead")
    );
    wait(&client, &settled, LANE, REFUSED).await?;
    scene.shutdown().await;

    // Queue dead letters: a consumer that rejects every return.
    let options = ConsumerOptions::builder().poll_interval(Duration::from_millis(100)).build()?;
    let subscription = Subscription::new(RETURNS, options)?;
    let dead_letter_queue = subscription.dead_letter_queue().to_owned();
    let consumer = Relayer::builder(config.clone(), ns.clone())
        .queue_transport()
        .consumer(subscription, Arc::new(RejectReturns))
        .start()
        .await?;
    let returns: Vec<NewMessage> = (0..7)
        .map(|n| {
            NewMessage::new("queue", RETURNS, format!("{{\"return\":{n},\"sku\":\"A-{n:03}\"}}").into_bytes())
                .header("kind", "return")
                .header("region", if n % 2 == 0 { "eu" } else { "us" })
        })
        .collect();
    consumer.queue_writer().enqueue(&client, &returns).await?;
    let letters = format!(
        "SELECT count(*) FROM {} WHERE queue = $1 AND dead_lettered_at IS NOT NULL",
        ns.table("queue")
    );
    let clock = std::time::Instant::now();
    while client.query_one(&letters, &[&dead_letter_queue]).await?.get::<_, i64>(0) < 7 {
        if clock.elapsed() > STEP_TIMEOUT {
            return Err("the returns were not dead-lettered in time".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.shutdown().await;

    // A backlog no instance can send (TRN-6).
    let webhook = relayer::postgres::OutboxWriter::new(ns, ["webhook"]);
    let hooks: Vec<NewMessage> = (0..12)
        .map(|n| {
            NewMessage::new(
                "webhook",
                if n % 3 == 0 { "crm" } else { "billing" },
                format!("{{\"hook\":{n}}}").into_bytes(),
            )
        })
        .collect();
    webhook.enqueue(&client, &hooks).await?;

    // The workers an operator would run, and the console beside them.
    let redrive = DeadLetterPolicy::redrive(Duration::from_secs(3_600), Duration::from_secs(86_400))?;
    let policies =
        DeadLetterPolicies::new([DeadLetterRule::queue(RETURNS, dead_letter_queue.clone(), redrive)])?;
    let host = Relayer::builder(config.clone(), ns.clone())
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().build()?)
        .sweeper(SweeperOptions::builder().build()?)
        .dead_letters(policies.clone(), DeadLetterOptions::default())
        .start()
        .await?;
    let history = History::new(Duration::from_secs(3_600));
    let mut settings = ConsoleSettings::new(listen);
    settings.actions = true;
    settings.actor = Some(ActorSource::Name(std::env::var("USER").unwrap_or_else(|_| "demo".to_owned())));
    let console = Console::new(settings, config.clone(), ns.clone())
        .history(history.clone())
        .policies(policies)
        .doctor(crate::doctor::console_hook(config, ns.clone()));
    let console = Box::pin(console.bind()).await?;
    let url = console.url();
    let sampler = tokio::spawn(crate::gauges::sample(args.clone(), SAMPLE_EVERY, Some(history)));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(console.serve(async move { drop(stopped.await) }));
    println!("console: {url}");
    println!(
        "      actions are on (audited as console:<your user>); Ctrl-C stops the console and the workers"
    );
    let signal = signals.next().await;
    println!("[console] {signal}: stopping");
    sampler.abort();
    let _ = stop.send(());
    drop(serving.await);
    host.shutdown().await;
    Ok(())
}

/// Waits until `sql` (two counts) says the lane is parked and the poison is dead.
async fn wait(client: &tokio_postgres::Client, sql: &str, lane: &str, destination: &str) -> CliResult {
    let clock = std::time::Instant::now();
    loop {
        let row = client.query_one(sql, &[&lane, &destination]).await?;
        if row.get::<_, i64>(0) == 1 && row.get::<_, i64>(1) >= 6 {
            return Ok(());
        }
        if clock.elapsed() > STEP_TIMEOUT {
            return Err("the lane did not park in time".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
