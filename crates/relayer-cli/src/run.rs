//! `relayer run --config relayer.toml`: the maintenance workers as a sidecar (OBS-3), through
//! the facade's builder. It stops on SIGTERM or SIGINT — listened for before anything else,
//! so also during start-up: the host waits for passes in flight and releases its leases,
//! so another instance leads at once.

use relayer::{Relayer, RelayerBuilder};

use crate::args::{Args, DEFAULT_DATABASE_URL, Global, RunArgs};
use crate::config::{Config, parse_database_url};
use crate::connect::CliResult;
use crate::gauges;
use crate::stop_signals::StopSignals;

pub(crate) async fn run(global: &Global, run: &RunArgs) -> CliResult {
    // Before anything else: a signal during start-up must stop the sidecar cleanly too.
    let mut signals = StopSignals::install()?;
    let config = Config::load(&run.config)?;
    let (database_url, from) = match &global.database_url {
        Some(url) => (url.clone(), "--database-url"),
        None => {
            (config.database_url.clone().unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned()), "database_url")
        }
    };
    let namespace = match (&global.schema, &global.prefix) {
        (None, None) => config.namespace.clone(),
        (schema, prefix) => relayer::Namespace::new(
            schema.clone().unwrap_or_else(|| config.namespace.schema().to_owned()),
            prefix.clone().unwrap_or_else(|| config.namespace.prefix().to_owned()),
        )
        .map_err(|e| match e.kind() {
            relayer::core::IdentifierKind::Schema => format!("--schema: {e}"),
            relayer::core::IdentifierKind::Prefix => format!("--prefix: {e}"),
        })?,
    };
    let args = Args { database_url, ca_file: global.ca_file.clone(), namespace };
    let database = parse_database_url(&args.database_url, from, args.ca_file.as_deref())?;

    if let Some(metrics) = config.metrics {
        use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
        use metrics_util::MetricKindMask;
        // Durations as histograms with buckets (aggregatable across instances, unlike the
        // exporter's default summaries): from a millisecond up to the minute a slow pass or
        // handler may reach.
        const DURATION_BUCKETS: &[f64] =
            &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
        PrometheusBuilder::new()
            .with_http_listener(metrics.listen)
            // A gauge series no longer set (a drained destination) is removed after it.
            .idle_timeout(
                MetricKindMask::GAUGE,
                Some(gauges::idle_timeout(metrics.sample_interval, &worker_intervals(&config))),
            )
            .set_buckets_for_metric(Matcher::Suffix("_duration_seconds".to_owned()), DURATION_BUCKETS)
            .map_err(|e| format!("metrics: duration buckets: {e}"))?
            .install()
            .map_err(|e| format!("metrics.listen: cannot serve on {}: {e}", metrics.listen))?;
    }
    // The console binds before the workers start: a port in use, an unreadable certificate
    // or an unreachable database stops the sidecar here, with nothing started.
    let history = config.console.as_ref().map(|_| relayer_console::History::new(CHART_WINDOW));
    let console = match (&config.console, &history) {
        (Some(settings), Some(history)) => {
            let mut console =
                relayer_console::Console::new(settings.clone(), database.clone(), args.namespace.clone())
                    .history(history.clone())
                    .doctor(crate::doctor::console_hook(database.clone(), args.namespace.clone()));
            if let Some(policies) = config.policies.clone() {
                console = console.policies(policies);
            }
            // Boxed: a bound console's future is large (its pool, its listener).
            Some(Box::pin(console.bind()).await?)
        }
        _ => None,
    };
    let workers = config.workers().join(", ");
    // Where, and how securely: `(TLS, chain and host name verified against …)`, `(plaintext)`.
    eprintln!("relayer run: starting {workers} on namespace {} at {}", args.namespace, database.target());
    let start = builder(&config, database, &args.namespace).start();
    tokio::pin!(start);
    let host = tokio::select! {
        started = &mut start => started?,
        signal = signals.next() => {
            eprintln!("relayer run: {signal} during start-up: stopping once started (signal again to stop at once)");
            let host = tokio::select! {
                started = &mut start => started?,
                again = signals.next() => {
                    return Err(format!("{again}: stopped during start-up without releasing anything").into());
                }
            };
            // A further signal now stops at once, as it does after start-up.
            shut_down(&host, &mut signals).await;
            return Ok(());
        }
    };
    eprintln!(
        "relayer run: {workers} on namespace {} as instance {}{}{}",
        args.namespace,
        host.instance_id(),
        config.metrics.map_or_else(String::new, |m| format!(", metrics on http://{}/metrics", m.listen)),
        console.as_ref().map_or_else(String::new, |c| format!(", console on {}", c.url())),
    );
    // One sampler feeds the gauges and the console's chart.
    let sample_interval = config.metrics.map(|m| m.sample_interval);
    let sampler = (sample_interval.is_some() || history.is_some()).then(|| {
        tokio::spawn(gauges::sample(
            args.clone(),
            sample_interval.unwrap_or(CONSOLE_SAMPLE_INTERVAL),
            history.clone(),
        ))
    });
    let (stop_console, console_stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = console.map(|console| {
        tokio::spawn(async move {
            if let Err(error) = console.serve(async move { drop(console_stopped.await) }).await {
                tracing::error!(target: "relayer::cli", error = %relayer_core::error_chain(&error), "the console stopped");
            }
        })
    });

    let stop = signals.next().await;
    eprintln!(
        "relayer run: {stop}: stopping (waiting for passes in flight, releasing leases; signal again to stop at once)"
    );
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    let _ = stop_console.send(());
    shut_down(&host, &mut signals).await;
    if let Some(serving) = serving {
        // Requests in flight are answered first; a page reads for at most its statement timeout.
        drop(serving.await);
    }
    Ok(())
}

