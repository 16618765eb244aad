//! A worker's pass events as metrics: passes by result, their durations, leadership, and
//! the time since the last successful pass.
//!
//! Several loops of one worker may share its event channel (the dispatcher's unordered
//! loops and its lane loop), so their events interleave. Nothing here pairs one event
//! with another: a finished pass's event carries the duration its own loop measured, and
//! a `Stopped` ends one loop, not the worker — only the channel's closing ends the watch.

use std::time::Instant;

use relayer_worker::{PassOutcome, WorkerEvent, WorkerKind};
use tokio::sync::broadcast::{self, error::RecvError};

use super::REFRESH;
use super::reports::Recorded;

/// Records `worker`'s events from `events` on a task of its own, until the channel closes.
pub(crate) fn observe<R: Recorded + Clone + Send + 'static>(
    worker: WorkerKind,
    events: broadcast::Receiver<WorkerEvent<R>>,
) {
    tokio::spawn(watch(worker, events));
}

async fn watch<R: Recorded + Clone + Send + 'static>(
    worker: WorkerKind,
    mut events: broadcast::Receiver<WorkerEvent<R>>,
) {
    let mut passes = PassMetrics::new(worker);
    let mut refresh = tokio::time::interval(REFRESH);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => passes.record(&event),
                // Events were dropped: the counts of those passes are lost, nothing else.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => {
                    passes.leader(false);
                    return;
                }
            },
            _ = refresh.tick() => passes.refresh(),
        }
    }
}

/// What the metrics of one worker remember between events.
pub(crate) struct PassMetrics {
    worker: &'static str,
    /// The last successful pass, or when watching began.
    last_success: Instant,
}

impl PassMetrics {
    pub(crate) fn new(worker: WorkerKind) -> Self {
        PassMetrics { worker: worker.name(), last_success: Instant::now() }
    }

    /// Emits what `event` tells.
    pub(crate) fn record<R: Recorded>(&mut self, event: &WorkerEvent<R>) {
        let worker = self.worker;
        match event {
            WorkerEvent::PassStarted { .. } => {}
            WorkerEvent::PassSucceeded { outcome, duration } => {
                self.last_success = Instant::now();
                self.refresh();
                let result = match outcome {
                    PassOutcome::Led(report) => {
                        report.record(worker);
                        "led"
                    }
                    PassOutcome::NotLeader => "not_leader",
                };
                self.pass(result, duration.as_secs_f64());
                self.leader(result == "led");
            }
            WorkerEvent::PassFailed { duration, .. } => {
                self.pass("failed", duration.as_secs_f64());
                self.leader(false);
            }
            WorkerEvent::Stopped => self.leader(false),
        }
    }

    fn pass(&self, result: &'static str, seconds: f64) {
        let worker = self.worker;
        metrics::counter!("relayer_passes_total", "worker" => worker, "result" => result).increment(1);
        metrics::histogram!("relayer_pass_duration_seconds", "worker" => worker, "result" => result)
            .record(seconds);
    }

    fn leader(&self, led: bool) {
        metrics::gauge!("relayer_leader", "worker" => self.worker).set(if led { 1.0 } else { 0.0 });
    }

    /// Sets the seconds since the last successful pass.
    fn refresh(&self) {
        metrics::gauge!("relayer_worker_seconds_since_last_success", "worker" => self.worker)
            .set(self.last_success.elapsed().as_secs_f64());
    }
}

#[cfg(all(test, feature = "dispatcher"))]
mod tests {
    use std::time::Duration;

    use metrics_exporter_prometheus::PrometheusBuilder;
    use relayer_dispatcher::PassReport;

    use super::*;

    /// The value of the sample `name{labels…}` in Prometheus text, if present.
    fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} ")))
            .find(|line| labels.iter().all(|label| line.contains(label)))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse().ok())
    }

    fn led(sent: u64, millis: u64) -> WorkerEvent<PassReport> {
        let mut report = PassReport::default();
        report.sent = sent;
        WorkerEvent::PassSucceeded {
            outcome: PassOutcome::Led(report),
            duration: Duration::from_millis(millis),
        }
    }

    /// OBS-2: three dispatcher loops share one channel and interleave — all start, the
    /// fastest finishes first, one fails. Each pass's duration is recorded as its own loop
    /// measured it (pairing finishes with the latest start would record 0 s three times),
    /// and one loop's `Stopped` stops nothing but its leadership gauge.
    #[test]
    fn interleaved_loops_record_each_pass_with_its_own_duration_obs_2() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let mut passes = PassMetrics::new(WorkerKind::Dispatcher);
            let events = [
                WorkerEvent::PassStarted { number: 1 },
                WorkerEvent::PassStarted { number: 1 },
                WorkerEvent::PassStarted { number: 1 },
                led(2, 250),
                WorkerEvent::PassFailed {
                    consecutive: 1,
                    next_wait: Duration::from_secs(1),
                    duration: Duration::from_millis(125),
                },
                WorkerEvent::Stopped,
                led(3, 1_500),
            ];
            for event in &events {
                passes.record(event);
            }
        });
        let text = handle.render();
        let worker = "worker=\"dispatcher\"";
        let (led_only, failed) = ([worker, "result=\"led\""], [worker, "result=\"failed\""]);
        assert_eq!(sample(&text, "relayer_pass_duration_seconds_sum", &led_only), Some(1.75), "{text}");
        assert_eq!(sample(&text, "relayer_pass_duration_seconds_count", &led_only), Some(2.0), "{text}");
        assert_eq!(sample(&text, "relayer_pass_duration_seconds_sum", &failed), Some(0.125), "{text}");
        assert_eq!(sample(&text, "relayer_passes_total", &led_only), Some(2.0), "{text}");
        assert_eq!(sample(&text, "relayer_passes_total", &failed), Some(1.0), "{text}");
        let sent = [worker, "outcome=\"sent\""];
        assert_eq!(sample(&text, "relayer_messages_total", &sent), Some(5.0), "{text}");
        assert_eq!(sample(&text, "relayer_leader", &[worker]), Some(1.0), "the last pass led: {text}");
    }
}
