//! What each worker's pass report adds to the metrics when the pass led (OBS-2).

use super::MESSAGES;

/// A pass report that knows its counts.
pub(crate) trait Recorded {
    /// Emits the counters (and gauges) of a led pass of `worker` that reported `self`.
    fn record(&self, worker: &'static str);

    /// Zeroes the leader-only gauges that `self`, the last led pass of `worker`, set: once
    /// the instance no longer leads, the new leader reports them, and a stale value here
    /// would be summed with (or mistaken for) the leader's.
    fn step_down(&self, _worker: &'static str) {}
}

/// Adds `count` to `worker`'s `outcome` (registering it at 0, so it shows from the start).
fn messages(worker: &'static str, outcome: &'static str, count: u64) {
    metrics::counter!(MESSAGES, "worker" => worker, "outcome" => outcome).increment(count);
}

#[cfg(any(feature = "sweeper", feature = "cleanup"))]
#[allow(clippy::cast_precision_loss)] // Terms stay far below 2^52.
fn lease_term(worker: &'static str, term: Option<i64>) {
    if let Some(term) = term {
        metrics::gauge!("relayer_lease_term", "worker" => worker).set(term as f64);
    }
}

#[cfg(feature = "dispatcher")]
impl Recorded for relayer_dispatcher::PassReport {
    fn record(&self, worker: &'static str) {
        messages(worker, "sent", self.sent);
        messages(worker, "failed", self.failed);
        messages(worker, "dead", self.dead);
        messages(worker, "undecodable", self.undecodable);
    }
}

#[cfg(feature = "sweeper")]
impl Recorded for relayer_sweeper::SweepReport {
    fn record(&self, worker: &'static str) {
        messages(worker, "recovered", self.sent);
        messages(worker, "failed", self.failed);
        messages(worker, "dead", self.dead);
        messages(worker, "undecodable", self.undecodable);
        lease_term(worker, self.term);
    }

    fn step_down(&self, worker: &'static str) {
        lease_term(worker, self.term.map(|_| 0));
    }
}

#[cfg(feature = "cleanup")]
impl Recorded for relayer_cleanup::CleanupReport {
    fn record(&self, worker: &'static str) {
        for (table, count) in [("dead", self.dead_deleted), ("inbox", self.inbox_deleted)] {
            metrics::counter!(MESSAGES, "worker" => worker, "outcome" => "cleaned", "table" => table)
                .increment(count);
        }
        lease_term(worker, self.term);
    }

    fn step_down(&self, worker: &'static str) {
        lease_term(worker, self.term.map(|_| 0));
    }
}

/// Per message type: the moves as counters, the stuck dead letters as a gauge set on
/// every pass (DLP-5), so one that an operator moved reads 0 again.
#[cfg(feature = "dead-letters")]
impl Recorded for relayer_dead_letters::DeadLetterReport {
    fn record(&self, worker: &'static str) {
        for report in &self.types {
            let message_type = type_label(&report.message_type);
            for (outcome, count) in [("redriven", report.redriven), ("expired", report.expired)] {
                metrics::counter!(MESSAGES, "worker" => worker, "outcome" => outcome,
                    "type" => message_type.clone())
                .increment(count);
            }
            #[allow(clippy::cast_precision_loss)] // Counts stay far below 2^52.
            metrics::gauge!("relayer_dead_letters_stuck", "type" => message_type).set(report.stuck as f64);
        }
    }

    fn step_down(&self, _worker: &'static str) {
        for report in &self.types {
            metrics::gauge!("relayer_dead_letters_stuck", "type" => type_label(&report.message_type))
                .set(0.0);
        }
    }
}

/// A dead-letter type as a label: `queue:<original topic>/<dead-letter queue>` or
/// `outbox:<transport>/<destination>`.
#[cfg(feature = "dead-letters")]
fn type_label(message_type: &relayer_core::DeadLetterType) -> String {
    match message_type {
        relayer_core::DeadLetterType::Queue { original_topic, dead_letter_queue } => {
            format!("queue:{original_topic}/{dead_letter_queue}")
        }
        relayer_core::DeadLetterType::Outbox { transport, destination } => {
            format!("outbox:{transport}/{destination}")
        }
    }
}
