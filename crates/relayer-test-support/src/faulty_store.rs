//! [`FaultyStore`]: any store source, with scripted faults at chosen calls.
//!
//! Crash windows — the connection dying between a claim and its send, a completion lost
//! after a successful send, a renewal arriving after the lease ran out — used to need a
//! SIGKILL and luck to hit. A `FaultyStore` wraps the source a worker is given and strikes
//! exactly the call a test names, so the window is hit every run.
//!
//! It forwards every store capability of `relayer_core::store` its wrapped sessions have,
//! so a worker runs on it unchanged: the worker's bounds hold for `FaultyStore<S>` whenever
//! they hold for `S`. Faults are injected into the store (and shared by all its sessions)
//! at any time, also while the worker runs; a call no fault strikes goes straight through.
//!
//! **Killing a connection.** A kill drops the session's hold on the wrapped session: every
//! later call on it fails as a lost connection would, transiently. Inside a transaction
//! that drop is a real disconnect: a session dropped inside a transaction discards its
//! connection (the `Session` contract; relayer's PostgreSQL session closes it), so the
//! server rolls the transaction back and frees its locks, as after a crash. Outside a
//! transaction there is nothing uncommitted to lose, and the connection may be reused.
//!
//! ```no_run
//! # async fn example<S>(source: S) where S: relayer_core::StoreSource, S::Session: relayer_core::LockOutbox {
//! use relayer_test_support::{Fault, FaultyStore, StoreCall, Transience};
//!
//! let store = FaultyStore::new(source);
//! // The first completion from now on reaches the store and does its work, but its answer
//! // is lost: the worker sees a transient failure.
//! let lost = store.inject(Fault::fail_after(StoreCall::CompleteLocked, Transience::Transient));
//! // … build the worker on `store.clone()` (or keep using `store`) and run it …
//! lost.struck(1).await;
//! # }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{
    AdministerLanes, CheckLease, ClaimOutbox, Claimed, CompleteOutbox, Completion, CompletionReport,
    DeadLetter, DeleteExpired, ExtendVisibility, HeadFailure, HoldBackDestination, HoldLease, InboxEntry,
    LaneClaim, LaneClaimRequest, LaneHead, Lease, LockOutbox, LockedPage, MoveDeadLetters, PageRequest,
    ReceiveQueue, ReceivedPage, RecordInbox, Requeue, ScanRecovery, SettleQueue, Store, UnderLease,
    VerifySchema, WorkLanes,
};
use relayer_core::{DeadLetterType, MessageId, Receipt, Received, RetentionTable, Uuid};

use crate::fault::{Fault, FaultAction, FaultHandle, FaultScript, StoreCall, Strike};
use crate::faulty_error::FaultyError;

/// A [`StoreSource`] wrapping another, whose sessions suffer the [`Fault`]s a test injects.
///
/// Clones share the script: inject through any of them, a worker's included.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    script: Arc<FaultScript>,
}

impl<S> FaultyStore<S> {
    /// `inner`, with no fault yet.
    pub fn new(inner: S) -> Self {
        FaultyStore { inner, script: Arc::new(FaultScript::default()) }
    }

    /// The wrapped source.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Adds `fault` to the script: it counts the calls of its kind made from now on, through
    /// every session of this store, and strikes the ones it names.
    pub fn inject(&self, fault: Fault) -> FaultHandle {
        self.script.inject(fault)
    }

    /// How many calls of kind `call` were made through this store's sessions (struck or
    /// not), since it was made.
    pub fn calls(&self, call: StoreCall) -> u64 {
        self.script.calls(call)
    }
}

impl<S: Clone> Clone for FaultyStore<S> {
    fn clone(&self) -> Self {
        FaultyStore { inner: self.inner.clone(), script: Arc::clone(&self.script) }
    }
}

#[async_trait]
impl<S: StoreSource> StoreSource for FaultyStore<S> {
    type Session = FaultySession<S::Session>;

    async fn open(&self) -> Result<Self::Session, FaultyError<<S::Session as Store>::Error>> {
        let call = StoreCall::Open;
        let strike = self.script.on_call(call);
        let action = before(strike.as_ref(), call).await?;
        let session = FaultySession {
            inner: Mutex::new(Some(Arc::new(self.inner.open().await.map_err(FaultyError::Store)?))),
            script: Arc::clone(&self.script),
        };
        // A lost answer drops the session just opened; a kill hands it over dead.
        after(strike.as_ref(), action, call, &session, Ok::<_, <S::Session as Store>::Error>(()))?;
        Ok(session)
    }
}

/// A session of a [`FaultyStore`]: the wrapped session, unless an injected fault killed it.
pub struct FaultySession<T> {
    /// `None` once killed. Calls borrow a clone, so a kill never waits for a call in flight
    /// (the wrapped session goes when the last of them ends).
    inner: Mutex<Option<Arc<T>>>,
    script: Arc<FaultScript>,
}

