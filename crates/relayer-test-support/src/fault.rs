//! What a [`FaultyStore`](crate::FaultyStore) does wrong, and when: the fault script.
//!
//! A [`Fault`] names one kind of store call ([`StoreCall`]), which of those calls it
//! strikes (counted from the moment it is injected), and what happens to them
//! ([`FaultAction`]). Injecting it returns a [`FaultHandle`], through which a test waits
//! until the fault struck, counts its strikes, and releases a held call.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

/// A kind of call a worker makes through its store: opening a session, a transaction
/// step, or one method of a store capability (`relayer_core::store`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreCall {
    /// `StoreSource::open`.
    Open,
    /// `Session::begin`.
    Begin,
    /// `Session::commit`.
    Commit,
    /// `Session::rollback`.
    Rollback,
    /// `VerifySchema::verify_schema`.
    VerifySchema,
    /// `ClaimOutbox::claim_due`.
    ClaimDue,
    /// `ClaimOutbox::claim_seqs`.
    ClaimSeqs,
    /// `CompleteOutbox::complete`.
    Complete,
    /// `LockOutbox::complete_locked`.
    CompleteLocked,
    /// `ScanRecovery::lock_recovery_page`.
    LockRecoveryPage,
    /// `DeleteExpired::delete_expired`.
    DeleteExpired,
    /// `HoldLease::acquire`.
    Acquire,
    /// `HoldLease::renew`.
    Renew,
    /// `HoldLease::release`.
    Release,
    /// `CheckLease::holds`.
    Holds,
    /// `HoldBackDestination::hold_back`.
    HoldBack,
    /// `HoldBackDestination::release_held`.
    ReleaseHeld,
    /// `WorkLanes::any_lane_row`.
    AnyLaneRow,
    /// `WorkLanes::claim_lanes`.
    ClaimLanes,
    /// `WorkLanes::lane_head`.
    LaneHead,
    /// `WorkLanes::accept_head`.
    AcceptHead,
    /// `WorkLanes::fail_head`.
    FailHead,
    /// `WorkLanes::release_lane_claim`.
    ReleaseLaneClaim,
    /// `AdministerLanes::release_lane`.
    ReleaseLane,
    /// `AdministerLanes::skip_lane_head`.
    SkipLaneHead,
    /// `MoveDeadLetters::redrive_dead_letters`.
    RedriveDeadLetters,
    /// `MoveDeadLetters::expire_dead_letters`.
    ExpireDeadLetters,
    /// `MoveDeadLetters::count_stuck_dead_letters`.
    CountStuckDeadLetters,
    /// `ReceiveQueue::receive`.
    Receive,
    /// `SettleQueue::ack`.
    Ack,
    /// `SettleQueue::requeue`.
    Requeue,
    /// `SettleQueue::dead_letter`.
    DeadLetter,
    /// `ExtendVisibility::extend`.
    Extend,
    /// `ExtendVisibility::release_received`.
    ReleaseReceived,
    /// `RecordInbox::record`.
    Record,
}

impl StoreCall {
    /// Every kind of call, in declaration order.
    pub const ALL: [StoreCall; 35] = [
        StoreCall::Open,
        StoreCall::Begin,
        StoreCall::Commit,
        StoreCall::Rollback,
        StoreCall::VerifySchema,
        StoreCall::ClaimDue,
        StoreCall::ClaimSeqs,
        StoreCall::Complete,
        StoreCall::CompleteLocked,
        StoreCall::LockRecoveryPage,
        StoreCall::DeleteExpired,
        StoreCall::Acquire,
        StoreCall::Renew,
        StoreCall::Release,
        StoreCall::Holds,
        StoreCall::HoldBack,
        StoreCall::ReleaseHeld,
        StoreCall::AnyLaneRow,
        StoreCall::ClaimLanes,
        StoreCall::LaneHead,
        StoreCall::AcceptHead,
        StoreCall::FailHead,
        StoreCall::ReleaseLaneClaim,
        StoreCall::ReleaseLane,
        StoreCall::SkipLaneHead,
        StoreCall::RedriveDeadLetters,
        StoreCall::ExpireDeadLetters,
        StoreCall::CountStuckDeadLetters,
        StoreCall::Receive,
        StoreCall::Ack,
        StoreCall::Requeue,
        StoreCall::DeadLetter,
        StoreCall::Extend,
        StoreCall::ReleaseReceived,
        StoreCall::Record,
    ];

