//! Settling messages: ack, requeue or dead-letter, batched, fenced by receipt.
//!
//! Handler tasks do not write their outcome themselves: they queue a `Settlement` and
//! wake the settle loop, whose pass writes everything queued since the last one in at most
//! three statements (one per kind) on one connection. Under load the batches form on their
//! own while the previous statement runs, so acks cost a round trip per batch, not per
//! message. A handler's slot is freed when it returns, not when its settlement is written
//! (the wait for the settle pass and the statement would otherwise cap the pump at
//! `concurrency` messages per settle round trip); the settlement holds a place among the
//! `max_pending_settlements` instead. A write that loses a conflict (a deadlock, a lock
//! not available) is retried at once after a short pause; one that still fails is kept and
//! retried with the loop's backoff — or sooner, when a new settlement wakes the loop — while
//! the heartbeat keeps the messages invisible.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::Receipt;
use relayer_core::session::StoreSource;
use relayer_core::store::{DeadLetter, Requeue, SettleQueue};
use relayer_worker::{Pass, PassOutcome, WorkerError};
use tokio_util::sync::CancellationToken;

use crate::pump::{ConsumeSession, Pump};
use crate::retry::retrying_conflicts;
use crate::settlement::{Settlement, SettlementKind};
use crate::stats::Counter;

/// What one settle pass wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SettleReport {
    settled: usize,
    lapsed: usize,
}

impl std::fmt::Display for SettleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "settled={} lapsed={}", self.settled, self.lapsed)
    }
}

pub(crate) struct SettlePass<S: StoreSource> {
    pub(crate) pump: Arc<Pump<S>>,
}

#[async_trait]
impl<S> Pass for SettlePass<S>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    type Report = SettleReport;
    type Error = WorkerError;

    async fn run_pass(
        &self,
        _shutdown: &CancellationToken,
    ) -> Result<PassOutcome<SettleReport>, WorkerError> {
        self.pump.settle_pending().await.map(PassOutcome::Led)
    }
}

impl<S> Pump<S>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    /// Queues `settlement` for the settle loop.
    pub(crate) fn settle(&self, settlement: Settlement) {
        self.pending().push(settlement);
        self.settle_wake.notify_one();
    }

    /// Writes every queued settlement: acks, then requeues, then dead-letters. A group whose
    /// statement fails goes back to the queue with the ones not yet tried.
    pub(crate) async fn settle_pending(&self) -> Result<SettleReport, WorkerError> {
        let batch = std::mem::take(&mut *self.pending());
        if batch.is_empty() {
            return Ok(SettleReport::default());
        }
        let (mut acks, mut requeues, mut dead) = (Vec::new(), Vec::new(), Vec::new());
        for settlement in batch {
            match settlement.kind {
                SettlementKind::Ack => acks.push(settlement),
                SettlementKind::Requeue(_) => requeues.push(settlement),
                SettlementKind::DeadLetter(_) => dead.push(settlement),
            }
        }
        let mut report = SettleReport::default();
        let mut groups = [acks, requeues, dead].into_iter();
        let result = async {
            let session =
                self.source.open().await.map_err(|e| WorkerError::store("opening a session to settle", e))?;
            for group in groups.by_ref() {
                if group.is_empty() {
                    continue;
                }
                let written = match self.write(&session, &group).await {
                    Ok(written) => written,
                    Err(error) => {
                        self.pending().extend(group);
                        return Err(error);
                    }
                };
                self.settled(group, &written, &mut report);
            }
            Ok(())
        }
        .await;
        if let Err(error) = result {
            self.pending().extend(groups.flatten());
            return Err(error);
        }
        Ok(report)
    }

    async fn write(&self, session: &S::Session, group: &[Settlement]) -> Result<Vec<i64>, WorkerError> {
        let (stats, queue) = (&*self.stats, self.subscription.queue());
        let written = match &group[0].kind {
            SettlementKind::Ack => {
                let receipts: Vec<Receipt> = group.iter().map(|s| s.receipt).collect();
                retrying_conflicts(stats, queue, "an ack", || session.ack(&receipts))
                    .await
                    .map_err(|e| WorkerError::store("acknowledging messages", e))?
            }
            SettlementKind::Requeue(_) => {
                let requeues: Vec<Requeue> = group
                    .iter()
                    .filter_map(|s| match &s.kind {
                        SettlementKind::Requeue(requeue) => Some(*requeue),
                        _ => None,
                    })
                    .collect();
                retrying_conflicts(stats, queue, "a requeue", || session.requeue(&requeues))
                    .await
                    .map_err(|e| WorkerError::store("requeueing messages", e))?
            }
            SettlementKind::DeadLetter(_) => {
                let dead: Vec<DeadLetter> = group
                    .iter()
                    .filter_map(|s| match &s.kind {
                        SettlementKind::DeadLetter(dead) => Some(dead.clone()),
                        _ => None,
                    })
                    .collect();
                retrying_conflicts(stats, queue, "a dead-letter", || session.dead_letter(&dead))
                    .await
                    .map_err(|e| WorkerError::store("dead-lettering messages", e))?
            }
        };
        Ok(written)
    }

    /// Counts a written group, forgets its messages and frees their places.
    fn settled(&self, group: Vec<Settlement>, written: &[i64], report: &mut SettleReport) {
        for Settlement { receipt, kind, room } in group {
            if written.contains(&receipt.seq) {
                report.settled += 1;
                let counter = match kind {
                    SettlementKind::Ack => Counter::Acked,
                    SettlementKind::Requeue(_) => Counter::Requeued,
                    SettlementKind::DeadLetter(_) => Counter::DeadLettered,
                };
                self.stats.add(counter, 1);
            } else {
                report.lapsed += 1;
                self.stats.add(Counter::Lapsed, 1);
                tracing::warn!(target: "relayer::consumer", queue = %self.subscription.queue(), seq = receipt.seq,
                    "the message's visibility lapsed and another reader received it: this settlement changed nothing");
            }
            self.in_flight.forget(receipt);
            drop(room);
        }
    }
}
