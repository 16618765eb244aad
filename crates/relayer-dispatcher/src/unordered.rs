//! The unordered path of the dispatcher (DSP-1..6, DSP-1b): claim a batch of due rows,
//! send it through the [`SendPath`](relayer_delivery::SendPath), complete it in one
//! statement fenced by the claim's token, and hold back the due rows of destinations that
//! tripped.
//!
//! A pass pipelines its batches (DSP-1b). While batch N is at its transport, the pass
//! claims batch N+1 — only when N was full, so a pass that drained the backlog stops —
//! and completes batch N−1; the three overlap on the pass's one store session, whose
//! statements the PostgreSQL client pipelines on its connection (LIF-2). A loop that did
//! claim → send → complete strictly in turn ran at about `1 / (1/transport + 1/database)`;
//! overlapped, it runs near the slower of the two. A pass stops after
//! [`MAX_BATCHES_PER_PASS`], after a batch that was not full, after a storage error, after
//! a send that timed out, and at shutdown. Whatever stops it, the batch it sent is
//! completed, and a batch it claimed but did not send is released at once (deferred with
//! no delay, no attempt counted), so a pass leaves no row claimed behind it — unless the
//! store itself fails, when the rows wait for their claims to lapse (LIF-3).
//!
//! Each batch keeps its own token and its own deadline: its sends end by half the claim
//! counted from when *that* batch's claim was sent (TRN-5). A prefetched batch whose
//! deadline is more than half gone by the time its turn comes is released instead of
//! sent. A batch claimed before a breaker tripped (the claim overlapped the send that
//! tripped it) may hold the destination's rows: the send path releases them for the
//! cool-down, and the hold-back still runs once per trip, with the batch whose send
//! tripped it (DSP-6).

use std::sync::atomic::Ordering;
use std::time::Duration;

use relayer_core::session::StoreSource;
use relayer_core::store::{
    ClaimOutbox, Claimed, CompleteOutbox, Completion, CompletionReport, HoldBackDestination, UndecodableRow,
};
use relayer_delivery::SendTally;
use relayer_worker::WorkerError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::store;
use crate::report::PassReport;
use crate::session::DispatchSession;
use crate::shared::{Shared, TARGET};

/// The most batches one pass works before it ends and its loop decides, like after any
/// pass, whether to go on at once: bounds how long a pass holds its session.
pub(crate) const MAX_BATCHES_PER_PASS: usize = 16;

