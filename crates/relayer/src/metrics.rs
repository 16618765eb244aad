//! Worker metrics through the `metrics` facade (OBS-2), behind the `metrics` feature.
//!
//! The host subscribes to each worker's [`WorkerEvent`]s — the same test signals the pass
//! loop sends anyway — and turns them into counters, a histogram and gauges, so no worker
//! crate knows about metrics. Install a recorder (e.g. `metrics-exporter-prometheus`) to see
//! them; without one every call is a no-op: an application that installs no recorder pays
//! one idle task per worker, and an application built without the feature pays nothing.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | `relayer_messages_total` | counter | `worker`, `outcome` | messages a worker's passes moved: `sent`, `failed`, `dead` (dispatcher); `recovered`, `failed`, `dead` (sweeper); `cleaned` (cleanup, with `table`); `redriven`, `expired` (dead-letter policies) |
//! | `relayer_passes_total` | counter | `worker`, `result` | passes by result: `led`, `not_leader`, `failed` |
//! | `relayer_pass_duration_seconds` | histogram | `worker` | wall time of each pass that did not fail |
//! | `relayer_worker_seconds_since_last_success` | gauge | `worker` | seconds since this instance's last successful pass (led or not); refreshed every few seconds, so a stalled worker shows a growing value |
//! | `relayer_leader` | gauge | `worker` | 1 while this instance led the worker's last pass, else 0 |
//! | `relayer_lease_term` | gauge | `worker` | the lease term of the last led pass (lease leadership only) |
//!
//! The dead-letter policy worker also reports its own per-type metrics
//! (`relayer_dead_letters_stuck`, DLP-5), since it knows the message types.
// With no led worker compiled in, there is nothing to observe.
#![cfg_attr(not(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters")), allow(dead_code))]

use std::time::Duration;

use relayer_worker::{PassOutcome, WorkerEvent, WorkerKind};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

/// How often the seconds-since-last-success gauge is refreshed between events.
const REFRESH: Duration = Duration::from_secs(5);

/// One count of a report: `(outcome, an extra label, count)`.
pub(crate) type Count = (&'static str, Option<(&'static str, &'static str)>, u64);

/// A pass report's contribution to the counters.
pub(crate) trait Counted {
    /// `(outcome, extra label, count)` for each count the report carries.
    fn counts(&self) -> Vec<Count>;
    /// Gauges the report sets (the lease term).
    fn gauges(&self, worker: WorkerKind) {
        let _ = worker;
    }
}

#[cfg(feature = "dispatcher")]
impl Counted for relayer_dispatcher::PassReport {
    fn counts(&self) -> Vec<Count> {
        vec![
            ("sent", None, self.sent),
            ("failed", None, self.failed),
            ("dead", None, self.dead),
            ("undecodable", None, self.undecodable),
        ]
    }
}

#[cfg(feature = "sweeper")]
impl Counted for relayer_sweeper::SweepReport {
    fn counts(&self) -> Vec<Count> {
        vec![("recovered", None, self.sent), ("failed", None, self.failed), ("dead", None, self.dead)]
    }

    fn gauges(&self, worker: WorkerKind) {
        if let Some(term) = self.term {
            #[allow(clippy::cast_precision_loss)]
            metrics::gauge!("relayer_lease_term", "worker" => worker.name()).set(term as f64);
        }
    }
}

#[cfg(feature = "cleanup")]
impl Counted for relayer_cleanup::CleanupReport {
    fn counts(&self) -> Vec<Count> {
        vec![
            ("cleaned", Some(("table", "dead")), self.dead_deleted),
            ("cleaned", Some(("table", "inbox")), self.inbox_deleted),
        ]
    }

    fn gauges(&self, worker: WorkerKind) {
        if let Some(term) = self.term {
            #[allow(clippy::cast_precision_loss)]
            metrics::gauge!("relayer_lease_term", "worker" => worker.name()).set(term as f64);
        }
    }
}

#[cfg(feature = "dead-letters")]
impl Counted for relayer_dead_letters::DeadLetterReport {
    fn counts(&self) -> Vec<Count> {
        vec![("redriven", None, self.redriven), ("expired", None, self.expired)]
    }
}

/// Records `worker`'s events from `events` until its loop stops, on a task of its own.
pub(crate) fn observe<R: Counted + Clone + Send + 'static>(
    worker: WorkerKind,
    events: broadcast::Receiver<WorkerEvent<R>>,
) {
    tokio::spawn(record(worker, events));
}

async fn record<R: Counted + Clone + Send + 'static>(
    worker: WorkerKind,
    mut events: broadcast::Receiver<WorkerEvent<R>>,
) {
    let name = worker.name();
    let started = Instant::now();
    let mut last_success: Option<Instant> = None;
    let mut pass_started: Option<Instant> = None;
    let mut refresh = tokio::time::interval(REFRESH);
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            _ = refresh.tick() => {
                since_success(name, last_success.unwrap_or(started));
                continue;
            }
        };
        match event {
            Ok(WorkerEvent::PassStarted { .. }) => pass_started = Some(Instant::now()),
            Ok(WorkerEvent::PassSucceeded(outcome)) => {
                let now = Instant::now();
                if let Some(at) = pass_started.take() {
                    metrics::histogram!("relayer_pass_duration_seconds", "worker" => name)
                        .record(now.duration_since(at).as_secs_f64());
                }
                last_success = Some(now);
                since_success(name, now);
                match outcome {
                    PassOutcome::Led(report) => {
                        metrics::counter!("relayer_passes_total", "worker" => name, "result" => "led")
                            .increment(1);
                        metrics::gauge!("relayer_leader", "worker" => name).set(1.0);
                        for (outcome, extra, count) in report.counts() {
                            match extra {
                                Some((key, value)) => metrics::counter!("relayer_messages_total",
                                    "worker" => name, "outcome" => outcome, key => value)
                                .increment(count),
                                None => metrics::counter!("relayer_messages_total",
                                    "worker" => name, "outcome" => outcome)
                                .increment(count),
                            }
                        }
                        report.gauges(worker);
                    }
                    PassOutcome::NotLeader => {
                        metrics::counter!("relayer_passes_total", "worker" => name, "result" => "not_leader")
                            .increment(1);
                        metrics::gauge!("relayer_leader", "worker" => name).set(0.0);
                    }
                }
            }
            Ok(WorkerEvent::PassFailed { .. }) => {
                pass_started = None;
                metrics::counter!("relayer_passes_total", "worker" => name, "result" => "failed")
                    .increment(1);
                metrics::gauge!("relayer_leader", "worker" => name).set(0.0);
            }
            Ok(WorkerEvent::Stopped) | Err(RecvError::Closed) => {
                metrics::gauge!("relayer_leader", "worker" => name).set(0.0);
                return;
            }
            // Some events were dropped: counts of those passes are lost, nothing else.
            Err(RecvError::Lagged(_)) => pass_started = None,
        }
    }
}

fn since_success(worker: &'static str, at: Instant) {
    metrics::gauge!("relayer_worker_seconds_since_last_success", "worker" => worker)
        .set(at.elapsed().as_secs_f64());
}
