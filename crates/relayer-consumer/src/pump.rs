//! A pump's shared state, and the life of one handler call: run it under its deadline with
//! panics caught, then turn what happened into a settlement (QUE-2, QUE-5).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use relayer_core::receive_cursor::ReceiveCursor;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{
    DeadLetter, ExtendVisibility, InboxEntry, ReceiveQueue, RecordInbox, Requeue, SettleQueue, VerifySchema,
};
use relayer_core::{AfterFailure, QueueMessage, Receipt, Received, RejectionReason, Undecodable};
use relayer_worker::{WorkerError, catch_panic, roll_back_failed_pass};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::handler::{Handling, InboxHandler, Outcome};
use crate::handler_call::{CallOutcome, HandlerCall};
use crate::in_flight::InFlight;
use crate::settlement::{Settlement, SettlementKind};
use crate::stats::{ConsumerStats, Counter};
use crate::subscription::Subscription;

const TARGET: &str = "relayer::consumer";

/// The longest an inbox transaction whose handler did not ack waits for its rollback
/// before it leaves the transaction to its session (dropped inside it, the session
/// discards its connection and the store rolls back).
const ROLLBACK_PATIENCE: Duration = Duration::from_secs(5);

/// Everything a pump does to the store, on sessions of its source: the consumer's bounds,
/// named once.
pub(crate) trait ConsumeSession:
    Session + VerifySchema + ReceiveQueue + SettleQueue + ExtendVisibility + RecordInbox
{
}

impl<T> ConsumeSession for T where
    T: Session + VerifySchema + ReceiveQueue + SettleQueue + ExtendVisibility + RecordInbox
{
}

/// The receive loop's position, and how its full scans are paced.
#[derive(Debug)]
pub(crate) struct Receiving {
    pub(crate) cursor: ReceiveCursor,
    /// When the last full scan was sent and how long it took: the next one waits at least
    /// [`FULL_SCAN_SHARE`] times that long after it ended, so full scans, which walk every
    /// dead version a held snapshot keeps, take at most a twentieth of the receive loop's
    /// time however long the hold (they get slower as it goes on).
    pub(crate) last_full_scan: Option<(Instant, Duration)>,
}

/// See [`Receiving::last_full_scan`].
pub(crate) const FULL_SCAN_SHARE: u32 = 20;

impl Receiving {
    pub(crate) fn new(poll_interval: Duration) -> Self {
        Receiving { cursor: ReceiveCursor::new(poll_interval), last_full_scan: None }
    }

    /// The next receive's `from` at `now` (`None`: a full scan).
    pub(crate) fn plan(&self, now: Instant) -> Option<i64> {
        let planned = self.cursor.plan(now.into_std());
        match (planned, self.last_full_scan) {
            (None, Some((sent, took))) if now < sent + took + took * FULL_SCAN_SHARE => {
                // Not yet: from the position the last full scan left (planned as of then).
                self.cursor.plan(sent.into_std()).or(planned)
            }
            _ => planned,
        }
    }

    /// Records a receive planned with `from`, sent at `sent` and answered at `answered`.
    pub(crate) fn record(
        &mut self,
        from: Option<i64>,
        reach: relayer_core::receive_cursor::ScanReach,
        sent: Instant,
        answered: Instant,
    ) {
        self.cursor.record(from, reach, sent.into_std());
        if from.is_none() {
            self.last_full_scan = Some((sent, answered - sent));
        }
    }
}

/// Everything the receive, settle and heartbeat loops and the handler tasks of one
/// subscription share.
pub(crate) struct Pump<S: StoreSource> {
    pub(crate) subscription: Subscription,
    /// The qualified queue table, as dead-letter stamps name a row (§15).
    pub(crate) table: String,
    pub(crate) source: S,
    pub(crate) handling: Handling<S::Session>,
    /// One permit per handler slot, held while a handler call runs.
    pub(crate) slots: Arc<Semaphore>,
    /// One permit per pending settlement, held from the handler's return until the
    /// settlement is written (`max_pending_settlements`).
    pub(crate) settle_room: Arc<Semaphore>,
    /// The receive-ahead buffer (`receive_ahead` messages): the receive loop sends, the
    /// dispatcher hands each message to a handler as a slot frees.
    pub(crate) buffer: mpsc::Sender<Received>,
    /// Whether the last receive found messages, so more may be waiting: only then does a
    /// draining buffer wake the receive loop (otherwise a notification, the trailing read or
    /// polling finds new messages, and an idle pump does not read once per message).
    pub(crate) more_waiting: std::sync::atomic::AtomicBool,
    pub(crate) in_flight: InFlight,
    pub(crate) pending: Mutex<Vec<Settlement>>,
    /// Where the next receive starts (only the receive loop uses it).
    pub(crate) cursor: Mutex<Receiving>,
    /// When a timer will wake the settle loop for a kept settlement (`retry_later`).
    pub(crate) settle_timer: Arc<Mutex<Option<Instant>>>,
    pub(crate) receive_wake: Arc<Notify>,
    pub(crate) settle_wake: Arc<Notify>,
    pub(crate) handlers: TaskTracker,
    /// Cancelled when shutdown's grace is spent: handler calls still running are dropped.
    pub(crate) abandon: CancellationToken,
    pub(crate) stats: Arc<ConsumerStats>,
    /// Where each handler call is told as it ends ([`Consumer::subscribe`](crate::Consumer::subscribe)).
    pub(crate) calls: broadcast::Sender<HandlerCall>,
}