    /// The method's name, as the store traits spell it.
    pub fn name(self) -> &'static str {
        match self {
            StoreCall::Open => "open",
            StoreCall::Begin => "begin",
            StoreCall::Commit => "commit",
            StoreCall::Rollback => "rollback",
            StoreCall::VerifySchema => "verify_schema",
            StoreCall::ClaimDue => "claim_due",
            StoreCall::ClaimSeqs => "claim_seqs",
            StoreCall::Complete => "complete",
            StoreCall::CompleteLocked => "complete_locked",
            StoreCall::LockRecoveryPage => "lock_recovery_page",
            StoreCall::DeleteExpired => "delete_expired",
            StoreCall::Acquire => "acquire",
            StoreCall::Renew => "renew",
            StoreCall::Release => "release",
            StoreCall::Holds => "holds",
            StoreCall::HoldBack => "hold_back",
            StoreCall::ReleaseHeld => "release_held",
            StoreCall::AnyLaneRow => "any_lane_row",
            StoreCall::ClaimLanes => "claim_lanes",
            StoreCall::LaneHead => "lane_head",
            StoreCall::AcceptHead => "accept_head",
            StoreCall::FailHead => "fail_head",
            StoreCall::ReleaseLaneClaim => "release_lane_claim",
            StoreCall::ReleaseLane => "release_lane",
            StoreCall::SkipLaneHead => "skip_lane_head",
            StoreCall::RedriveDeadLetters => "redrive_dead_letters",
            StoreCall::ExpireDeadLetters => "expire_dead_letters",
            StoreCall::CountStuckDeadLetters => "count_stuck_dead_letters",
            StoreCall::Receive => "receive",
            StoreCall::Ack => "ack",
            StoreCall::Requeue => "requeue",
            StoreCall::DeadLetter => "dead_letter",
            StoreCall::Extend => "extend",
            StoreCall::ReleaseReceived => "release_received",
            StoreCall::Record => "record",
        }
    }

    fn index(self) -> usize {
        StoreCall::ALL.iter().position(|call| *call == self).unwrap_or(0)
    }
}

impl fmt::Display for StoreCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether an injected failure says that trying again later may succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transience {
    /// Like a lost connection or a timeout: a running worker retries with backoff.
    Transient,
    /// Like a missing table: it would repeat until someone changes something.
    Permanent,
}

/// What a fault does to a call it strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultAction {
    /// The call fails without reaching the wrapped store.
    FailBefore(Transience),
    /// The call reaches the wrapped store and does its work, then fails anyway: its answer
    /// is lost, as when a connection breaks before the reply arrives.
    FailAfter(Transience),
    /// The session's connection dies before the call reaches the store: the call fails
    /// (transiently), and so does every later call on that session.
    KillBefore,
    /// The call reaches the store and its answer comes back; then the session's
    /// connection dies, and every later call on that session fails (transiently).
    KillAfter,
    /// The call waits this long before it reaches the store.
    Delay(Duration),
    /// The call waits until [`FaultHandle::release`] before it reaches the store.
    Hold,
}

/// One scripted fault: which calls of one kind it strikes, and what it does to them.
///
/// By default it strikes the first call of its kind made after it is injected, once.
///
/// ```
/// use relayer_test_support::{Fault, StoreCall, Transience};
///
/// // The second completion from now reaches the store, then fails as if the connection broke.
/// let fault = Fault::fail_after(StoreCall::CompleteLocked, Transience::Transient).at_call(2);
/// // Every renewal from now waits for the test to release it.
/// let held = Fault::hold(StoreCall::Renew).every_call();
/// # let _ = (fault, held);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    call: StoreCall,
    action: FaultAction,
    /// The first matching call struck, 1-based, counted from injection.
    first: u64,
    /// How many consecutive matching calls are struck; `None`: every one from `first` on.
    times: Option<u64>,
}

