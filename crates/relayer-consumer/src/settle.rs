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
//! retried after its own backoff, while the heartbeat keeps the messages invisible, and
//! the other kinds go on being written meanwhile. One still unwritten after a few
//! visibility timeouts is given up, freeing its place: its message reappears.

use std::sync::Arc;

use async_trait::async_trait;
use relayer_core::Receipt;
use relayer_core::session::StoreSource;
use relayer_core::store::{DeadLetter, Requeue, SettleQueue};
use relayer_worker::{Pass, PassOutcome, WorkerError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::pump::{ConsumeSession, Pump};
use crate::retry::retrying_conflicts;
use crate::settlement::{Settlement, SettlementKind};
use crate::stats::Counter;

const TARGET: &str = "relayer::consumer";

/// What one settle pass wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SettleReport {
    settled: usize,
    lapsed: usize,
    given_up: usize,
}

impl std::fmt::Display for SettleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "settled={} lapsed={} given_up={}", self.settled, self.lapsed, self.given_up)
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
        self.pump.settle_pending(false).await.map(PassOutcome::Led)
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

    /// Writes the queued settlements that are due, each kind (ack, requeue, dead-letter)
    /// in its own statement, so one kind the database keeps refusing does not hold back the
    /// others. A kind whose write fails goes back to the queue, not tried again before its
    /// own backoff ([`retry_pause`]: 50 ms doubling to a second) unless `all`
    /// (the last pass at shutdown); a settlement still unwritten past its `until` is given
    /// up, its place freed (its message, no longer renewed, reappears; a late write would
    /// change nothing, fenced by the receipt). Fails with the first failed write.
    pub(crate) async fn settle_pending(&self, all: bool) -> Result<SettleReport, WorkerError> {
        let now = Instant::now();
        let batch = std::mem::take(&mut *self.pending());
        let mut report = SettleReport::default();
        let (mut groups, mut later) = ([Vec::new(), Vec::new(), Vec::new()], Vec::new());
        for settlement in batch {
            if settlement.until <= now {
                self.give_up(settlement, &mut report);
            } else if !all && settlement.next_try > now {
                later.push(settlement);
            } else {
                let group = match settlement.kind {
                    SettlementKind::Ack => 0,
                    SettlementKind::Requeue(_) => 1,
                    SettlementKind::DeadLetter(_) => 2,
                };
                groups[group].push(settlement);
            }
        }
        self.pending().extend(later);
        if groups.iter().all(Vec::is_empty) {
            self.retry_later();
            return Ok(report);
        }
        let session = match self.source.open().await {
            Ok(session) => session,
            Err(error) => {
                self.pending().extend(groups.into_iter().flatten());
                self.retry_later();
                return Err(WorkerError::store("opening a session to settle", error));
            }
        };
        let mut failed = None;
        for group in groups {
            if group.is_empty() {
                continue;
            }
            match self.write(&session, &group).await {
                Ok(written) => self.settled(group, &written, &mut report),
                Err(error) => {
                    let retried = Instant::now();
                    self.pending().extend(group.into_iter().map(|mut settlement| {
                        settlement.failures = settlement.failures.saturating_add(1);
                        settlement.next_try = retried + retry_pause(settlement.failures);
                        settlement
                    }));
                    failed.get_or_insert(error);
                }
            }
        }
        self.retry_later();
        match failed {
            Some(error) => Err(error),
            None => Ok(report),
        }
    }

    /// A settlement unwritten past its `until`: forgotten, its place freed.
    fn give_up(&self, settlement: Settlement, report: &mut SettleReport) {
        let Settlement { receipt, failures, room, .. } = settlement;
        report.given_up += 1;
        self.stats.add(Counter::Abandoned, 1);
        tracing::warn!(target: TARGET, queue = %self.subscription.queue(), seq = receipt.seq, failures,
            "a settlement could not be written in time; given up, the message reappears after its visibility");
        self.in_flight.forget(receipt);
        drop(room);
    }

    /// Wakes the settle loop when the earliest kept settlement is due again or must be
    /// given up, so its retry and its place do not wait for the next settlement or the
    /// loop's own backoff. A timer is armed only when none is due at or before `at`.
    fn retry_later(&self) {
        let at = self.pending().iter().map(|s| s.next_try.min(s.until)).min();
        let Some(at) = at else { return };
        {
            let mut armed = self.settle_timer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if armed.is_some_and(|armed| armed <= at) {
                return;
            }
            *armed = Some(at);
        }
        let (wake, armed) = (Arc::clone(&self.settle_wake), Arc::clone(&self.settle_timer));
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut armed = armed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if *armed == Some(at) {
                *armed = None;
            }
            drop(armed);
            wake.notify_one();
        });
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
        for Settlement { receipt, kind, room, .. } in group {
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
                tracing::warn!(target: TARGET, queue = %self.subscription.queue(), seq = receipt.seq,
                    "the message's visibility lapsed and another reader received it: this settlement changed nothing");
            }
            self.in_flight.forget(receipt);
            drop(room);
        }
    }
}

/// The pause before a failed settlement is written again: 50 ms doubling to at most a
/// second. Short, because a kept settlement holds its place among the pending ones and,
/// once they are all taken, the pump's handler slots: a long backoff would stall the pump
/// on a transient failure; a second between tries of a statement the database keeps
/// refusing costs it nothing.
fn retry_pause(failures: u32) -> std::time::Duration {
    let doublings = failures.saturating_sub(1).min(5);
    std::time::Duration::from_millis(50 << doublings).min(std::time::Duration::from_secs(1))
}
