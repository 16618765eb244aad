//! Worker metrics through the `metrics` facade (OBS-2), behind the `metrics` feature.
//!
//! No worker crate knows about metrics. The host subscribes to what each worker tells
//! anyway — the pass events of every pass loop ([`pass_events`]), and each queue
//! consumer's handler calls and counters ([`consumer`]) — and turns them into counters, a
//! histogram and gauges, each emitted here and only here. Install a recorder (e.g.
//! `metrics-exporter-prometheus`) to see them; without one every call is a no-op: an
//! application that installs no recorder pays one idle task per worker, and one built
//! without the feature pays nothing.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | `relayer_messages_total` | counter | `worker`, `outcome` | messages a worker moved: `sent`, `failed`, `dead`, `undecodable` (dispatcher); `recovered`, `failed`, `dead`, `undecodable` (sweeper); `cleaned` with `table` (cleanup); `redriven`, `expired` with `type` (dead-letter policies); `received`, `acked`, `requeued`, `dead`, `undecodable`, `duplicate`, `panicked`, `overran`, `lapsed`, `abandoned` with `queue` (consumer) |
//! | `relayer_passes_total` | counter | `worker`, `result` | passes by result: `led`, `not_leader`, `failed` |
//! | `relayer_pass_duration_seconds` | histogram | `worker`, `result` | wall time of each pass, as its own loop measured it |
//! | `relayer_handler_duration_seconds` | histogram | `queue`, `outcome` | wall time of each consumer handler call: `ack`, `requeue`, `reject`, `panicked`, `overran`, `abandoned` |
//! | `relayer_worker_seconds_since_last_success` | gauge | `worker` | seconds since this instance's last successful pass (led or not), refreshed every few seconds: a stalled worker shows a growing value |
//! | `relayer_leader` | gauge | `worker` | 1 while this instance led the worker's last pass, else 0 |
//! | `relayer_lease_term` | gauge | `worker` | the lease term of the last led pass (lease leadership only); 0 once a pass does not lead |
//! | `relayer_dead_letters_stuck` | gauge | `type` | dead letters past their redrive window, as of the last policy pass (DLP-5); 0 on an instance that no longer leads |

// With no worker compiled in, there is nothing to observe.
#![cfg_attr(
    not(any(feature = "dispatcher", feature = "sweeper", feature = "cleanup", feature = "dead-letters")),
    allow(dead_code)
)]

#[cfg(feature = "consumer")]
pub(crate) mod consumer;
pub(crate) mod pass_events;
mod reports;

pub(crate) use pass_events::observe;

/// The counter of messages moved, by worker and outcome.
const MESSAGES: &str = "relayer_messages_total";

/// How often the time-since-success gauges and the consumer counters are refreshed between
/// events.
const REFRESH: std::time::Duration = std::time::Duration::from_secs(5);
