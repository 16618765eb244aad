//! The sidecar's gauges sampled from SQL every `metrics.sample_interval` (OBS-2): what only
//! the database knows — backlog, oldest pending age, parked lanes, dead rows and letters,
//! each worker's last successful pass as the database shows it, dead tuples and the xmin
//! horizon. Read with bounded statements (`namespace_gauges`: at most [`SAMPLE_CAP`] rows
//! of a table, estimates past it), never a full-table scan per sample. A label set that
//! disappears (a destination drained) is set to 0 once, then no longer updated, so the
//! exporter's idle timeout removes the series.

use std::collections::HashSet;

use std::time::Duration;

use metrics::Label;
use relayer_postgres::{NamespaceStatus, namespace_gauges};

use crate::args::Args;
use crate::connect::connect;
use crate::output::seconds;

/// The most rows of one table a sample reads.
pub(crate) const SAMPLE_CAP: u32 = 10_000;

/// How long a gauge series lives without being set: three samples, or three passes of the
/// slowest worker (whose own gauges are set once per pass), whichever is longer.
pub(crate) fn idle_timeout(sample_interval: Duration, worker_intervals: &[Duration]) -> Duration {
    worker_intervals.iter().copied().fold(sample_interval, Duration::max) * 3
}

/// One gauge family and the label sets it set last time.
struct Family {
    name: &'static str,
    previous: HashSet<Vec<(String, String)>>,
}

impl Family {
    fn new(name: &'static str) -> Self {
        Family { name, previous: HashSet::new() }
    }

    fn set_all(&mut self, values: Vec<(Vec<(&'static str, String)>, f64)>) {
        let mut current = HashSet::new();
        for (labels, value) in values {
            let key: Vec<(String, String)> =
                labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            metrics::gauge!(self.name, to_labels(&key)).set(value);
            current.insert(key);
        }
        // Zero once, so the last sample is right; then left alone for the exporter's idle
        // timeout to remove.
        for gone in self.previous.difference(&current) {
            metrics::gauge!(self.name, to_labels(gone)).set(0.0);
        }
        self.previous = current;
    }
}

fn to_labels(key: &[(String, String)]) -> Vec<Label> {
    key.iter().map(|(k, v)| Label::new(k.clone(), v.clone())).collect()
}

/// The gauge families of one sidecar.
pub(crate) struct Gauges {
    backlog: Family,
    oldest: Family,
    dead_letters: Family,
    since_pass: Family,
    stalled: Family,
    dead_tuples: Family,
    unserved: Family,
    unserved_oldest: Family,
}

impl Gauges {
    pub(crate) fn new() -> Self {
        Gauges {
            backlog: Family::new("relayer_backlog"),
            oldest: Family::new("relayer_oldest_pending_seconds"),
            dead_letters: Family::new("relayer_dead_letters"),
            since_pass: Family::new("relayer_seconds_since_last_pass"),
            stalled: Family::new("relayer_worker_stalled"),
            dead_tuples: Family::new("relayer_dead_tuples"),
            unserved: Family::new("relayer_unserved_rows"),
            unserved_oldest: Family::new("relayer_unserved_oldest_seconds"),
        }
    }

    /// Sets every gauge from `status`.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn record(&mut self, status: &NamespaceStatus) {
        let destination = |t: &str, d: &str| vec![("transport", t.to_owned()), ("destination", d.to_owned())];
        self.backlog.set_all(
            status
                .backlog
                .iter()
                .map(|b| (destination(&b.transport, &b.destination), b.pending as f64))
                .collect(),
        );
        self.oldest.set_all(
            status
                .backlog
                .iter()
                .map(|b| (destination(&b.transport, &b.destination), b.oldest_age.map_or(0.0, seconds)))
                .collect(),
        );
        // TRN-6: rows waiting on a transport no live instance registers; a series drops to
        // 0 once an instance with the transport runs.
        let transport = |t: &str| vec![("transport", t.to_owned())];
        self.unserved
            .set_all(status.unserved.iter().map(|u| (transport(&u.transport), u.pending as f64)).collect());
        self.unserved_oldest.set_all(
            status
                .unserved
                .iter()
                .map(|u| (transport(&u.transport), u.oldest_age.map_or(0.0, seconds)))
                .collect(),
        );
        metrics::gauge!("relayer_outbox_pending").set(status.outbox_pending as f64);
        metrics::gauge!("relayer_outbox_scheduled").set(status.outbox_scheduled as f64);
        metrics::gauge!("relayer_oldest_pending_age_seconds")
            .set(status.oldest_pending_age.map_or(0.0, seconds));
        metrics::gauge!("relayer_lanes_parked").set(status.lanes_parked as f64);
        metrics::gauge!("relayer_dead_rows").set(status.dead as f64);
        self.dead_letters.set_all(
            status
                .dead_letters
                .iter()
                .map(|d| {
                    let labels =
                        vec![("queue", d.queue.clone()), ("reason", d.reason.clone().unwrap_or_default())];
                    (labels, d.count as f64)
                })
                .collect(),
        );
        self.since_pass.set_all(
            status
                .workers
                .iter()
                .map(|w| {
                    (
                        vec![("worker", w.worker.clone()), ("source", w.source.name().to_owned())],
                        seconds(w.since),
                    )
                })
                .collect(),
        );
        self.stalled.set_all(
            status
                .workers
                .iter()
                .map(|w| (vec![("worker", w.worker.clone())], if w.stalled { 1.0 } else { 0.0 }))
                .collect(),
        );
        self.dead_tuples.set_all(
            status.dead_tuples.iter().map(|t| (vec![("table", t.table.clone())], t.dead as f64)).collect(),
        );
        let horizon = &status.horizon;
        metrics::gauge!("relayer_oldest_transaction_seconds")
            .set(horizon.oldest_transaction_age.map_or(0.0, seconds));
        metrics::gauge!("relayer_xmin_horizon_age_xids").set(f64::from(horizon.xmin_age.unwrap_or(0)));
    }
}

/// Samples the SQL gauges every `interval` on a connection of its own, reconnecting after a
/// failure; a failed sample is logged and the next one tried. Each sample also goes into
/// `history` (the console's chart), when there is one.
pub(crate) async fn sample(args: Args, interval: Duration, history: Option<relayer_console::History>) {
    let mut gauges = Gauges::new();
    let mut client: Option<tokio_postgres::Client> = None;
    let mut ticks = tokio::time::interval(interval);
    // A slow sample (a busy database) delays the next one instead of firing a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
        match namespace_gauges(connected, &args.namespace, SAMPLE_CAP).await {
            Ok(status) => {
                gauges.record(&status);
                if let Some(history) = &history {
                    history.record(&status, std::time::SystemTime::now());
                }
            }
            Err(error) => {
                tracing::warn!(target: "relayer::cli", error = %relayer_core::error_chain(&error), "metrics sampling failed");
            }
        }
    }
}
