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
    let mut passes = PassMetrics::<R>::new(worker);
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
pub(crate) struct PassMetrics<R> {
    worker: &'static str,
    /// The last successful pass, or when watching began.
    last_success: Instant,
    /// The report of the last pass that led, while this instance leads: its leader-only
    /// gauges are zeroed when leadership ends.
    leading: Option<R>,
}

impl<R: Recorded + Clone> PassMetrics<R> {
    pub(crate) fn new(worker: WorkerKind) -> Self {
        PassMetrics { worker: worker.name(), last_success: Instant::now(), leading: None }
    }

    /// Emits what `event` tells.
    pub(crate) fn record(&mut self, event: &WorkerEvent<R>) {
        let worker = self.worker;
        match event {
            WorkerEvent::PassStarted { .. } => {}
            WorkerEvent::PassSucceeded { outcome, duration } => {
                self.last_success = Instant::now();
                self.refresh();
                let result = match outcome {
                    PassOutcome::Led(report) => {
                        report.record(worker);
                        self.leading = Some(report.clone());
                        "led"
                    }
                    PassOutcome::NotLeader => "not_leader",
                };
                self.pass(result, duration.as_secs_f64());
                self.leader(result == "led");
            }
            // A failed pass leads nothing: like `relayer_leader`, the leader-only gauges go to
            // 0 until a pass leads again.
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

    fn leader(&mut self, led: bool) {
        metrics::gauge!("relayer_leader", "worker" => self.worker).set(if led { 1.0 } else { 0.0 });
        if !led && let Some(last) = self.leading.take() {
            last.step_down(self.worker);
        }
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

    /// OBS-2: a sweeper that led (term 7) and then finds another leader zeroes its
    /// `relayer_lease_term`, so only the leader reports a term.
    #[cfg(feature = "sweeper")]
    #[test]
    fn an_instance_that_stops_leading_zeroes_its_lease_term_obs_2() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let worker = "worker=\"sweeper\"";
        metrics::with_local_recorder(&recorder, || {
            let mut passes = PassMetrics::new(WorkerKind::Sweeper);
            let mut report = relayer_sweeper::SweepReport::default();
            report.led = true;
            report.term = Some(7);
            passes.record(&WorkerEvent::PassSucceeded {
                outcome: PassOutcome::Led(report),
                duration: Duration::from_millis(5),
            });
            let text = handle.render();
            assert_eq!(sample(&text, "relayer_lease_term", &[worker]), Some(7.0), "{text}");
            passes.record(&WorkerEvent::PassSucceeded {
                outcome: PassOutcome::NotLeader,
                duration: Duration::from_millis(1),
            });
        });
        let text = handle.render();
        assert_eq!(sample(&text, "relayer_lease_term", &[worker]), Some(0.0), "{text}");
        assert_eq!(sample(&text, "relayer_leader", &[worker]), Some(0.0), "{text}");
    }
}