impl<T> std::fmt::Debug for FaultySession<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultySession").field("killed", &self.is_killed()).finish_non_exhaustive()
    }
}

impl<T> FaultySession<T> {
    /// Whether an injected fault killed this session's connection.
    pub fn is_killed(&self) -> bool {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    /// The wrapped session, unless an injected fault killed it: for statements no
    /// capability covers (an inbox handler's effects), inside this session's transaction.
    /// Let go of it before the next transaction step (`commit`, `rollback`).
    pub fn inner_session(&self) -> Option<Arc<T>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(Arc::clone)
    }

    /// Drops this session's hold on the wrapped session (see the module docs).
    fn kill(&self) {
        let killed = self.inner.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(killed);
    }

    fn live<E>(&self, call: StoreCall) -> Result<Arc<T>, FaultyError<E>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.as_ref().map(Arc::clone).ok_or(FaultyError::Killed { call })
    }
}

/// Applies the part of a fault that comes before the call reaches the store; returns the
/// action, for [`after`].
async fn before<E>(strike: Option<&Strike>, call: StoreCall) -> Result<Option<FaultAction>, FaultyError<E>> {
    let Some(strike) = strike else { return Ok(None) };
    match strike.action {
        FaultAction::FailBefore(transience) => {
            strike.record();
            return Err(FaultyError::Injected { call, transience });
        }
        FaultAction::KillBefore => {
            strike.record();
            return Err(FaultyError::Killed { call });
        }
        FaultAction::Delay(delay) => {
            strike.record();
            tokio::time::sleep(delay).await;
        }
        FaultAction::Hold => {
            strike.record();
            strike.released().await;
        }
        FaultAction::FailAfter(_) | FaultAction::KillAfter => {}
    }
    Ok(Some(strike.action))
}

/// Applies the part of a fault that comes once the store answered `result`.
fn after<T, R, E>(
    strike: Option<&Strike>,
    action: Option<FaultAction>,
    call: StoreCall,
    session: &FaultySession<T>,
    result: Result<R, E>,
) -> Result<R, FaultyError<E>> {
    match (strike, action) {
        (Some(strike), Some(FaultAction::FailAfter(transience))) => {
            strike.record();
            Err(FaultyError::Injected { call, transience })
        }
        (Some(strike), Some(FaultAction::KillAfter)) => {
            session.kill();
            strike.record();
            result.map_err(FaultyError::Store)
        }
        _ => result.map_err(FaultyError::Store),
    }
}

impl<T: Session> FaultySession<T> {
    /// Runs `forward` on the wrapped session as call `call`, with the fault that strikes it.
    async fn run<R, F, Fut>(&self, call: StoreCall, forward: F) -> Result<R, FaultyError<T::Error>>
    where
        F: FnOnce(Arc<T>) -> Fut + Send,
        Fut: Future<Output = Result<R, T::Error>> + Send,
    {
        let strike = self.script.on_call(call);
        if matches!(strike.as_ref().map(|strike| strike.action), Some(FaultAction::KillBefore)) {
            self.kill();
        }
        let action = before(strike.as_ref(), call).await?;
        let result = forward(self.live(call)?).await;
        after(strike.as_ref(), action, call, self, result)
    }

    /// A transaction step (`begin`, `commit`, `rollback`), which needs the wrapped session
    /// to itself.
    async fn transaction_step(&mut self, call: StoreCall) -> Result<(), FaultyError<T::Error>> {
        let strike = self.script.on_call(call);
        if matches!(strike.as_ref().map(|strike| strike.action), Some(FaultAction::KillBefore)) {
            self.kill();
        }
        let action = before(strike.as_ref(), call).await?;
        let slot = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        // No call borrows a clone while `&mut self` is held, so the session is ours alone.
        let Some(inner) = slot.as_mut().and_then(Arc::get_mut) else {
            return Err(FaultyError::Killed { call });
        };
        let result = match call {
            StoreCall::Begin => inner.begin().await,
            StoreCall::Commit => inner.commit().await,
            _ => inner.rollback().await,
        };
        after(strike.as_ref(), action, call, self, result)
    }
}

impl<T: Store> Store for FaultySession<T> {
    type Error = FaultyError<T::Error>;
}

#[async_trait]
impl<T: Session> Session for FaultySession<T> {
    async fn begin(&mut self) -> Result<(), Self::Error> {
        self.transaction_step(StoreCall::Begin).await
    }

    async fn commit(&mut self) -> Result<(), Self::Error> {
        self.transaction_step(StoreCall::Commit).await
    }

    async fn rollback(&mut self) -> Result<(), Self::Error> {
        self.transaction_step(StoreCall::Rollback).await
    }
}