impl Fault {
    /// `action` on calls of kind `call`.
    pub fn new(call: StoreCall, action: FaultAction) -> Fault {
        Fault { call, action, first: 1, times: Some(1) }
    }

    /// The call fails, with `transience`, without reaching the store.
    pub fn fail_before(call: StoreCall, transience: Transience) -> Fault {
        Fault::new(call, FaultAction::FailBefore(transience))
    }

    /// The call does its work in the store, then fails with `transience`.
    pub fn fail_after(call: StoreCall, transience: Transience) -> Fault {
        Fault::new(call, FaultAction::FailAfter(transience))
    }

    /// The session's connection dies before the call reaches the store.
    pub fn kill_before(call: StoreCall) -> Fault {
        Fault::new(call, FaultAction::KillBefore)
    }

    /// The call is answered, then the session's connection dies.
    pub fn kill_after(call: StoreCall) -> Fault {
        Fault::new(call, FaultAction::KillAfter)
    }

    /// The call waits `delay` before it reaches the store.
    pub fn delay(call: StoreCall, delay: Duration) -> Fault {
        Fault::new(call, FaultAction::Delay(delay))
    }

    /// The call waits until the test calls [`FaultHandle::release`].
    pub fn hold(call: StoreCall) -> Fault {
        Fault::new(call, FaultAction::Hold)
    }

    /// Strikes the `n`-th call of its kind made after injection (1-based; 0 counts as 1).
    #[must_use]
    pub fn at_call(mut self, n: u64) -> Fault {
        self.first = n.max(1);
        self
    }

    /// Strikes `n` consecutive calls from the first one it strikes.
    #[must_use]
    pub fn times(mut self, n: u64) -> Fault {
        self.times = Some(n);
        self
    }

    /// Strikes every call of its kind from the first one it strikes on.
    #[must_use]
    pub fn every_call(mut self) -> Fault {
        self.times = None;
        self
    }

    /// The kind of call it strikes.
    pub fn call(&self) -> StoreCall {
        self.call
    }

    /// What it does to them.
    pub fn action(&self) -> FaultAction {
        self.action
    }

    fn strikes(&self, nth: u64) -> bool {
        nth >= self.first && self.times.is_none_or(|times| nth < self.first.saturating_add(times))
    }
}

/// A test's view of one injected fault: how often it struck, waiting until it did, and
/// releasing the calls it [holds](FaultAction::Hold).
#[derive(Clone, Debug)]
pub struct FaultHandle {
    state: Arc<FaultState>,
}

impl FaultHandle {
    /// How many calls it has struck so far (a held call counts once it arrived).
    pub fn strikes(&self) -> u64 {
        self.state.strikes.load(Ordering::SeqCst)
    }