impl<S> Shared<S>
where
    S: StoreSource,
    S::Session: DispatchSession,
{
    /// One pipelined pass (DSP-1b) on `session`, until its bound: see the module docs.
    /// Once `shutdown` is cancelled it sends no further batch, completes the one it sent
    /// and releases the one it claimed.
    pub(crate) async fn unordered_pass(
        &self,
        session: &S::Session,
        shutdown: &CancellationToken,
    ) -> Result<PassReport, WorkerError> {
        let full = self.options.batch_size() as usize;
        let mut report = PassReport::default();
        let mut next = Some(self.claim_batch(session).await?);
        // Whether the batch claimed last was full: the backlog may go on (`again_at_once`).
        let mut last_full = next.as_ref().is_some_and(|batch| batch.len() >= full);
        if last_full {
            // A backlog: bring a sibling loop in now, not when this pass's batches are done.
            self.wake.unordered.notify_one();
        }
        let mut unfinished: Option<Sent> = None;
        let mut first_error = None;
        for round in 1..=MAX_BATCHES_PER_PASS {
            let Some(batch) = next.take() else { break };
            if batch.is_empty() {
                break;
            }
            if shutdown.is_cancelled() || (round > 1 && !self.worth_sending(&batch)) {
                next = Some(batch);
                break;
            }
            let prefetch = batch.len() >= full && round < MAX_BATCHES_PER_PASS && self.prefetch_pays();
            let previous = unfinished.take();
            let (sent, claimed, completed) = tokio::join!(
                self.send_batch(batch),
                async {
                    if prefetch && !shutdown.is_cancelled() {
                        Some(self.claim_batch(session).await)
                    } else {
                        None
                    }
                },
                async {
                    match previous {
                        Some(previous) => Some(self.complete_sent(session, previous).await),
                        None => None,
                    }
                },
            );
            let timed_out = sent.tally.timed_out > 0;
            unfinished = Some(sent);
            match completed {
                Some(Ok(done)) => report.absorb(&done),
                Some(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                None => {}
            }
            match claimed {
                Some(Ok(batch)) => {
                    last_full = batch.len() >= full;
                    next = Some(batch);
                }
                Some(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                None => {}
            }
            // A send that timed out says the transport is slow: a prefetched batch would
            // only wait out its claim, so it goes back now.
            if first_error.is_some() || timed_out {
                break;
            }
        }
        // Whatever ended the pass: complete what was sent, release what was not.
        let (completed, released) = tokio::join!(
            async {
                match unfinished {
                    Some(sent) => Some(self.complete_sent(session, sent).await),
                    None => None,
                }
            },
            async {
                match next {
                    Some(batch) if !batch.is_empty() => Some(self.release_unsent(session, batch).await),
                    _ => None,
                }
            },
        );
        for result in [completed, released].into_iter().flatten() {
            match result {
                Ok(done) => report.absorb(&done),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            // Rows whose completion failed stay claimed until their deadline (LIF-3). What
            // the pass's earlier batches did is logged, or the error would hide it.
            Some(error) => {
                if report.claimed > 0 {
                    tracing::info!(target: TARGET, %report, "the failed pass completed batches before its error");
                }
                Err(error)
            }
            None => {
                report.more_due = last_full;
                Ok(report)
            }
        }
    }

    /// Sends rows claimed under `token` — the claim sent at `claimed_at`, where the send
    /// deadline counts from — and completes them (commit-triggered dispatch).
    pub(crate) async fn send_and_complete(
        &self,
        session: &S::Session,
        token: Uuid,
        claimed_at: Instant,
        claimed: Claimed,
    ) -> Result<PassReport, WorkerError> {
        let batch = Batch { token, claimed_at, claimed };
        if batch.is_empty() {
            return Ok(PassReport::default());
        }
        let sent = self.send_batch(batch).await;
        self.complete_sent(session, sent).await
    }

    /// Claims up to a batch of due rows under a new token, leaving out tripped destinations
    /// (DSP-6).
    async fn claim_batch(&self, session: &S::Session) -> Result<Batch, WorkerError> {
        let token = Uuid::new_v4();
        // Taken before the claim is sent, so the send deadline errs early, never late.
        let claimed_at = Instant::now();
        let tripped = self.send.breakers().tripped();
        let claimed = session
            .claim_due(token, self.options.claim_duration(), self.options.batch_size(), &tripped)
            .await
            .map_err(store("claiming due outbox rows"))?;
        Ok(Batch { token, claimed_at, claimed })
    }

    /// Whether a batch claimed now would still have a whole send timeout left once the
    /// send in flight ends, judged by how long the latest send took: when it would not
    /// (a slow transport, or a send timeout of half the claim), the pass claims batch by
    /// batch instead of claiming ahead only to release.
    fn prefetch_pays(&self) -> bool {
        let claim = self.options.claim_duration();
        let slack = (claim / 2).saturating_sub(self.options.effective_send_timeout());
        let last = self.last_send_micros.load(Ordering::Relaxed);
        !slack.is_zero() && (last == u64::MAX || Duration::from_micros(last) <= slack)
    }

    /// Whether a prefetched batch still has a whole send timeout before its deadline:
    /// otherwise a send a fresh batch would finish could time out, count an attempt and
    /// feed the breaker, so the batch is released instead (TRN-5).
    fn worth_sending(&self, batch: &Batch) -> bool {
        let claim = self.options.claim_duration();
        let needed = self.options.effective_send_timeout().min(claim / 2);
        batch.deadline(claim).saturating_duration_since(Instant::now()) >= needed
    }

    /// Sends `batch`, its sends ending by half its claim (TRN-5), leaving the other half
    /// to complete it before another dispatcher may take the rows over.
    async fn send_batch(&self, batch: Batch) -> Sent {
        let deadline = batch.deadline(self.options.claim_duration());
        let claimed = batch.len() as u64;
        // Rows naming a transport this process lacks come back unsent from the send path,
        // no attempt counted (TRN-6); relayer's store never claims them.
        let Claimed { messages, undecodable, .. } = batch.claimed;
        log_undecodable(&undecodable);
        let started = Instant::now();
        let tally =
            if messages.is_empty() { SendTally::default() } else { self.send.send(messages, deadline).await };
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
        self.last_send_micros.store(took, Ordering::Relaxed);
        Sent { token: batch.token, claimed, undecodable, tally }
    }

    /// Completes a sent batch under its token — rows that could not be decoded go to the
    /// dead table in the same statement (SPEC §15) — and holds back the due rows of
    /// destinations whose breaker its send tripped (DSP-6).
    async fn complete_sent(&self, session: &S::Session, sent: Sent) -> Result<PassReport, WorkerError> {
        let Sent { token, claimed, undecodable, mut tally } = sent;
        tally.completion.bury_undecodable(&undecodable);
        let written =
            session.complete(token, &tally.completion).await.map_err(store("completing sent outbox rows"))?;
        let mut report = batch_report(claimed, undecodable.len() as u64, &written);
        report.sent = tally.accepted;
        report.failed = tally.failed;
        report.panics = tally.panics;
        report.timed_out = tally.timed_out;
        let cool_down = self.send.breakers().cool_down();
        // A breaker that closed frees what its hold parked (DSP-6d) before any new hold; a
        // failure only leaves the parked rows to come back by themselves.
        for (transport, destination) in &tally.recovered {
            match session.release_held(transport, destination, cool_down).await {
                Ok(released) => tracing::info!(target: TARGET, transport, destination, released,
                    "circuit breaker closed; the destination's held rows are due again"),
                Err(error) => tracing::warn!(target: TARGET, transport, destination,
                    error = %relayer_core::error_chain(&error),
                    "could not release a recovered destination's held rows; they come back when their hold ends"),
            }
        }
        for (transport, destination) in &tally.tripped {
            let held = session
                .hold_back(transport, destination, cool_down)
                .await
                .map_err(store("holding back a tripped destination's rows"))?;
            report.held_back += held;
            tracing::warn!(target: TARGET, transport, destination, held_back = held, ?cool_down,
                "circuit breaker tripped; the destination's due rows wait out its cool-down");
        }
        Ok(report)
    }

    /// Gives a claimed, unsent batch back at once: due again now, no attempt counted.
    /// Undecodable rows go to the dead table as in any completion (SPEC §15).
    async fn release_unsent(&self, session: &S::Session, batch: Batch) -> Result<PassReport, WorkerError> {
        let mut completion = Completion::new();
        for message in &batch.claimed.messages {
            completion.defer(message.seq, Duration::ZERO);
        }
        log_undecodable(&batch.claimed.undecodable);
        completion.bury_undecodable(&batch.claimed.undecodable);
        let written = session
            .complete(batch.token, &completion)
            .await
            .map_err(store("releasing claimed, unsent outbox rows"))?;
        Ok(batch_report(batch.len() as u64, batch.claimed.undecodable.len() as u64, &written))
    }
}

/// Says, for each undecodable row, what and where before it moves to the dead table (§15).
fn log_undecodable(rows: &[UndecodableRow]) {
    for row in rows {
        tracing::error!(target: TARGET, seq = row.seq, error = %row, "moving an undecodable row to the dead table");
    }
}

/// The counts every completed batch reports, whether sent or released.
fn batch_report(claimed: u64, undecodable: u64, written: &CompletionReport) -> PassReport {
    if written.fenced_out > 0 {
        tracing::warn!(target: TARGET, fenced_out = written.fenced_out,
            "claims expired before completion and were taken over; those rows are left to their new owner");
    }
    PassReport {
        claimed,
        undecodable,
        dead: written.dead,
        deferred: written.deferred,
        fenced_out: written.fenced_out,
        ..PassReport::default()
    }
}

/// One claimed batch and when its claim was sent.
struct Batch {
    token: Uuid,
    claimed_at: Instant,
    claimed: Claimed,
}

impl Batch {
    /// Rows claimed, undecodable ones included.
    fn len(&self) -> usize {
        self.claimed.messages.len() + self.claimed.undecodable.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When its sends must have ended: half its claim after the claim (TRN-5).
    fn deadline(&self, claim: Duration) -> Instant {
        self.claimed_at + claim / 2
    }
}

/// A batch after its send, waiting for its completion.
struct Sent {
    token: Uuid,
    claimed: u64,
    undecodable: Vec<UndecodableRow>,
    tally: SendTally,
}