#[async_trait]
impl<T: Session + VerifySchema> VerifySchema for FaultySession<T> {
    async fn verify_schema(&self) -> Result<i32, Self::Error> {
        self.run(StoreCall::VerifySchema, |inner| async move { inner.verify_schema().await }).await
    }
}

#[async_trait]
impl<T: Session + ClaimOutbox> ClaimOutbox for FaultySession<T> {
    async fn claim_due(
        &self,
        token: Uuid,
        claim: Duration,
        limit: u32,
        tripped: &[(String, String)],
    ) -> Result<Claimed, Self::Error> {
        self.run(
            StoreCall::ClaimDue,
            |inner| async move { inner.claim_due(token, claim, limit, tripped).await },
        )
        .await
    }

    async fn claim_seqs(&self, token: Uuid, claim: Duration, seqs: &[i64]) -> Result<Claimed, Self::Error> {
        self.run(StoreCall::ClaimSeqs, |inner| async move { inner.claim_seqs(token, claim, seqs).await })
            .await
    }
}

#[async_trait]
impl<T: Session + CompleteOutbox> CompleteOutbox for FaultySession<T> {
    async fn complete(&self, token: Uuid, completion: &Completion) -> Result<CompletionReport, Self::Error> {
        self.run(StoreCall::Complete, |inner| async move { inner.complete(token, completion).await }).await
    }
}

#[async_trait]
impl<T: Session + LockOutbox> LockOutbox for FaultySession<T> {
    async fn complete_locked(&self, completion: &Completion) -> Result<CompletionReport, Self::Error> {
        self.run(StoreCall::CompleteLocked, |inner| async move { inner.complete_locked(completion).await })
            .await
    }
}

#[async_trait]
impl<T: Session + ScanRecovery> ScanRecovery for FaultySession<T> {
    async fn lock_recovery_page(&self, request: &PageRequest<'_>) -> Result<Option<LockedPage>, Self::Error> {
        self.run(StoreCall::LockRecoveryPage, |inner| async move { inner.lock_recovery_page(request).await })
            .await
    }
}

#[async_trait]
impl<T: Session + DeleteExpired> DeleteExpired for FaultySession<T> {
    async fn delete_expired(
        &self,
        table: RetentionTable,
        retention: Duration,
        limit: u32,
        lease: Option<UnderLease<'_>>,
    ) -> Result<Option<u64>, Self::Error> {
        self.run(StoreCall::DeleteExpired, |inner| async move {
            inner.delete_expired(table, retention, limit, lease).await
        })
        .await
    }
}

#[async_trait]
impl<T: Session + HoldLease> HoldLease for FaultySession<T> {
    async fn acquire(
        &self,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, Self::Error> {
        self.run(StoreCall::Acquire, |inner| async move { inner.acquire(job, owner, lease_duration).await })
            .await
    }

    async fn renew(&self, lease: &Lease, lease_duration: Duration) -> Result<Option<Lease>, Self::Error> {
        self.run(StoreCall::Renew, |inner| async move { inner.renew(lease, lease_duration).await }).await
    }

    async fn release(&self, job: &str, owner: &str) -> Result<bool, Self::Error> {
        self.run(StoreCall::Release, |inner| async move { inner.release(job, owner).await }).await
    }
}

#[async_trait]
impl<T: Session + CheckLease> CheckLease for FaultySession<T> {
    async fn holds(&self, lease: &Lease) -> Result<bool, Self::Error> {
        self.run(StoreCall::Holds, |inner| async move { inner.holds(lease).await }).await
    }
}

#[async_trait]
impl<T: Session + HoldBackDestination> HoldBackDestination for FaultySession<T> {
    async fn hold_back(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, Self::Error> {
        self.run(StoreCall::HoldBack, |inner| async move {
            inner.hold_back(transport, destination, cool_down).await
        })
        .await
    }

    async fn release_held(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, Self::Error> {
        self.run(StoreCall::ReleaseHeld, |inner| async move {
            inner.release_held(transport, destination, cool_down).await
        })
        .await
    }
}

#[async_trait]
impl<T: Session + WorkLanes> WorkLanes for FaultySession<T> {
    async fn any_lane_row(&self) -> Result<bool, Self::Error> {
        self.run(StoreCall::AnyLaneRow, |inner| async move { inner.any_lane_row().await }).await
    }

    async fn claim_lanes(
        &self,
        token: Uuid,
        request: &LaneClaimRequest<'_>,
    ) -> Result<LaneClaim, Self::Error> {
        self.run(StoreCall::ClaimLanes, |inner| async move { inner.claim_lanes(token, request).await }).await
    }

    async fn lane_head(&self, lane: &str, token: Uuid, claim: Duration) -> Result<LaneHead, Self::Error> {
        self.run(StoreCall::LaneHead, |inner| async move { inner.lane_head(lane, token, claim).await }).await
    }

    async fn accept_head(&self, lane: &str, token: Uuid, seq: i64) -> Result<bool, Self::Error> {
        self.run(StoreCall::AcceptHead, |inner| async move { inner.accept_head(lane, token, seq).await })
            .await
    }

    async fn fail_head(
        &self,
        lane: &str,
        token: Uuid,
        seq: i64,
        failure: HeadFailure<'_>,
    ) -> Result<bool, Self::Error> {
        self.run(StoreCall::FailHead, |inner| async move { inner.fail_head(lane, token, seq, failure).await })
            .await
    }

    async fn release_lane_claim(&self, lane: &str, token: Uuid) -> Result<(), Self::Error> {
        self.run(
            StoreCall::ReleaseLaneClaim,
            |inner| async move { inner.release_lane_claim(lane, token).await },
        )
        .await
    }
}

#[async_trait]
impl<T: Session + AdministerLanes> AdministerLanes for FaultySession<T> {
    async fn release_lane(&self, lane: &str, actor: &str) -> Result<bool, Self::Error> {
        self.run(StoreCall::ReleaseLane, |inner| async move { inner.release_lane(lane, actor).await }).await
    }

    async fn skip_lane_head(&self, lane: &str, actor: &str) -> Result<Option<i64>, Self::Error> {
        self.run(StoreCall::SkipLaneHead, |inner| async move { inner.skip_lane_head(lane, actor).await })
            .await
    }
}

#[async_trait]
impl<T: Session + MoveDeadLetters> MoveDeadLetters for FaultySession<T> {
    async fn redrive_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
        limit: u32,
    ) -> Result<u64, Self::Error> {
        self.run(StoreCall::RedriveDeadLetters, |inner| async move {
            inner.redrive_dead_letters(message_type, after, give_up_after, limit).await
        })
        .await
    }

    async fn expire_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        limit: u32,
    ) -> Result<u64, Self::Error> {
        self.run(StoreCall::ExpireDeadLetters, |inner| async move {
            inner.expire_dead_letters(message_type, after, limit).await
        })
        .await
    }

