//! [`FaultyTransport`]: a real, recording [`Transport`] whose failures a test injects — a
//! failed batch, a failed message, a panic, a slow or held send — without any mocking
//! library. The dispatcher's and the sweeper's tests drive their workers through it, and a
//! user can drive their own.
//!
//! ```
//! use std::sync::atomic::Ordering;
//! use relayer_test_support::FaultyTransport;
//!
//! let transport = FaultyTransport::new("queue").with_batch_limit(100);
//! transport.fail_first_calls.store(2, Ordering::SeqCst); // two whole-batch failures first
//! transport.failing_destinations.lock().unwrap().insert("broken".to_owned());
//! assert!(transport.accepted().is_empty());
//! ```

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use relayer_core::{Envelope, SendOutcome, Transport, TransportError, async_trait};
use tokio::sync::{Notify, Semaphore};

/// What transports accepted: `(destination, envelope)`, in acceptance order. Several
/// transports may share one, so a test sees every delivery of several workers.
pub type Sink = Arc<Mutex<Vec<(String, Envelope)>>>;

/// A recording transport with injectable failures, panics, slowness and a gate.
///
/// Every knob is a public field: counters and switches are atomics a test may flip while
/// workers send; `delay`, `permanent` and `error_detail` are set before the transport is shared.
#[derive(Debug)]
pub struct FaultyTransport {
    name: String,
    limit: NonZeroUsize,
    /// Every accepted message, with its destination.
    pub sink: Sink,
    /// `send` calls so far.
    pub calls: AtomicU32,
    /// Fail the first n calls as a whole (`Err`).
    pub fail_first_calls: AtomicU32,
    /// Fail every call whose number (from 1) is a multiple of this, as a whole (0: never).
    pub fail_every_nth_call: u32,
    /// Panic in the first n calls.
    pub panic_first_calls: AtomicU32,
    /// Messages whose body is in this set fail (per-message outcome).
    pub failing_bodies: Mutex<HashSet<Vec<u8>>>,
    /// Messages to these destinations fail (per-message outcome).
    pub failing_destinations: Mutex<HashSet<String>>,
    /// Every message fails while this is on.
    pub failing: AtomicBool,
    /// Failures are permanent instead of transient.
    pub permanent: bool,
    /// Appended to every injected error's text: text PostgreSQL refuses (a NUL), or a very
    /// long one (SPEC §15).
    pub error_detail: String,
    /// Each call sleeps this long before answering.
    pub delay: Duration,
    /// While set, every call waits for [`open_gate`](Self::open_gate) before answering.
    pub gated: AtomicBool,
    gate: Semaphore,
    /// Notified (a stored permit) each time a call starts.
    pub entered: Notify,
    in_flight: AtomicUsize,
    /// The most `send` calls ever in flight at once.
    pub max_in_flight: AtomicUsize,
}

impl FaultyTransport {
    /// A transport called `name` that accepts everything, 50 messages a batch, into a sink
    /// of its own.
    pub fn new(name: &str) -> Self {
        FaultyTransport::with_sink(name, Sink::default())
    }

    /// A transport called `name` that accepts into `sink` (shared with other transports).
    pub fn with_sink(name: &str, sink: Sink) -> Self {
        FaultyTransport {
            name: name.to_owned(),
            limit: NonZeroUsize::new(50).unwrap_or(NonZeroUsize::MIN),
            sink,
            calls: AtomicU32::new(0),
            fail_first_calls: AtomicU32::new(0),
            fail_every_nth_call: 0,
            panic_first_calls: AtomicU32::new(0),
            failing_bodies: Mutex::new(HashSet::new()),
            failing_destinations: Mutex::new(HashSet::new()),
            failing: AtomicBool::new(false),
            permanent: false,
            error_detail: String::new(),
            delay: Duration::ZERO,
            gated: AtomicBool::new(false),
            gate: Semaphore::new(0),
            entered: Notify::new(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }

    /// The same transport with batches of at most `limit` messages (at least 1).
    #[must_use]
    pub fn with_batch_limit(mut self, limit: usize) -> Self {
        self.limit = NonZeroUsize::new(limit).unwrap_or(NonZeroUsize::MIN);
        self
    }

    /// Every message accepted so far, with its destination.
    pub fn accepted(&self) -> Vec<(String, Envelope)> {
        self.sink.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Lets every waiting and every later gated call through.
    pub fn open_gate(&self) {
        self.gated.store(false, Ordering::SeqCst);
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    fn error(&self, what: &str) -> TransportError {
        let what = format!("{what}{}", self.error_detail);
        if self.permanent { TransportError::permanent(what) } else { TransportError::transient(what) }
    }
}

/// Takes one from `counter` unless it is zero.
fn take_one(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

/// Counts a call in flight until dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Transport for FaultyTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.limit
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&self.in_flight);
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.entered.notify_one();
        if self.gated.load(Ordering::SeqCst) {
            // The semaphore is never closed: a failed acquire cannot happen.
            if let Ok(permit) = self.gate.acquire().await {
                permit.forget();
            }
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if take_one(&self.panic_first_calls) {
            panic!("injected transport panic");
        }
        if take_one(&self.fail_first_calls) {
            return Err(self.error("injected batch failure"));
        }
        if self.fail_every_nth_call > 0 && call.is_multiple_of(self.fail_every_nth_call) {
            return Err(self.error("injected periodic failure"));
        }
        let failing_all = self.failing.load(Ordering::SeqCst);
        let failing_bodies = self.failing_bodies.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let failing_destination =
            self.failing_destinations.lock().unwrap_or_else(PoisonError::into_inner).contains(destination);
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(batch
            .iter()
            .map(|envelope| {
                if failing_all || failing_destination || failing_bodies.contains(&envelope.body) {
                    SendOutcome::Failed(self.error("injected message failure"))
                } else {
                    sink.push((destination.to_owned(), envelope.clone()));
                    SendOutcome::Accepted
                }
            })
            .collect())
    }
}