    /// Returns once the fault has struck at least `n` calls. A [held](FaultAction::Hold)
    /// call has struck when it is waiting; a failing one when its failure is being returned.
    pub async fn struck(&self, n: u64) {
        loop {
            let notified = self.state.struck.notified();
            if self.strikes() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Lets every call this fault holds, now and from now on, go on to the store.
    pub fn release(&self) {
        self.state.gate.close();
    }

    /// Whether [`release`](Self::release) was called.
    pub fn is_released(&self) -> bool {
        self.state.gate.is_closed()
    }
}

#[derive(Debug)]
struct FaultState {
    fault: Fault,
    /// Matching calls seen since injection.
    seen: AtomicU64,
    strikes: AtomicU64,
    struck: Notify,
    /// Held calls wait on it; closing it releases them all.
    gate: Semaphore,
}

/// The faults injected into one store and the calls made through it, shared by the store's
/// sessions.
#[derive(Debug)]
pub(crate) struct FaultScript {
    faults: Mutex<Vec<Arc<FaultState>>>,
    calls: [AtomicU64; StoreCall::ALL.len()],
}

// By hand: `Default` for arrays stops at 32 elements.
impl Default for FaultScript {
    fn default() -> Self {
        FaultScript { faults: Mutex::default(), calls: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

/// The fault a call is to suffer.
pub(crate) struct Strike {
    pub(crate) action: FaultAction,
    state: Arc<FaultState>,
}

impl Strike {
    /// Records that the fault has struck (wakes [`FaultHandle::struck`]).
    pub(crate) fn record(&self) {
        self.state.strikes.fetch_add(1, Ordering::SeqCst);
        self.state.struck.notify_waiters();
    }

    /// Waits until the fault is released (for [`FaultAction::Hold`]).
    pub(crate) async fn released(&self) {
        // Closed means released; nothing ever adds a permit.
        let _ = self.state.gate.acquire().await;
    }
}

impl FaultScript {
    pub(crate) fn inject(&self, fault: Fault) -> FaultHandle {
        let state = Arc::new(FaultState {
            fault,
            seen: AtomicU64::new(0),
            strikes: AtomicU64::new(0),
            struck: Notify::new(),
            gate: Semaphore::new(0),
        });
        self.faults.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::clone(&state));
        FaultHandle { state }
    }

    /// Counts a call of kind `call` and returns the fault that strikes it, if any: every
    /// fault of that kind counts the call, and the earliest injected that strikes it wins.
    pub(crate) fn on_call(&self, call: StoreCall) -> Option<Strike> {
        self.calls[call.index()].fetch_add(1, Ordering::SeqCst);
        let faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let mut strike = None;
        for state in faults.iter().filter(|state| state.fault.call == call) {
            let nth = state.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if strike.is_none() && state.fault.strikes(nth) {
                strike = Some(Strike { action: state.fault.action, state: Arc::clone(state) });
            }
        }
        strike
    }

    pub(crate) fn calls(&self, call: StoreCall) -> u64 {
        self.calls[call.index()].load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::{Fault, FaultAction, FaultScript, StoreCall, Transience};

    fn struck(script: &FaultScript, call: StoreCall, n: usize) -> Vec<bool> {
        (0..n).map(|_| script.on_call(call).is_some()).collect()
    }

    #[test]
    fn a_fault_strikes_the_chosen_calls_of_its_kind_counted_from_injection() {
        let script = FaultScript::default();
        script.on_call(StoreCall::Renew); // before injection: not counted by the fault
        let handle =
            script.inject(Fault::fail_before(StoreCall::Renew, Transience::Transient).at_call(2).times(2));
        assert_eq!(struck(&script, StoreCall::Commit, 3), [false; 3], "other kinds are never struck");
        assert_eq!(struck(&script, StoreCall::Renew, 5), [false, true, true, false, false]);
        assert_eq!(script.calls(StoreCall::Renew), 6);
        assert_eq!(script.calls(StoreCall::Commit), 3);
        assert_eq!(handle.strikes(), 0, "a strike is recorded by the call that suffers it");
    }

    #[test]
    fn every_call_strikes_from_the_first_on_and_the_earliest_fault_wins() {
        let script = FaultScript::default();
        script.inject(Fault::hold(StoreCall::Acquire).at_call(3).every_call());
        script.inject(Fault::kill_after(StoreCall::Acquire));
        let actions: Vec<Option<FaultAction>> =
            (0..4).map(|_| script.on_call(StoreCall::Acquire).map(|strike| strike.action)).collect();
        assert_eq!(
            actions,
            [Some(FaultAction::KillAfter), None, Some(FaultAction::Hold), Some(FaultAction::Hold)]
        );
    }

    #[tokio::test]
    async fn a_held_call_waits_until_released_and_struck_returns_once_it_arrived() {
        let script = std::sync::Arc::new(FaultScript::default());
        let handle = script.inject(Fault::hold(StoreCall::Commit));
        let call = tokio::spawn({
            let script = std::sync::Arc::clone(&script);
            async move {
                let strike = script.on_call(StoreCall::Commit).expect("the first commit is held");
                strike.record();
                strike.released().await;
            }
        });
        handle.struck(1).await;
        tokio::task::yield_now().await;
        assert!(!call.is_finished(), "a held call waits for its release");
        assert!(!handle.is_released());
        handle.release();
        call.await.expect("the held call went on");
        assert_eq!(handle.strikes(), 1);
    }
}
