//! The pass loop under tokio's paused clock: RES-1..3, LIF-1 and LDR-5/LDR-6 (advisory).
//!
//! Time is virtual (`start_paused`): waits are exact and the tests observe them through the
//! instants at which passes start, never by sleeping.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer_core::{DistributedLock, LockError, LockErrorKind, LockGuard, PassBackoff, async_trait};
use relayer_worker::{Leadership, Pass, PassLoop, PassOutcome, WorkerEvent, WorkerKind};
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const INTERVAL: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Step {
    Succeed,
    Fail,
    Panic,
}

/// A pass that follows a script (then succeeds forever) and records when it ran.
#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Step>>,
    starts: Mutex<Vec<Instant>>,
    stopped: AtomicU32,
}

impl Scripted {
    fn new(steps: &[Step]) -> Arc<Self> {
        Arc::new(Scripted { script: Mutex::new(steps.iter().copied().collect()), ..Scripted::default() })
    }

    /// The waits between consecutive pass starts.
    fn waits(&self) -> Vec<Duration> {
        let starts = self.starts.lock().unwrap();
        starts.windows(2).map(|pair| pair[1] - pair[0]).collect()
    }

    fn passes(&self) -> usize {
        self.starts.lock().unwrap().len()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("pass failed")]
struct PassError(#[source] std::io::Error);

#[async_trait]
impl Pass for Scripted {
    type Report = u64;
    type Error = PassError;

    async fn run_pass(&self, _shutdown: &CancellationToken) -> Result<PassOutcome<u64>, PassError> {
        let number = {
            let mut starts = self.starts.lock().unwrap();
            starts.push(Instant::now());
            starts.len() as u64
        };
        let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Succeed);
        match step {
            Step::Succeed => Ok(PassOutcome::Led(number)),
            Step::Fail => Err(PassError(std::io::Error::other("connection refused"))),
            Step::Panic => panic!("user code panicked in pass {number}"),
        }
    }

    async fn stopped(&self) {
        self.stopped.fetch_add(1, Ordering::SeqCst);
    }
}

fn backoff() -> PassBackoff {
    PassBackoff::new(INTERVAL, MAX_BACKOFF).unwrap()
}

fn start(
    pass: &Arc<Scripted>,
    leadership: Leadership,
) -> (relayer_worker::WorkerHandle, broadcast::Receiver<WorkerEvent<u64>>) {
    let pass_loop = PassLoop::with_shared_pass(WorkerKind::Sweeper, Arc::clone(pass), backoff(), leadership);
    let events = pass_loop.subscribe();
    (pass_loop.spawn(CancellationToken::new()), events)
}

/// A pass that ran no timer takes no virtual time: its duration is exactly zero.
const ZERO: Duration = Duration::ZERO;

/// The event of a pass that led with `report`, in no virtual time.
fn led(report: u64) -> WorkerEvent<u64> {
    WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(report), duration: ZERO }
}

/// The event of a pass that skipped its turn, in no virtual time.
fn not_leader() -> WorkerEvent<u64> {
    WorkerEvent::PassSucceeded { outcome: PassOutcome::NotLeader, duration: ZERO }
}