/// How a handler call ended.
enum Ran {
    Returned(Outcome),
    Panicked(String),
    Overran(Duration),
    Abandoned,
}

impl<S> Pump<S>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    pub(crate) fn pending(&self) -> MutexGuard<'_, Vec<Settlement>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn cursor(&self) -> MutexGuard<'_, Receiving> {
        self.cursor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts handling one buffered message on its own task, in `slot`: a decoded one by
    /// the handler, an undecodable one by moving it aside.
    pub(crate) fn start(self: &Arc<Self>, received: Received, slot: OwnedSemaphorePermit) {
        let Received { receipt, message } = received;
        let pump = Arc::clone(self);
        let message = match message {
            Ok(message) => message,
            Err(undecodable) => {
                self.handlers.spawn(async move { pump.set_aside(receipt, &undecodable, slot).await });
                return;
            }
        };
        let deadline = self.subscription.options().handler_deadline();
        self.in_flight.started(receipt, Instant::now() + deadline);
        self.handlers.spawn(async move {
            match &pump.handling {
                Handling::Plain(handler) => {
                    let ran = pump.run_guarded(handler.handle(&message)).await;
                    pump.finish(receipt, &message, ran, slot).await;
                }
                Handling::Inbox(handler) => {
                    let handler = Arc::clone(handler);
                    pump.handle_in_inbox(handler.as_ref(), receipt, &message, slot).await;
                }
            }
        });
    }

    /// Moves an undecodable row aside (QUE-2, §15): to the invalid-message queue, else to
    /// the dead-letter queue as `unacceptable`, with the reason naming table, seq and column.
    async fn set_aside(&self, receipt: Receipt, undecodable: &Undecodable, slot: OwnedSemaphorePermit) {
        self.stats.add(Counter::Undecodable, 1);
        tracing::error!(target: TARGET, queue = %self.subscription.queue(), error = %undecodable,
            "a queue row cannot be decoded; moving it aside");
        let target =
            self.subscription.invalid_message_queue().unwrap_or(self.subscription.dead_letter_queue());
        let kind = SettlementKind::DeadLetter(DeadLetter {
            receipt,
            queue: target.to_owned(),
            reason: RejectionReason::Unacceptable,
            message: undecodable.to_string(),
            handled: false,
        });
        self.queue_settlement(receipt, kind, slot).await;
    }

    /// Queues a settlement once there is room among the pending ones, then frees the
    /// handler's slot. Until then the slot stays taken: a pump whose settlements cannot be
    /// written stops starting handlers (and so, its buffer full, stops receiving). If
    /// shutdown's grace runs out meanwhile, the message is left to reappear.
    async fn queue_settlement(&self, receipt: Receipt, kind: SettlementKind, slot: OwnedSemaphorePermit) {
        // Three visibility timeouts for the settle loop to write it, through its backoff.
        let until = Instant::now() + 3 * self.subscription.options().visibility_timeout();
        self.in_flight.settling(receipt, until);
        let room = tokio::select! {
            biased;
            room = Arc::clone(&self.settle_room).acquire_owned() => room,
            () = self.abandon.cancelled() => {
                self.stats.add(Counter::Abandoned, 1);
                self.in_flight.forget(receipt);
                return;
            }
        };
        // The semaphore is never closed.
        let Ok(room) = room else { return };
        drop(slot);
        // Given up a visibility timeout after its renewal ends: until then the row is still
        // surely this reader's, and a write would still settle it.
        let give_up = until + self.subscription.options().visibility_timeout();
        self.settle(Settlement {
            receipt,
            kind,
            room,
            until: give_up,
            failures: 0,
            next_try: Instant::now(),
        });
    }

