//! [`SendPath`]: claimed rows in, a [`Completion`] out. See the [crate docs](crate).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use relayer_core::breaker::DEFAULT_TRACKED_DESTINATIONS;
use relayer_core::{
    ClaimedMessage, Completion, DispatcherOptions, Envelope, FailureDecision, RetryPolicy, SendOutcome,
    TransportError, TransportRegistry, retry_or_bury,
};
use tokio::time::Instant;

use crate::batch::{BatchEnd, batch_limit, bounded, send_batch};
use crate::breakers::{BreakerTurn, Breakers, Destination};

/// What sending a claimed batch came to: the [`Completion`] to write under the claim, and
/// counts for the worker's report.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SendTally {
    /// Every row's fate: accepted (delete), failed (retry after the backoff, or bury as
    /// poison), or released unsent (a tripped destination, or the step's deadline passed).
    pub completion: Completion,
    /// Messages the transports accepted.
    pub accepted: u64,
    /// Messages whose send failed (panics and timeouts included).
    pub failed: u64,
    /// Transport panics caught, each failing its batch.
    pub panics: u64,
    /// Batches abandoned at their deadline (TRN-5), each failing its messages.
    pub timed_out: u64,
    /// Rows released unsent because the step's deadline came before their batch started.
    pub unsent: u64,
    /// Rows released unsent, no attempt counted, because they name a transport this
    /// process lacks (TRN-6): an instance that has it delivers them.
    pub unregistered: u64,
    /// Destinations whose breaker tripped during this call (DSP-6): hold their other due
    /// rows back for [`Breakers::cool_down`].
    pub tripped: Vec<Destination>,
    /// Destinations whose tripped breaker closed during this call (a send was accepted):
    /// release the rows their hold parked (DSP-6d).
    pub recovered: Vec<Destination>,
}

/// The fate of one lane head sent with [`SendPath::send_head`].
#[derive(Debug)]
#[non_exhaustive]
pub enum HeadOutcome {
    /// Its destination's breaker is open: nothing was sent.
    Tripped,
    /// It names a transport this process lacks (TRN-6): nothing was sent and nothing is
    /// to be recorded; its lane waits for an instance that has the transport.
    Unregistered,
    /// The transport accepted it.
    Accepted,
    /// The send failed; `decision` says whether to retry it or park its lane (LAN-2).
    Failed {
        /// The error's cause chain, bounded for `last_error`.
        error: String,
        /// Retry after a delay, or bury (park the lane).
        decision: FailureDecision,
        /// The transport panicked.
        panicked: bool,
        /// The send was abandoned at its deadline (TRN-5).
        timed_out: bool,
    },
}

/// The transport-generic send path shared by the dispatcher (unordered rows and lane heads)
/// and the recovery sweeper (SWP-4): see the [crate docs](crate) for what it does.
///
/// A `SendPath` keeps its own circuit breakers, one per destination, across calls. Give
/// every worker of a service the same [`DispatcherOptions`], so a row is judged alike
/// whoever sends it.
///
/// ```no_run
/// # async fn example(transports: std::sync::Arc<relayer_core::TransportRegistry>, claimed: Vec<relayer_core::ClaimedMessage>) {
/// use relayer_core::DispatcherOptions;
/// use relayer_delivery::SendPath;
///
/// let send = SendPath::new(transports, DispatcherOptions::default());
/// let deadline = tokio::time::Instant::now() + send.options().claim_duration() / 2;
/// let tally = send.send(claimed, deadline).await;
/// // … write tally.completion under the claim, then hold back tally.tripped's due rows.
/// # }
/// ```
pub struct SendPath {
    transports: Arc<TransportRegistry>,
    breakers: Breakers,
    options: DispatcherOptions,
    policy: RetryPolicy,
}

impl SendPath {
    /// A send path over `transports`, judging retries, poison, deadlines and breakers by
    /// `options` (`retry_base`, `retry_max`, `max_attempts`, `send_timeout`,
    /// `breaker_threshold`, `breaker_cool_down`; the other fields are not used here).
    pub fn new(transports: Arc<TransportRegistry>, options: DispatcherOptions) -> Self {
        SendPath {
            breakers: Breakers::new(options.circuit_breaker(), DEFAULT_TRACKED_DESTINATIONS),
            policy: options.retry_policy(),
            transports,
            options,
        }
    }

    /// The options this path judges by.
    pub fn options(&self) -> &DispatcherOptions {
        &self.options
    }

    /// The transports it sends through.
    pub fn transports(&self) -> &Arc<TransportRegistry> {
        &self.transports
    }

    /// Its circuit breakers.
    pub fn breakers(&self) -> &Breakers {
        &self.breakers
    }

    /// Sends `claimed` (unordered rows, in `seq` order; lane rows must not be passed) and
    /// decides each row's fate. No batch runs past `deadline`. Never fails: every error,
    /// panic or timeout becomes a failed send in the tally; a row naming a transport this
    /// process lacks is released unsent, no attempt counted (TRN-6).
    pub async fn send(&self, claimed: Vec<ClaimedMessage>, deadline: Instant) -> SendTally {
        // Group by destination, keeping seq order inside each group (DSP-2).
        let mut groups: BTreeMap<Destination, (Vec<i64>, Vec<Envelope>)> = BTreeMap::new();
        for message in claimed {
            let group = groups.entry((message.transport, message.destination)).or_default();
            group.0.push(message.seq);
            group.1.push(message.envelope);
        }
        let sends = groups
            .into_iter()
            .map(|(destination, (seqs, envelopes))| self.send_group(destination, seqs, envelopes, deadline));
        let mut tally = SendTally::default();
        for group in futures_util::future::join_all(sends).await {
            group.merge_into(&mut tally);
        }
        tally
    }

