//! The lane path of the dispatcher (LAN-1..5).
//!
//! A pass claims up to `batch_size` lanes whose head is due and goes to no tripped
//! destination (one owner per lane across replicas, by a claim with a deadline in the
//! `lanes` table), then works them side by side on the pass's one connection
//! (tokio-postgres pipelines the statements). Within a lane only the head is sent, one at
//! a time, through the [`SendPath`](relayer_delivery::SendPath): accepted → deleted, next
//! head; failed → [`retry_or_bury`](relayer_core::retry_or_bury) decides: the head is
//! retried after the backoff and the lane waits (LAN-2), or the lane is parked. A lane
//! stops for this pass when it is empty, its head is not due, its destination's breaker is
//! open, or it has sent `batch_size` heads (so one busy lane cannot hold a pass forever);
//! then its claim is released.

use std::sync::PoisonError;

use relayer_core::FailureDecision;
use relayer_core::session::StoreSource;
use relayer_core::store::{HeadFailure, LaneClaimRequest, LaneHead, WorkLanes};
use relayer_delivery::HeadOutcome;
use relayer_worker::WorkerError;
use uuid::Uuid;

use crate::error::store;
use crate::report::PassReport;
use crate::session::DispatchSession;
use crate::shared::{Shared, TARGET};

/// How many lanes a lane claim may visit per lane it may claim.
const LANE_VISITS_PER_CLAIM: u32 = 4;

impl<S> Shared<S>
where
    S: StoreSource,
    S::Session: DispatchSession,
{
    /// Whether the lane loop has lanes to work: once a lane row was seen, always. Until
    /// then each lane pass only asks whether one exists, and says nothing when it cannot
    /// ask: a namespace that never had a lane row gets no lane claims, and a database
    /// outage is reported by the unordered loops alone, not twice.
    pub(crate) async fn lanes_in_use(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.lanes_seen.load(Ordering::Relaxed) {
            return true;
        }
        let found = match self.source.open().await {
            Ok(session) => session.any_lane_row().await.map_err(|e| relayer_core::error_chain(&e)),
            Err(error) => Err(relayer_core::error_chain(&error)),
        };
        match found {
            Ok(found) => {
                if found {
                    self.lanes_seen.store(true, Ordering::Relaxed);
                }
                found
            }
            Err(cause) => {
                tracing::debug!(target: TARGET, %cause, "could not look for lane rows; the lane loop waits");
                false
            }
        }
    }

    /// Claims due lanes (skipping tripped destinations, DSP-6) and works them.
    pub(crate) async fn lane_pass(&self, session: &S::Session) -> Result<PassReport, WorkerError> {
        let token = Uuid::new_v4();
        let after = self.lane_cursor.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let limit = self.options.batch_size();
        // Visit at most a few batches' worth of lanes per pass: lanes that cannot be claimed
        // (parked, scheduled, backing off, tripped) must not make a pass O(lanes).
        let visit_cap = limit.saturating_mul(LANE_VISITS_PER_CLAIM);
        let tripped = self.send.breakers().tripped();
        let request = LaneClaimRequest {
            claim: self.options.claim_duration(),
            limit,
            after: &after,
            visit_cap,
            tripped: &tripped,
        };
        let claim = session.claim_lanes(token, &request).await.map_err(store("claiming lanes"))?;
        *self.lane_cursor.lock().unwrap_or_else(PoisonError::into_inner) = claim.resume_after;
        let mut report = PassReport { lanes: claim.lanes.len() as u64, ..PassReport::default() };
        if claim.lanes.is_empty() {
            return Ok(report);
        }
        let results = futures_util::future::join_all(
            claim.lanes.iter().map(|lane| self.work_lane(session, token, lane)),
        )
        .await;
        // The first storage error is returned after every lane stopped (lanes left claimed
        // expire by their deadline, LAN-3).
        let mut first_error = None;
        for result in results {
            match result {
                Ok(lane) => report.absorb(&lane),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(WorkerError::store("working a lane", error)),
            None => Ok(report),
        }
    }

    /// Works the owned `lane` until it stops for this pass, then gives up the claim.
    async fn work_lane(
        &self,
        session: &S::Session,
        token: Uuid,
        lane: &str,
    ) -> Result<PassReport, <S::Session as relayer_core::Store>::Error> {
        let mut tally = PassReport::default();
        let claim = self.options.claim_duration();
        let mut keep_claim = false;
        for _ in 0..self.options.batch_size() {
            let head = match session.lane_head(lane, token, claim).await? {
                LaneHead::Due(head) => head,
                LaneHead::Undecodable(row) => {
                    // Park, never skip: nothing behind the head may overtake it (LAN-5).
                    tally.undecodable += 1;
                    let reason = row.to_string();
                    let failure = HeadFailure::Park { error: &reason };
                    if session.fail_head(lane, token, row.seq, failure).await? {
                        tally.lanes_parked += 1;
                        tracing::error!(target: TARGET, lane, seq = row.seq, error = %reason,
                            "lane parked behind an undecodable head; fix or skip it, then release the lane");
                        keep_claim = true; // the park dropped the claim
                    }
                    break;
                }
                LaneHead::Lost => {
                    keep_claim = true; // not ours any more: nothing to release
                    break;
                }
                // Elsewhere: the next head is another instance's transport (TRN-6); the
                // lane is let go, whole, for it.
                LaneHead::Empty | LaneHead::NotDue | LaneHead::Elsewhere => break,
            };
            match self.send.send_head(&head.transport, &head.destination, &head.envelope).await {
                // A head of a transport this process lacks (TRN-6; the lane claim only
                // passes such a lane when the head changed since): the lane waits, whole,
                // for an instance that has it — nothing recorded, nothing skipped.
                HeadOutcome::Tripped | HeadOutcome::Unregistered => break,
                HeadOutcome::Accepted => {
                    tally.sent += 1;
                    if !session.accept_head(lane, token, head.seq).await? {
                        keep_claim = true;
                        break;
                    }
                }
                HeadOutcome::Failed { error, decision, panicked, timed_out } => {
                    tally.failed += 1;
                    tally.panics += u64::from(panicked);
                    tally.timed_out += u64::from(timed_out);
                    let failure = match decision {
                        FailureDecision::Bury { .. } => HeadFailure::Park { error: &error },
                        FailureDecision::Retry { after, .. } => HeadFailure::Retry { error: &error, after },
                    };
                    let park = matches!(decision, FailureDecision::Bury { .. });
                    let recorded = session.fail_head(lane, token, head.seq, failure).await?;
                    // Not recorded: the lane claim was taken over; its new owner decides.
                    if park && recorded {
                        tally.lanes_parked += 1;
                        tracing::warn!(target: TARGET, lane, seq = head.seq, attempts = decision.attempts(),
                            error = %error, "lane parked behind a poison head; release or skip it to continue");
                        keep_claim = true; // the park dropped the claim
                    }
                    break;
                }
                _ => break,
            }
        }
        if !keep_claim {
            session.release_lane_claim(lane, token).await?;
        }
        Ok(tally)
    }
}
