//! Sending claimed rows: grouping (DSP-2), per-message outcomes (DSP-3), poison (DSP-5),
//! circuit breakers (DSP-6), and the catch that turns a transport's panic into a failed
//! send (TRN-2).
//!
//! Decisions here are pure given the outcomes: which rows are accepted, retried after
//! which delay, buried, or deferred. The I/O is the `send` calls; the caller writes the
//! resulting [`Completion`] in one statement.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use relayer_core::eligibility::is_poison;
use relayer_core::store::{ClaimedMessage, Completion};
use relayer_core::{
    BreakerState, CircuitBreaker, DispatcherOptions, Envelope, SendOutcome, Timestamp, Transport,
    TransportError, TransportRegistry,
};

/// The longest `last_error` stored: enough for a cause chain, bounded so a chatty
/// transport cannot bloat the outbox.
const MAX_ERROR_CHARS: usize = 2000;

/// A (transport, destination) pair: what a circuit breaker guards.
pub(crate) type Destination = (String, String);

/// One circuit breaker per destination (DSP-6), shared by passes and `dispatch_now`.
///
/// Breaker instants come from this process's monotonic clock, turned into a
/// [`Timestamp`] since start: a breaker compares only instants of its own, never a
/// database timestamp, so no clock skew can matter (NS-4).
pub(crate) struct Breakers {
    template: CircuitBreaker,
    started: Instant,
    by_destination: Mutex<HashMap<Destination, CircuitBreaker>>,
}

impl Breakers {
    pub(crate) fn new(template: CircuitBreaker) -> Self {
        Breakers { template, started: Instant::now(), by_destination: Mutex::new(HashMap::new()) }
    }

    fn now(&self) -> Timestamp {
        Timestamp::EPOCH.saturating_add(self.started.elapsed())
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Destination, CircuitBreaker>) -> T) -> T {
        // A panic while holding this lock cannot leave a breaker half-updated in a way
        // that matters: keep going with the data as it is.
        f(&mut self.by_destination.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Destinations to leave out of claims now: open, or half-open with a probe in flight.
    pub(crate) fn tripped(&self) -> Vec<Destination> {
        let now = self.now();
        self.with(|all| {
            all.iter()
                .filter(|(_, breaker)| {
                    {
                        // A copy: asking must not turn the real breaker half-open.
                        let mut probe = **breaker;
                        !matches!(probe.state(), BreakerState::Closed { .. }) && !probe.allows(now)
                    }
                })
                .map(|(destination, _)| destination.clone())
                .collect()
        })
    }

    /// Whether a send to `destination` may go now (an open breaker past its cool-down
    /// lets one probe through).
    pub(crate) fn allows(&self, destination: &Destination) -> bool {
        let now = self.now();
        self.with(|all| match all.get_mut(destination) {
            Some(breaker) => breaker.allows(now),
            None => true,
        })
    }

    pub(crate) fn record(&self, destination: &Destination, succeeded: bool) {
        let now = self.now();
        self.with(|all| {
            if succeeded {
                if let Some(breaker) = all.get_mut(destination) {
                    breaker.record_success();
                }
            } else {
                all.entry(destination.clone()).or_insert(self.template).record_failure(now);
            }
        });
    }

    pub(crate) fn cool_down(&self) -> Duration {
        self.template.cool_down()
    }
}

/// What sending a claimed batch came to: the [`Completion`] to write, fenced by the
/// claim's token, and counts for the pass's report.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SendTally {
    /// Every sent row's fate: accepted (delete), failed (retry after the per-row backoff,
    /// or bury as poison), or deferred (its destination's breaker is open).
    pub completion: Completion,
    /// Messages the transports accepted.
    pub accepted: u64,
    /// Messages whose send failed (panics and unknown transports included).
    pub failed: u64,
    /// Transport panics caught, each counted as failed sends.
    pub panics: u64,
}

/// The dispatcher's send path, for workers that claim outbox rows themselves: the
/// recovery sweeper reuses it (SWP-4) rather than copying it.
///
/// [`send`](SendPath::send) does what a dispatch pass does between its claim and its
/// completion: groups the claimed rows by (transport, destination) keeping `seq` order
/// (DSP-2), splits each group by the transport's batch limit, sends the groups
/// concurrently, catches a panicking transport (TRN-2), and decides each message's fate
/// from its outcome — accepted, retried after `options`' retry backoff, buried once it is
/// poison under `max_attempts` (DSP-3, DSP-5), or deferred while its destination's circuit
/// breaker is open (DSP-6). A row naming a transport missing from the registry is a
/// failed (transient) send. The caller writes the returned [`SendTally::completion`] with
/// [`CompleteOutbox::complete`](relayer_core::store::CompleteOutbox::complete) under the
/// token it claimed with.
///
/// A `SendPath` keeps its own circuit breakers, one per destination, across calls.
pub struct SendPath {
    transports: Arc<TransportRegistry>,
    breakers: Breakers,
    options: DispatcherOptions,
}

impl SendPath {
    /// A send path over `transports`, deciding retries, poison and breakers by `options`
    /// (its `retry_base`, `retry_max`, `max_attempts`, `breaker_threshold` and
    /// `breaker_cool_down`; the other fields are not used here).
    pub fn new(transports: Arc<TransportRegistry>, options: DispatcherOptions) -> Self {
        SendPath { breakers: Breakers::new(options.circuit_breaker()), transports, options }
    }

    /// The transports this path sends through, e.g. to tell a codec which rows it can send.
    pub fn transports(&self) -> &TransportRegistry {
        &self.transports
    }

