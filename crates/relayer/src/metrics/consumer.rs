//! A queue consumer's metrics: its counters per queue, and the duration of each handler
//! call.
//!
//! The pump counts exactly in [`ConsumerStats`]; the counters here follow it by adding
//! what grew since the last look — every few seconds, and a last time when the pump has
//! stopped (its call channel closes) — so they are exact, never double-counted, and add
//! up across hosts of one process. Handler durations come from the pump's handler-call
//! events as they happen.

use std::sync::Arc;

use relayer_consumer::{Consumer, ConsumerStats, HandlerCall, StatsSnapshot};
use tokio::sync::broadcast::{self, error::RecvError};

use super::{MESSAGES, REFRESH};

/// Records `consumer`'s metrics on a task of its own until it has stopped. Call it before
/// the consumer runs, so no call goes unseen.
pub(crate) fn observe<S: relayer_core::StoreSource>(consumer: &Consumer<S>) {
    let queue = consumer.subscription().queue().to_owned();
    tokio::spawn(watch(queue, consumer.subscribe(), consumer.stats()));
}

async fn watch(queue: String, mut calls: broadcast::Receiver<HandlerCall>, stats: Arc<ConsumerStats>) {
    let mut counted = StatsSnapshot::default();
    let mut refresh = tokio::time::interval(REFRESH);
    loop {
        tokio::select! {
            call = calls.recv() => match call {
                Ok(call) => metrics::histogram!("relayer_handler_duration_seconds",
                    "queue" => queue.clone(), "outcome" => call.outcome.name())
                .record(call.duration.as_secs_f64()),
                // Calls were dropped: their durations are lost; the counters are not.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => {
                    add_growth(&queue, &mut counted, stats.snapshot());
                    return;
                }
            },
            _ = refresh.tick() => add_growth(&queue, &mut counted, stats.snapshot()),
        }
    }
}

/// Adds to each counter of `queue` what it grew from `counted` to `now`.
fn add_growth(queue: &str, counted: &mut StatsSnapshot, now: StatsSnapshot) {
    let grown = [
        ("received", now.received, counted.received),
        ("acked", now.acked, counted.acked),
        ("requeued", now.requeued, counted.requeued),
        ("dead", now.dead_lettered, counted.dead_lettered),
        ("undecodable", now.undecodable, counted.undecodable),
        ("duplicate", now.duplicates, counted.duplicates),
        ("panicked", now.panicked, counted.panicked),
        ("overran", now.overran, counted.overran),
        ("lapsed", now.lapsed, counted.lapsed),
        ("abandoned", now.abandoned, counted.abandoned),
    ];
    for (outcome, now, before) in grown {
        metrics::counter!(MESSAGES, "worker" => "consumer", "queue" => queue.to_owned(), "outcome" => outcome)
            .increment(now.saturating_sub(before));
    }
    *counted = now;
}