    async fn count_stuck_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
    ) -> Result<u64, Self::Error> {
        self.run(StoreCall::CountStuckDeadLetters, |inner| async move {
            inner.count_stuck_dead_letters(message_type, after, give_up_after).await
        })
        .await
    }
}

#[async_trait]
impl<T: Session + ReceiveQueue> ReceiveQueue for FaultySession<T> {
    async fn receive(
        &self,
        queue: &str,
        limit: u32,
        visibility: Duration,
    ) -> Result<Vec<Received>, Self::Error> {
        self.run(StoreCall::Receive, |inner| async move { inner.receive(queue, limit, visibility).await })
            .await
    }

    async fn receive_from(
        &self,
        queue: &str,
        limit: u32,
        visibility: Duration,
        from: Option<i64>,
    ) -> Result<ReceivedPage, Self::Error> {
        self.run(StoreCall::Receive, |inner| async move {
            inner.receive_from(queue, limit, visibility, from).await
        })
        .await
    }
}

#[async_trait]
impl<T: Session + SettleQueue> SettleQueue for FaultySession<T> {
    async fn ack(&self, receipts: &[Receipt]) -> Result<Vec<i64>, Self::Error> {
        self.run(StoreCall::Ack, |inner| async move { inner.ack(receipts).await }).await
    }

    async fn requeue(&self, requeues: &[Requeue]) -> Result<Vec<i64>, Self::Error> {
        self.run(StoreCall::Requeue, |inner| async move { inner.requeue(requeues).await }).await
    }

    async fn dead_letter(&self, dead_letters: &[DeadLetter]) -> Result<Vec<i64>, Self::Error> {
        self.run(StoreCall::DeadLetter, |inner| async move { inner.dead_letter(dead_letters).await }).await
    }
}

#[async_trait]
impl<T: Session + ExtendVisibility> ExtendVisibility for FaultySession<T> {
    async fn extend(&self, receipts: &[Receipt], visibility: Duration) -> Result<u64, Self::Error> {
        self.run(StoreCall::Extend, |inner| async move { inner.extend(receipts, visibility).await }).await
    }

    async fn release_received(&self, receipts: &[Receipt]) -> Result<u64, Self::Error> {
        self.run(StoreCall::ReleaseReceived, |inner| async move { inner.release_received(receipts).await })
            .await
    }
}

#[async_trait]
impl<T: Session + RecordInbox> RecordInbox for FaultySession<T> {
    async fn record(&self, consumer: &str, message_id: MessageId) -> Result<InboxEntry, Self::Error> {
        self.run(StoreCall::Record, |inner| async move { inner.record(consumer, message_id).await }).await
    }
}