/// The next event, skipping `PassStarted`.
async fn next_outcome(events: &mut broadcast::Receiver<WorkerEvent<u64>>) -> WorkerEvent<u64> {
    loop {
        match events.recv().await.unwrap() {
            WorkerEvent::PassStarted { .. } => {}
            other => return other,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn first_pass_runs_at_once_and_failures_back_off_res_2_res_3() {
    use Step::{Fail, Succeed};
    let pass = Scripted::new(&[Fail, Fail, Fail, Fail, Fail, Succeed, Fail]);
    let began = Instant::now();
    let (mut handle, mut events) = start(&pass, Leadership::EveryInstance);

    let secs = Duration::from_secs;
    for (consecutive, next_wait) in [(1, 10), (2, 20), (3, 40), (4, 60), (5, 60)] {
        let expected = WorkerEvent::PassFailed { consecutive, next_wait: secs(next_wait), duration: ZERO };
        assert_eq!(next_outcome(&mut events).await, expected);
    }
    assert_eq!(next_outcome(&mut events).await, led(6));
    // A success resets the count: the next failure is the first again.
    assert_eq!(
        next_outcome(&mut events).await,
        WorkerEvent::PassFailed { consecutive: 1, next_wait: secs(10), duration: ZERO }
    );
    assert_eq!(next_outcome(&mut events).await, led(8));
    handle.shutdown().await;

    assert_eq!(pass.starts.lock().unwrap()[0], began, "RES-3: the first pass runs at once");
    // RES-2: interval · 2^(n-1) capped at max_backoff; a success returns to the interval.
    assert_eq!(pass.waits(), [10, 20, 40, 60, 60, 10, 10].map(secs));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_pass_is_caught_logged_and_retried_res_1() {
    let pass = Scripted::new(&[Step::Panic, Step::Panic]);
    let (mut handle, mut events) = start(&pass, Leadership::EveryInstance);
    let failed = |consecutive, seconds| WorkerEvent::PassFailed {
        consecutive,
        next_wait: Duration::from_secs(seconds),
        duration: ZERO,
    };
    assert_eq!(next_outcome(&mut events).await, failed(1, 10));
    assert_eq!(next_outcome(&mut events).await, failed(2, 20));
    assert_eq!(next_outcome(&mut events).await, led(3));
    handle.shutdown().await;
    assert!(handle.is_finished());
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_the_wait_and_calling_it_twice_is_harmless_lif_1() {
    let pass = Scripted::new(&[]);
    let (mut handle, mut events) = start(&pass, Leadership::EveryInstance);
    assert_eq!(next_outcome(&mut events).await, led(1));
    let before = Instant::now();
    handle.shutdown().await;
    handle.shutdown().await;
    assert_eq!(Instant::now(), before, "the interval wait was cancelled, not waited out");
    assert_eq!(events.recv().await.unwrap(), WorkerEvent::Stopped);
    assert!(matches!(events.recv().await, Err(broadcast::error::RecvError::Closed)), "nothing after Stopped");
    assert_eq!(pass.passes(), 1);
    assert_eq!(pass.stopped.load(Ordering::SeqCst), 1, "the pass is told to release once");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_loop_that_never_started_a_wait_runs_no_pass() {
    let pass = Scripted::new(&[]);
    let pass_loop = PassLoop::with_shared_pass(
        WorkerKind::Sweeper,
        Arc::clone(&pass),
        backoff(),
        Leadership::EveryInstance,
    );
    let mut events = pass_loop.subscribe();
    let shutdown = CancellationToken::new();
    shutdown.cancel();
    pass_loop.run(shutdown).await;
    assert_eq!(events.recv().await.unwrap(), WorkerEvent::Stopped);
    assert_eq!((pass.passes(), pass.stopped.load(Ordering::SeqCst)), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_starts_the_next_pass_early_but_never_shortens_a_backoff() {
    let pass = Scripted::new(&[Step::Succeed, Step::Fail]);
    let wake = Arc::new(Notify::new());
    let pass_loop = PassLoop::with_shared_pass(
        WorkerKind::Dispatcher,
        Arc::clone(&pass),
        backoff(),
        Leadership::EveryInstance,
    )
    .wake_on(Arc::clone(&wake));
    let mut events = pass_loop.subscribe();
    let mut handle = pass_loop.spawn(CancellationToken::new());
    assert_eq!(next_outcome(&mut events).await, led(1));
    wake.notify_one();
    assert!(matches!(next_outcome(&mut events).await, WorkerEvent::PassFailed { consecutive: 1, .. }));
    wake.notify_one();
    assert_eq!(next_outcome(&mut events).await, led(3));
    handle.shutdown().await;
    assert_eq!(pass.waits(), [Duration::ZERO, INTERVAL]);
}

/// With `wake_during_backoff` (the consumer's settle loop), a wake-up after a failed pass
/// starts the next pass at once instead of waiting out the backoff: work a wake-up
/// announces is never left for a whole backoff (RES-2, QUE-5).
#[tokio::test(start_paused = true)]
async fn a_wake_up_ends_a_failure_backoff_when_the_loop_asks_for_it_res_2() {
    let pass = Scripted::new(&[Step::Fail, Step::Fail]);
    let wake = Arc::new(Notify::new());
    let pass_loop = PassLoop::with_shared_pass(
        WorkerKind::Consumer,
        Arc::clone(&pass),
        backoff(),
        Leadership::EveryInstance,
    )
    .wake_on(Arc::clone(&wake))
    .wake_during_backoff();
    let mut events = pass_loop.subscribe();
    let mut handle = pass_loop.spawn(CancellationToken::new());
    assert!(matches!(next_outcome(&mut events).await, WorkerEvent::PassFailed { consecutive: 1, .. }));
    wake.notify_one();
    assert!(matches!(next_outcome(&mut events).await, WorkerEvent::PassFailed { consecutive: 2, .. }));
    wake.notify_one();
    assert_eq!(next_outcome(&mut events).await, led(3));
    handle.shutdown().await;
    assert_eq!(pass.waits(), [Duration::ZERO, Duration::ZERO]);
}

/// An in-process lock for tests: one holder at a time; `lose_session` makes the holder's
/// next `ensure_held` fail, as a killed database session would.
#[derive(Clone, Debug, Default)]
struct TestLock {
    state: Arc<Mutex<TestLockState>>,
}

#[derive(Debug, Default)]
struct TestLockState {
    /// The current holder's generation, if held.
    holder: Option<u32>,
    generation: u32,
    lost: bool,
    releases: u32,
}

#[derive(Debug)]
struct TestGuard {
    lock: TestLock,
    generation: u32,
}

#[async_trait]
impl DistributedLock for TestLock {
    async fn try_lock(&self, resource: &str) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        let mut state = self.state.lock().unwrap();
        if state.holder.is_some() {
            return Ok(None);
        }
        let _ = resource;
        state.generation += 1;
        state.holder = Some(state.generation);
        state.lost = false;
        Ok(Some(Box::new(TestGuard { lock: self.clone(), generation: state.generation })))
    }
}

#[async_trait]
impl LockGuard for TestGuard {
    fn resource(&self) -> &str {
        "sweeper"
    }

    async fn ensure_held(&mut self) -> Result<(), LockError> {
        let state = self.lock.state.lock().unwrap();
        if state.lost || state.holder != Some(self.generation) {
            return Err(LockError::new("sweeper", LockErrorKind::Lost));
        }
        Ok(())
    }

    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut state = self.lock.state.lock().unwrap();
        if state.holder == Some(self.generation) {
            state.holder = None;
        }
        state.releases += 1;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_advisory_leader_checks_its_lock_before_each_pass_and_drops_it_on_error_ldr_6() {
    let lock = TestLock::default();
    let leadership = Leadership::Advisory(Arc::new(lock.clone()), "sweeper".to_owned());
    let leader = Scripted::new(&[]);
    let follower = Scripted::new(&[]);
    let (mut leader_handle, mut leader_events) = start(&leader, leadership.clone());
    assert_eq!(next_outcome(&mut leader_events).await, led(1));
    let (mut follower_handle, mut follower_events) = start(&follower, leadership);
    assert_eq!(next_outcome(&mut follower_events).await, not_leader());
    assert_eq!(follower.passes(), 0, "a follower skips its turn without running the pass");
    follower_handle.shutdown().await;

    // The leader's session dies: its next check fails, it gives the lock up, and it leads
    // again only after taking the lock anew.
    lock.state.lock().unwrap().lost = true;
    assert!(matches!(next_outcome(&mut leader_events).await, WorkerEvent::PassFailed { consecutive: 1, .. }));
    assert_eq!(lock.state.lock().unwrap().releases, 1);
    assert_eq!(leader.passes(), 1, "no pass ran on a lock in doubt");
    assert_eq!(next_outcome(&mut leader_events).await, led(2));
    assert_eq!(lock.state.lock().unwrap().generation, 2);
    leader_handle.shutdown().await;
    assert_eq!(lock.state.lock().unwrap().holder, None, "shutdown releases the lock");
}

/// A backlog drained `BATCH` rows per pass: the report is the rows moved.
struct Backlog {
    remaining: AtomicU32,
    starts: Mutex<Vec<Instant>>,
}

const BATCH: u32 = 10;

#[async_trait]
impl Pass for Backlog {
    type Report = u64;
    type Error = PassError;

    async fn run_pass(&self, _shutdown: &CancellationToken) -> Result<PassOutcome<u64>, PassError> {
        self.starts.lock().unwrap().push(Instant::now());
        let left = self.remaining.load(Ordering::SeqCst);
        let moved = left.min(BATCH);
        self.remaining.store(left - moved, Ordering::SeqCst);
        Ok(PassOutcome::Led(u64::from(moved)))
    }

    fn again_at_once(&self, moved: &u64) -> bool {
        *moved == u64::from(BATCH)
    }
}

/// RES-3, SWP-6: a pass that found a full batch is followed at once; a pass that moved
/// less (nothing included) waits the interval, so the loop never spins on an empty batch.
#[tokio::test(start_paused = true)]
async fn a_full_batch_is_followed_at_once_and_a_pass_that_moved_nothing_waits_res_3() {
    let pass = Arc::new(Backlog { remaining: AtomicU32::new(25), starts: Mutex::new(Vec::new()) });
    let pass_loop = PassLoop::with_shared_pass(
        WorkerKind::Dispatcher,
        Arc::clone(&pass),
        backoff(),
        Leadership::EveryInstance,
    );
    let mut events = pass_loop.subscribe();
    let mut handle = pass_loop.spawn(CancellationToken::new());
    for moved in [10, 10, 5, 0] {
        assert_eq!(next_outcome(&mut events).await, led(moved));
    }
    handle.shutdown().await;
    let starts = pass.starts.lock().unwrap();
    let waits: Vec<Duration> = starts.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert_eq!(waits, [Duration::ZERO, Duration::ZERO, INTERVAL]);
}

/// A woken loop lingers before its pass, so a burst of wake-ups is served by one pass.
#[tokio::test(start_paused = true)]
async fn a_woken_loop_lingers_before_its_pass() {
    let pass = Scripted::new(&[]);
    let wake = Arc::new(Notify::new());
    let linger = Duration::from_millis(3);
    let pass_loop = PassLoop::with_shared_pass(
        WorkerKind::Dispatcher,
        Arc::clone(&pass),
        backoff(),
        Leadership::EveryInstance,
    )
    .wake_on(Arc::clone(&wake))
    .linger_after_wake(linger);
    let mut events = pass_loop.subscribe();
    let mut handle = pass_loop.spawn(CancellationToken::new());
    assert_eq!(next_outcome(&mut events).await, led(1));
    let woken_at = Instant::now();
    wake.notify_one();
    wake.notify_one();
    assert_eq!(next_outcome(&mut events).await, led(2));
    handle.shutdown().await;
    assert_eq!(pass.starts.lock().unwrap()[1] - woken_at, linger);
    assert_eq!(pass.passes(), 2, "the two wake-ups were served by one pass");
}

/// A pass that takes `took` of (virtual) time and then reports it, or fails after it.
struct Timed {
    took: Duration,
    fail: bool,
}

#[async_trait]
impl Pass for Timed {
    type Report = u64;
    type Error = PassError;

    async fn run_pass(&self, _shutdown: &CancellationToken) -> Result<PassOutcome<u64>, PassError> {
        tokio::time::sleep(self.took).await;
        if self.fail {
            return Err(PassError(std::io::Error::other("timed out")));
        }
        Ok(PassOutcome::Led(u64::try_from(self.took.as_millis()).unwrap()))
    }
}

/// OBS-2: loops that share one event channel (the dispatcher's unordered loops and its
/// lane loop) interleave their events; each finished pass carries the duration its own
/// loop measured, so a subscriber never has to pair a finish with someone else's start.
#[tokio::test(start_paused = true)]
async fn loops_sharing_a_channel_each_report_their_own_pass_durations_obs_2() {
    let (events_to, mut events) = broadcast::channel(64);
    let shutdown = CancellationToken::new();
    // Slow starts first, fast starts second and finishes first, failing starts third.
    let mut handles: Vec<_> = [(700, false), (300, false), (500, true)]
        .into_iter()
        .map(|(millis, fail)| {
            PassLoop::new(
                WorkerKind::Dispatcher,
                Timed { took: Duration::from_millis(millis), fail },
                backoff(),
                Leadership::EveryInstance,
            )
            .events_to(events_to.clone())
            .spawn(shutdown.clone())
        })
        .collect();
    let mut started = 0;
    let mut finished = Vec::new();
    while finished.len() < 3 {
        match events.recv().await.unwrap() {
            WorkerEvent::PassStarted { .. } => started += 1,
            WorkerEvent::PassSucceeded { outcome: PassOutcome::Led(millis), duration } => {
                finished.push((Some(millis), duration));
            }
            WorkerEvent::PassFailed { duration, .. } => finished.push((None, duration)),
            other => panic!("unexpected {other:?}"),
        }
    }
    for handle in &mut handles {
        handle.shutdown().await;
    }
    assert_eq!(started, 3, "all three passes started before the first finished");
    let ms = Duration::from_millis;
    assert_eq!(finished, [(Some(300), ms(300)), (None, ms(500)), (Some(700), ms(700))]);
}
