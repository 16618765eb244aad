//! `relayer run --config relayer.toml`: the maintenance workers as a sidecar (OBS-3), through
//! the facade's builder. It stops on SIGTERM or SIGINT: the host waits for passes in flight
//! and releases its leases, so another instance leads at once.

use std::time::Duration;

use relayer::Relayer;
use relayer_postgres::namespace_status;

use crate::args::{Args, DEFAULT_DATABASE_URL, Global, RunArgs};
use crate::config::Config;
use crate::gauges::Gauges;
use crate::{CliResult, connect};

pub(crate) async fn run(global: &Global, run: &RunArgs) -> CliResult {
    let config = Config::load(&run.config)?;
    let database_url = global
        .database_url
        .clone()
        .or_else(|| config.database_url.clone())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    let namespace = match (&global.schema, &global.prefix) {
        (None, None) => config.namespace.clone(),
        (schema, prefix) => relayer::Namespace::new(
            schema.clone().unwrap_or_else(|| config.namespace.schema().to_owned()),
            prefix.clone().unwrap_or_else(|| config.namespace.prefix().to_owned()),
        )?,
    };
    let args = Args { database_url, ca_file: global.ca_file.clone(), namespace };
    let database = relayer::postgres::connector_from_url(&args.database_url, args.ca_file.as_deref())
        .map_err(|e| format!("database_url: {e}"))?;

    if let Some(metrics) = config.metrics {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(metrics.listen)
            .install()
            .map_err(|e| format!("metrics.listen: cannot serve on {}: {e}", metrics.listen))?;
    }

    let mut builder = Relayer::builder(database, args.namespace.clone()).pool_size(config.pool_size);
    if config.dispatcher.is_some() || config.sweeper.is_some() {
        // The only transport a sidecar can send through: relayer's PostgreSQL queue.
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
        builder = builder.dead_letters(policies);
    }
    if let Some(options) = config.dead_letter.clone() {
        builder = builder.dead_letter_options(options);
    }
    if let Some(instance) = config.instance_id.clone() {
        builder = builder.instance_id(instance);
    }
    let host = builder.start().await?;
    eprintln!(
        "relayer run: {} on namespace {} as instance {}{}",
        config.workers().join(", "),
        args.namespace,
        host.instance_id(),
        config.metrics.map_or_else(String::new, |m| format!(", metrics on http://{}/metrics", m.listen)),
    );
    let sampler = config.metrics.map(|m| tokio::spawn(sample(args.clone(), m.sample_interval)));

    let stop = stop_signal().await;
    eprintln!("relayer run: {stop}: stopping (waiting for passes in flight, releasing leases)");
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    host.shutdown().await;
    eprintln!("relayer run: stopped");
    Ok(())
}

/// Waits for SIGTERM or SIGINT and names it.
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// Samples the SQL gauges every `interval` on a connection of its own, reconnecting after a
/// failure; a failed sample is logged and the next one tried.
async fn sample(args: Args, interval: Duration) {
    let mut gauges = Gauges::new();
    let mut client: Option<tokio_postgres::Client> = None;
    let mut ticks = tokio::time::interval(interval);
    loop {
        ticks.tick().await;
        if client.as_ref().is_none_or(tokio_postgres::Client::is_closed) {
            client = match connect(&args).await {
                Ok(connected) => Some(connected),
                Err(error) => {
                    tracing::warn!(target: "relayer::cli", %error, "metrics sampling: cannot connect");
                    continue;
                }
            };
        }
        let Some(connected) = &client else { continue };
        match namespace_status(connected, &args.namespace).await {
            Ok(status) => gauges.record(&status),
            Err(error) => {
                tracing::warn!(target: "relayer::cli", error = %relayer_core::error_chain(&error), "metrics sampling failed");
            }
        }
    }
}
