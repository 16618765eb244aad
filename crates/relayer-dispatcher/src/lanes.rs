//! The lane path of a pass (LAN-1..5).
//!
//! A pass claims up to `batch_size` lanes whose head is due (one owner per lane across
//! replicas, by a claim with a deadline in the `lanes` table), then works them side by side
//! on the pass's one connection (tokio-postgres pipelines the statements). Within a lane
//! only the head is sent, one at a time: accepted → deleted, next head; failed → the head
//! is retried after the backoff and the lane waits (LAN-2), or, when the failure makes the
//! head poison under `max_attempts`, the lane is parked. A lane stops for this pass when it
//! is empty, its head is not due, its destination's breaker is open, or it has sent
//! `batch_size` heads (so one busy lane cannot hold a pass forever); then its claim is
//! released.

use relayer_core::eligibility::is_poison;
use relayer_core::{DispatcherOptions, SendOutcome, TransportError, TransportRegistry};
use relayer_postgres::{Executor, HeadFailure, LaneHead, LaneStatements, StorageError};
use uuid::Uuid;

use crate::send::{Breakers, bounded, send_batch};

/// What one lane did in a pass.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaneTally {
    pub(crate) sent: u64,
    pub(crate) failed: u64,
    pub(crate) parked: u64,
    pub(crate) panics: u64,
    pub(crate) undecodable: u64,
}

/// Shared, read-only context of a pass's lane work.
pub(crate) struct LaneContext<'a> {
    pub(crate) statements: &'a LaneStatements,
    pub(crate) transports: &'a TransportRegistry,
    pub(crate) breakers: &'a Breakers,
    pub(crate) options: &'a DispatcherOptions,
    pub(crate) token: Uuid,
}

/// Works the owned `lane` until it stops for this pass, then gives up the claim.
pub(crate) async fn work_lane(
    client: &impl Executor,
    context: &LaneContext<'_>,
    lane: &str,
) -> Result<LaneTally, StorageError> {
    let mut tally = LaneTally::default();
    let claim = context.options.claim_duration();
    let mut keep_claim = false;
    for _ in 0..context.options.batch_size() {
        let head = match context.statements.head(client, lane, context.token, claim).await? {
            LaneHead::Due(head) => head,
            LaneHead::Undecodable(row) => {
                // Park, never skip: nothing behind the head may overtake it (LAN-5).
                tally.undecodable += 1;
                let reason = row.to_string();
                let failure = HeadFailure::Park { error: &reason };
                if context.statements.fail_head(client, lane, context.token, row.seq, failure).await? {
                    tally.parked += 1;
                    tracing::error!(target: "relayer::dispatcher", lane, seq = row.seq, error = %reason,
                        "lane parked behind an undecodable head; fix or skip it, then release the lane");
                    keep_claim = true; // the park dropped the claim
                }
                break;
            }
            LaneHead::Lost => {
                keep_claim = true; // not ours any more: nothing to release
                break;
            }
            LaneHead::Empty | LaneHead::NotDue => break,
        };
        let destination = (head.transport.clone(), head.destination.clone());
        let outcome = match context.transports.get(&head.transport) {
            None => SendOutcome::Failed(TransportError::transient(format!(
                "no transport named {:?} in this dispatcher",
                head.transport
            ))),
            Some(_) if !context.breakers.allows(&destination) => break,
            Some(transport) => {
                let (mut outcomes, panicked) =
                    send_batch(transport, &head.destination, std::slice::from_ref(&head.envelope)).await;
                tally.panics += u64::from(panicked);
                outcomes.pop().unwrap_or_else(|| SendOutcome::Failed(TransportError::transient("no outcome")))
            }
        };
        match outcome {
            SendOutcome::Accepted => {
                context.breakers.record(&destination, true);
                tally.sent += 1;
                if !context.statements.accept_head(client, lane, context.token, head.seq).await? {
                    keep_claim = true;
                    break;
                }
            }
            SendOutcome::Failed(error) => {
                context.breakers.record(&destination, false);
                tally.failed += 1;
                let attempts = head.envelope.attempts.saturating_add(1);
                let park = is_poison(attempts, context.options.max_attempts(), error.class());
                let text = bounded(error.chain());
                let failure = if park {
                    HeadFailure::Park { error: &text }
                } else {
                    HeadFailure::Retry {
                        error: &text,
                        after: context.options.retry_backoff().delay_after(attempts),
                    }
                };
                let recorded =
                    context.statements.fail_head(client, lane, context.token, head.seq, failure).await?;
                // Not recorded: the lane claim was taken over; its new owner decides.
                if park && recorded {
                    tally.parked += 1;
                    tracing::warn!(target: "relayer::dispatcher", lane, seq = head.seq, attempts, error = %text,
                        "lane parked behind a poison head; release or skip it to continue");
                    keep_claim = true; // the park dropped the claim
                }
                break;
            }
        }
    }
    if !keep_claim {
        context.statements.release_claim(client, lane, context.token).await?;
    }
    Ok(tally)
}

/// Works every owned lane side by side; the first storage error is returned after all
/// lanes stopped (lanes left claimed expire by their deadline, LAN-3).
pub(crate) async fn work_lanes(
    client: &impl Executor,
    context: &LaneContext<'_>,
    lanes: &[String],
) -> Result<LaneTally, StorageError> {
    let results =
        futures_util::future::join_all(lanes.iter().map(|lane| work_lane(client, context, lane))).await;
    let mut total = LaneTally::default();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(tally) => {
                total.sent += tally.sent;
                total.failed += tally.failed;
                total.parked += tally.parked;
                total.panics += tally.panics;
                total.undecodable += tally.undecodable;
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(total),
    }
}