    /// Runs one handler call under its deadline, with panics caught, and tells the
    /// subscribers how it ended and how long it took.
    async fn run_guarded(&self, call: impl Future<Output = Outcome>) -> Ran {
        let deadline = self.subscription.options().handler_deadline();
        let started = Instant::now();
        let ran = tokio::select! {
            ran = tokio::time::timeout(deadline, catch_panic(call)) => match ran {
                Ok(Ok(outcome)) => Ran::Returned(outcome),
                Ok(Err(panic)) => Ran::Panicked(panic),
                Err(_) => Ran::Overran(deadline),
            },
            () = self.abandon.cancelled() => Ran::Abandoned,
        };
        let outcome = match &ran {
            Ran::Returned(Outcome::Ack) => CallOutcome::Ack,
            Ran::Returned(Outcome::Requeue { .. }) => CallOutcome::Requeue,
            Ran::Returned(Outcome::Reject { .. }) => CallOutcome::Reject,
            Ran::Panicked(_) => CallOutcome::Panicked,
            Ran::Overran(_) => CallOutcome::Overran,
            Ran::Abandoned => CallOutcome::Abandoned,
        };
        // Nobody subscribed is not an error: the call is simply not observed.
        let _ = self.calls.send(HandlerCall { outcome, duration: started.elapsed() });
        ran
    }

    /// Turns how the call ended into a settlement and queues it.
    async fn finish(&self, receipt: Receipt, message: &QueueMessage, ran: Ran, slot: OwnedSemaphorePermit) {
        let queue = self.subscription.queue();
        let failure = match ran {
            Ran::Returned(Outcome::Ack) => {
                return self.queue_settlement(receipt, SettlementKind::Ack, slot).await;
            }
            Ran::Returned(Outcome::Reject { reason }) => {
                let kind = self.dead_letter(receipt, RejectionReason::Rejected, &reason);
                return self.queue_settlement(receipt, kind, slot).await;
            }
            Ran::Returned(Outcome::Requeue { delay, reason }) => (delay, reason),
            Ran::Panicked(panic) => {
                self.stats.add(Counter::Panicked, 1);
                tracing::error!(target: TARGET, %queue, seq = receipt.seq, id = %message.id, %panic,
                    "the handler panicked; requeueing");
                (None, format!("the handler panicked: {panic}"))
            }
            Ran::Overran(deadline) => {
                self.stats.add(Counter::Overran, 1);
                tracing::error!(target: TARGET, %queue, seq = receipt.seq, id = %message.id, ?deadline,
                    "the handler overran its deadline and was abandoned; requeueing");
                (None, format!("the handler overran its deadline of {deadline:?}"))
            }
            Ran::Abandoned => {
                // Shutdown's grace is spent: the message reappears after its visibility.
                self.stats.add(Counter::Abandoned, 1);
                self.in_flight.forget(receipt);
                return;
            }
        };
        let (delay, reason) = failure;
        let kind = match self.subscription.options().after_failure(message.handled_count) {
            AfterFailure::Requeue(backoff) => {
                tracing::debug!(target: TARGET, %queue, seq = receipt.seq, %reason, "requeueing");
                // A handler's own delay is clamped to `max_requeue_delay`: a year-long (or
                // `Duration::MAX`) delay would hide the message past any operator's notice.
                let max = self.subscription.options().max_requeue_delay();
                SettlementKind::Requeue(Requeue {
                    receipt,
                    delay: delay.map_or(backoff, |asked| asked.min(max)),
                })
            }
            AfterFailure::DeadLetter => self.dead_letter(receipt, RejectionReason::MaxHandledCount, &reason),
        };
        self.queue_settlement(receipt, kind, slot).await;
    }

    /// A dead-letter of a handled message; its rejection message names the row (§15).
    fn dead_letter(&self, receipt: Receipt, reason: RejectionReason, message: &str) -> SettlementKind {
        let message = format!("row seq {} of {}: {message}", receipt.seq, self.table);
        tracing::warn!(target: TARGET, queue = %self.subscription.queue(), seq = receipt.seq, %reason, %message,
            "dead-lettering");
        SettlementKind::DeadLetter(DeadLetter {
            receipt,
            queue: self.subscription.dead_letter_queue().to_owned(),
            reason,
            message,
            handled: true,
        })
    }