/// How far back the console's chart looks.
const CHART_WINDOW: std::time::Duration = std::time::Duration::from_secs(3_600);

/// How often the console's chart is sampled when no `[metrics]` section sets the interval.
const CONSOLE_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

/// Shuts `host` down, waiting for passes in flight; a further signal meanwhile exits the
/// process at once with 128 + its number, as a process killed by it would.
async fn shut_down(host: &relayer::RelayerHost, signals: &mut StopSignals) {
    tokio::select! {
        report = host.shutdown() => {
            if !report.is_clean() {
                eprintln!("relayer run: abandoned at the shutdown bound: {}", report.abandoned.join(", "));
            }
        }
        again = signals.next() => {
            // The operator will not wait: exit now. Leases not yet released expire on the
            // database clock (LIF-3).
            eprintln!("relayer run: {again} again: stopped at once, without waiting for passes in flight");
            std::process::exit(128 + signal_number(again));
        }
    }
    eprintln!("relayer run: stopped");
}

/// The number of a stop signal, for the exit status of a process it ended (128 + n).
fn signal_number(name: &str) -> i32 {
    match name {
        "SIGINT" => 2,
        _ => 15,
    }
}

/// Each configured worker's pass interval and longest back-off: how far apart its passes,
/// and so the updates of its own gauges, may be.
fn worker_intervals(config: &Config) -> Vec<std::time::Duration> {
    let mut intervals = Vec::new();
    if let Some(o) = &config.dispatcher {
        intervals.extend([o.poll_interval(), o.max_backoff()]);
    }
    if let Some(o) = &config.sweeper {
        intervals.extend([o.sweep_interval(), o.max_backoff()]);
    }
    if let Some(o) = &config.cleanup {
        intervals.extend([o.cleanup_interval(), o.max_backoff()]);
    }
    if config.policies.is_some() {
        let o = config.dead_letter.clone().unwrap_or_default();
        intervals.extend([o.interval(), o.max_backoff()]);
    }
    intervals
}

/// The host the configuration describes.
fn builder(
    config: &Config,
    database: relayer::postgres::Connector,
    namespace: &relayer::Namespace,
) -> RelayerBuilder {
    let mut builder = Relayer::builder(database, namespace.clone());
    // The only transport a sidecar can send through: relayer's PostgreSQL queue.
    let sends = config.dispatcher.is_some() || config.sweeper.is_some();
    if sends {
        builder = builder.queue_transport();
    }
    if let Some(options) = config.dispatcher.clone() {
        builder = builder.dispatcher(options);
    }
    if let Some(options) = config.sweeper.clone() {
        builder = builder.sweeper(options);
    }
    if let Some(options) = config.cleanup.clone() {
        builder = builder.cleanup(options);
    }
    if let Some(policies) = config.policies.clone() {
        builder = builder.dead_letters(policies, config.dead_letter.clone().unwrap_or_default());
    }
    if let Some(connections) = config.pool_size {
        // Every pool this sidecar opens; without it, each is sized from its workers.
        builder = builder.maintenance_pool_size(connections);
        if config.dispatcher.is_some() {
            builder = builder.dispatcher_pool_size(connections);
        }
        if sends {
            builder = builder.queue_pool_size(connections);
        }
    }
    if let Some(instance) = config.instance_id.clone() {
        builder = builder.instance_id(instance);
    }
    builder
}