    /// Sends `claimed` (unordered rows; lane rows must not be passed) and decides each
    /// row's fate. Never fails: every error, panic or missing transport becomes a failed
    /// send in the tally.
    pub async fn send(&self, claimed: Vec<ClaimedMessage>) -> SendTally {
        send_claimed(claimed, &self.transports, &self.breakers, &self.options).await
    }
}

impl std::fmt::Debug for SendPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendPath")
            .field("transports", &self.transports)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Sends `claimed` (unordered rows, seq order) and decides each row's fate.
pub(crate) async fn send_claimed(
    claimed: Vec<ClaimedMessage>,
    transports: &TransportRegistry,
    breakers: &Breakers,
    options: &DispatcherOptions,
) -> SendTally {
    // Group by destination, keeping seq order inside each group (DSP-2).
    let mut groups: BTreeMap<Destination, (Vec<i64>, Vec<Envelope>)> = BTreeMap::new();
    for message in claimed {
        let group = groups.entry((message.transport, message.destination)).or_default();
        group.0.push(message.seq);
        group.1.push(message.envelope);
    }
    let sends = groups.into_iter().map(|(destination, (seqs, envelopes))| {
        send_group(destination, seqs, envelopes, transports, breakers, options)
    });
    let mut tally = SendTally::default();
    for group in futures_util::future::join_all(sends).await {
        tally.accepted += group.accepted;
        tally.failed += group.failed;
        tally.panics += group.panics;
        group.completion.merge_into(&mut tally.completion);
    }
    tally
}

/// Rows of one group and their decisions, kept apart until merged.
#[derive(Default)]
struct GroupTally {
    completion: PendingCompletion,
    accepted: u64,
    failed: u64,
    panics: u64,
}

/// Decisions of one group, merged into the pass's [`Completion`] afterwards.
#[derive(Default)]
struct PendingCompletion {
    accepted: Vec<i64>,
    retried: Vec<(i64, String, Duration)>,
    buried: Vec<(i64, String)>,
    deferred: Vec<(i64, Duration)>,
}

impl PendingCompletion {
    fn merge_into(self, completion: &mut Completion) {
        for seq in self.accepted {
            completion.accept(seq);
        }
        for (seq, error, delay) in self.retried {
            completion.retry(seq, error, delay);
        }
        for (seq, error) in self.buried {
            completion.bury(seq, error);
        }
        for (seq, delay) in self.deferred {
            completion.defer(seq, delay);
        }
    }
}

async fn send_group(
    destination: Destination,
    seqs: Vec<i64>,
    envelopes: Vec<Envelope>,
    transports: &TransportRegistry,
    breakers: &Breakers,
    options: &DispatcherOptions,
) -> GroupTally {
    let mut tally = GroupTally::default();
    let Some(transport) = transports.get(&destination.0) else {
        // Written by a process that knows this transport; this dispatcher does not.
        let error =
            TransportError::transient(format!("no transport named {:?} in this dispatcher", destination.0));
        for (seq, envelope) in seqs.iter().zip(&envelopes) {
            fail(&mut tally, *seq, envelope.attempts, &error, options);
        }
        return tally;
    };
    let limit = transport.batch_limit().get();
    for (seq_chunk, chunk) in seqs.chunks(limit).zip(envelopes.chunks(limit)) {
        if !breakers.allows(&destination) {
            for seq in seq_chunk {
                tally.completion.deferred.push((*seq, breakers.cool_down()));
            }
            continue;
        }
        let (outcomes, panicked) = send_batch(transport, &destination.1, chunk).await;
        tally.panics += u64::from(panicked);
        let mut any_accepted = false;
        for ((seq, envelope), outcome) in seq_chunk.iter().zip(chunk).zip(outcomes) {
            match outcome {
                SendOutcome::Accepted => {
                    any_accepted = true;
                    tally.accepted += 1;
                    tally.completion.accepted.push(*seq);
                }
                SendOutcome::Failed(error) => fail(&mut tally, *seq, envelope.attempts, &error, options),
            }
        }
        breakers.record(&destination, any_accepted);
    }
    tally
}

fn fail(
    tally: &mut GroupTally,
    seq: i64,
    attempts_before: u32,
    error: &TransportError,
    options: &DispatcherOptions,
) {
    tally.failed += 1;
    let attempts = attempts_before.saturating_add(1);
    let text = bounded(error.chain());
    if is_poison(attempts, options.max_attempts(), error.class()) {
        tally.completion.buried.push((seq, text));
    } else {
        tally.completion.retried.push((seq, text, options.retry_backoff().delay_after(attempts)));
    }
}

/// Sends one batch and returns one outcome per message, and whether the transport
/// panicked. A transport error, a wrong number of outcomes or a panic fails every message.
pub(crate) async fn send_batch(
    transport: &Arc<dyn Transport>,
    destination: &str,
    batch: &[Envelope],
) -> (Vec<SendOutcome>, bool) {
    let all_failed = |error: TransportError| vec![SendOutcome::Failed(error); batch.len()];
    match AssertUnwindSafe(transport.send(destination, batch)).catch_unwind().await {
        Ok(Ok(outcomes)) if outcomes.len() == batch.len() => (outcomes, false),
        Ok(Ok(outcomes)) => (
            all_failed(TransportError::transient(format!(
                "transport {:?} returned {} outcomes for {} messages",
                transport.name(),
                outcomes.len(),
                batch.len()
            ))),
            false,
        ),
        Ok(Err(error)) => (all_failed(error), false),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_owned());
            tracing::error!(target: "relayer::dispatcher", transport = transport.name(), destination, panic = %what,
                "transport panicked; counted as a failed send");
            (
                all_failed(TransportError::transient(format!(
                    "transport {:?} panicked: {what}",
                    transport.name()
                ))),
                true,
            )
        }
    }
}

pub(crate) fn bounded(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(MAX_ERROR_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    text
}