    /// The inbox boundary (QUE-3): record, effects and ack in one transaction. Anything
    /// but an ack rolls the effects back and settles like a plain handler's outcome. A
    /// database error leaves the message to reappear after its visibility timeout.
    async fn handle_in_inbox(
        &self,
        handler: &dyn InboxHandler<S::Session>,
        receipt: Receipt,
        message: &QueueMessage,
        slot: OwnedSemaphorePermit,
    ) {
        match self.inbox_transaction(handler, receipt, message).await {
            Ok(Committed::RolledBack(ran)) => return self.finish(receipt, message, ran, slot).await,
            Ok(Committed::Acked) => self.stats.add(Counter::Acked, 1),
            Ok(Committed::Duplicate) => {
                self.stats.add(Counter::Acked, 1);
                self.stats.add(Counter::Duplicates, 1);
            }
            Ok(Committed::Lapsed) => {
                self.stats.add(Counter::Lapsed, 1);
                tracing::warn!(target: TARGET, queue = %self.subscription.queue(), seq = receipt.seq,
                    "the message's visibility lapsed and another reader received it: effects rolled back");
            }
            Err(error) => {
                self.stats.add(Counter::Abandoned, 1);
                tracing::warn!(target: TARGET, queue = %self.subscription.queue(), seq = receipt.seq,
                    error = %relayer_core::error_chain(&error),
                    "the inbox transaction failed; the message reappears after its visibility timeout");
            }
        }
        // Settled in its own transaction: free the slot for the next buffered message.
        self.in_flight.forget(receipt);
        drop(slot);
    }

    /// One session, one transaction: record, effects, ack, commit. On an error the session
    /// is dropped inside its transaction, which discards its connection: the store rolls
    /// everything back.
    async fn inbox_transaction(
        &self,
        handler: &dyn InboxHandler<S::Session>,
        receipt: Receipt,
        message: &QueueMessage,
    ) -> Result<Committed, WorkerError> {
        let mut session = self
            .source
            .open()
            .await
            .map_err(|e| WorkerError::store("opening a session for an inbox transaction", e))?;
        session.begin().await.map_err(|e| WorkerError::store("beginning an inbox transaction", e))?;
        let entry = session
            .record(self.subscription.inbox_consumer(), message.id)
            .await
            .map_err(|e| WorkerError::store("recording a message in the inbox", e))?;
        let duplicate = entry == InboxEntry::Duplicate;
        if !duplicate {
            let ran = self.run_guarded(handler.handle(&session, message)).await;
            if !matches!(ran, Ran::Returned(Outcome::Ack)) {
                // Rolls the effects and the inbox row back.
                roll_back_failed_pass(&mut session, ROLLBACK_PATIENCE).await;
                return Ok(Committed::RolledBack(ran));
            }
        }
        // After the handler ran, a failed ack or commit (an aborted transaction, a deferred
        // constraint, a serialization failure) is a failed handling: requeued with its
        // handled count one higher, so a message that can never commit reaches its
        // dead-letter queue instead of reappearing forever (QUE-2). Still fenced by the
        // receipt when settled.
        fn failed_handling(what: &str, error: &(dyn std::error::Error + 'static)) -> Committed {
            Committed::RolledBack(Ran::Returned(Outcome::failed(format!(
                "the inbox transaction could not {what}: {}",
                relayer_core::error_chain(error)
            ))))
        }
        let acked = match session.ack(&[receipt]).await {
            Ok(acked) => acked,
            Err(error) if !duplicate => return Ok(failed_handling("ack", &error)),
            Err(error) => {
                return Err(WorkerError::store("acknowledging a duplicate in its inbox transaction", error));
            }
        };
        if acked.is_empty() {
            session.rollback().await.map_err(|e| {
                WorkerError::store("rolling back an inbox transaction whose receipt lapsed", e)
            })?;
            return Ok(Committed::Lapsed);
        }
        match session.commit().await {
            Ok(()) => Ok(if duplicate { Committed::Duplicate } else { Committed::Acked }),
            Err(error) if !duplicate => Ok(failed_handling("commit", &error)),
            Err(error) => Err(WorkerError::store("committing an inbox transaction", error)),
        }
    }
}

/// How an inbox transaction ended.
enum Committed {
    /// Effects, inbox row and ack committed.
    Acked,
    /// Already in the inbox: acked without the handler.
    Duplicate,
    /// The receipt had lapsed: rolled back, another reader owns the message.
    Lapsed,
    /// The handler did not ack: rolled back; settle as its outcome says.
    RolledBack(Ran),
}