    /// Sends one lane head, unless its destination is tripped, bounded by `send_timeout`.
    pub async fn send_head(&self, transport: &str, destination: &str, envelope: &Envelope) -> HeadOutcome {
        let key = (transport.to_owned(), destination.to_owned());
        let Some(found) = self.transports.get(transport) else {
            return HeadOutcome::Unregistered;
        };
        if !self.breakers.allows(&key) {
            return HeadOutcome::Tripped;
        }
        let timeout = self.options.effective_send_timeout();
        let (mut outcomes, end) =
            send_batch(found, destination, std::slice::from_ref(envelope), timeout).await;
        let outcome =
            outcomes.pop().unwrap_or_else(|| SendOutcome::Failed(TransportError::transient("no outcome")));
        match outcome {
            SendOutcome::Accepted => {
                self.breakers.record(&key, true);
                HeadOutcome::Accepted
            }
            SendOutcome::Failed(error) => {
                self.breakers.record(&key, false);
                let decision = retry_or_bury(&self.policy, envelope.attempts, error.class());
                HeadOutcome::Failed {
                    error: bounded(&error.chain()),
                    decision,
                    panicked: end.panicked,
                    timed_out: end.timed_out,
                }
            }
        }
    }

    async fn send_group(
        &self,
        destination: Destination,
        seqs: Vec<i64>,
        envelopes: Vec<Envelope>,
        deadline: Instant,
    ) -> GroupTally {
        let mut tally = GroupTally::default();
        let Some(transport) = self.transports.get(&destination.0) else {
            // Written by a process that has this transport; this one does not (TRN-6). A
            // store given the registry never hands such rows over; one that does gets them
            // back unsent, no attempt counted, out of its claims for a cool-down so it does
            // not spin on them, for an instance that has the transport.
            tally.unregistered += seqs.len() as u64;
            tally.deferred.extend(seqs.iter().map(|seq| (*seq, self.breakers.cool_down())));
            return tally;
        };
        let limit = match batch_limit(transport.as_ref()) {
            Ok(limit) => limit.get(),
            Err(error) => {
                tally.panics += 1;
                for (seq, envelope) in seqs.iter().zip(&envelopes) {
                    tally.fail(*seq, envelope.attempts, &error, &self.policy);
                }
                return tally;
            }
        };
        let send_timeout = self.options.effective_send_timeout();
        for (seq_chunk, chunk) in seqs.chunks(limit).zip(envelopes.chunks(limit)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // The step's time is up: release the rest unsent, without an attempt.
                tally.unsent += seq_chunk.len() as u64;
                tally.deferred.extend(seq_chunk.iter().map(|seq| (*seq, Duration::ZERO)));
                continue;
            }
            if !self.breakers.allows(&destination) {
                tally.deferred.extend(seq_chunk.iter().map(|seq| (*seq, self.breakers.cool_down())));
                continue;
            }
            let (outcomes, end) = send_batch(transport, &destination.1, chunk, send_timeout.min(left)).await;
            tally.record_end(end);
            let mut any_accepted = false;
            for ((seq, envelope), outcome) in seq_chunk.iter().zip(chunk).zip(outcomes) {
                match outcome {
                    SendOutcome::Accepted => {
                        any_accepted = true;
                        tally.accepted.push(*seq);
                    }
                    SendOutcome::Failed(error) => tally.fail(*seq, envelope.attempts, &error, &self.policy),
                }
            }
            match self.breakers.record(&destination, any_accepted) {
                BreakerTurn::Tripped => tally.tripped = Some(destination.clone()),
                BreakerTurn::Closed => tally.recovered = Some(destination.clone()),
                BreakerTurn::Unchanged => {}
            }
        }
        tally
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

/// One group's decisions and counts, kept apart until merged.
#[derive(Default)]
struct GroupTally {
    accepted: Vec<i64>,
    retried: Vec<(i64, String, Duration)>,
    buried: Vec<(i64, String)>,
    deferred: Vec<(i64, Duration)>,
    failed: u64,
    panics: u64,
    timed_out: u64,
    unsent: u64,
    unregistered: u64,
    tripped: Option<Destination>,
    recovered: Option<Destination>,
}

impl GroupTally {
    fn fail(&mut self, seq: i64, attempts_before: u32, error: &TransportError, policy: &RetryPolicy) {
        self.failed += 1;
        let text = bounded(&error.chain());
        match retry_or_bury(policy, attempts_before, error.class()) {
            FailureDecision::Bury { .. } => self.buried.push((seq, text)),
            FailureDecision::Retry { after, .. } => self.retried.push((seq, text, after)),
        }
    }

    fn record_end(&mut self, end: BatchEnd) {
        self.panics += u64::from(end.panicked);
        self.timed_out += u64::from(end.timed_out);
    }

    fn merge_into(self, tally: &mut SendTally) {
        tally.accepted += self.accepted.len() as u64;
        tally.failed += self.failed;
        tally.panics += self.panics;
        tally.timed_out += self.timed_out;
        tally.unsent += self.unsent;
        tally.unregistered += self.unregistered;
        tally.tripped.extend(self.tripped);
        tally.recovered.extend(self.recovered);
        let completion = &mut tally.completion;
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
