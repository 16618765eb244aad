//! The public face of a pump: [`Consumer::new`] → [`Consumer::run`] until shutdown.

use relayer_core::notifications::DEFAULT_NOTIFY_INTERVAL;
use relayer_core::session::StoreSource;
use relayer_core::store::{ExtendVisibility, ReceiveQueue, RecordInbox, SettleQueue, VerifySchema};
use relayer_core::{Heard, Namespace, Notifications, PassBackoff, StoreError};
use relayer_worker::{Leadership, PassLoop, WorkerError, WorkerKind};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::handler::Handling;
use crate::handler_call::HandlerCall;
use crate::heartbeat::HeartbeatPass;
use crate::in_flight::InFlight;
use crate::pump::{ConsumeSession, Pump};
use crate::receive::ReceivePass;
use crate::settle::SettlePass;
use crate::stats::{ConsumerStats, Counter};
use crate::subscription::Subscription;

const TARGET: &str = "relayer::consumer";

/// Handler calls kept for slow subscribers; older ones are dropped (they see `Lagged`).
const CALL_CAPACITY: usize = 1024;

/// The pump of one subscription (§10). See the [crate docs](crate).
///
/// It reaches its store only through `S`, a [`StoreSource`] whose sessions receive
/// ([`ReceiveQueue`]), settle ([`SettleQueue`]), keep messages invisible
/// ([`ExtendVisibility`]), record them in the inbox ([`RecordInbox`], in a
/// [`Session`](relayer_core::Session)'s transaction) and check the schema
/// ([`VerifySchema`]); and it wakes on [`Notifications`]. relayer's are
/// `relayer_postgres::PgSource` and `relayer_postgres::PgNotifications::queue`.
pub struct Consumer<S: StoreSource> {
    pump: Arc<Pump<S>>,
    /// The queue channel's wake-ups.
    notifications: Arc<dyn Notifications>,
    namespace: Namespace,
    /// The receive-ahead buffer's receiving end, for the dispatcher.
    buffered: mpsc::Receiver<relayer_core::Received>,
}

impl<S: StoreSource> std::fmt::Debug for Consumer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("namespace", &self.namespace)
            .field("subscription", &self.pump.subscription)
            .field("handling", &self.pump.handling)
            .finish_non_exhaustive()
    }
}

impl<S> Consumer<S>
where
    S: StoreSource,
    S::Session: VerifySchema + ReceiveQueue + SettleQueue + ExtendVisibility + RecordInbox,
{
    /// A pump of `subscription` in `namespace`, running `handling` (a plain handler or an
    /// inbox-wrapped one). It opens sessions of `source` — one per pass, and one per
    /// handler call in flight for an inbox handler, so give relayer's source a pool of
    /// `concurrency + 3` for those — and wakes on `notifications` of the namespace's queue
    /// channel (relayer's: `PgNotifications::queue(database, &namespace)`, on a dedicated
    /// connection).
    pub fn new(
        notifications: impl Notifications,
        source: S,
        namespace: Namespace,
        subscription: Subscription,
        handling: impl Into<Handling<S::Session>>,
    ) -> Self {
        let options = subscription.options();
        let (buffer, buffered) = mpsc::channel(options.receive_ahead() as usize);
        let pump = Pump {
            table: namespace.table("queue"),
            source,
            handling: handling.into(),
            slots: Arc::new(Semaphore::new(options.concurrency() as usize)),
            settle_room: Arc::new(Semaphore::new(options.max_pending_settlements() as usize)),
            buffer,
            more_waiting: std::sync::atomic::AtomicBool::new(false),
            in_flight: InFlight::default(),
            pending: std::sync::Mutex::default(),
            settle_timer: Arc::default(),
            cursor: std::sync::Mutex::new(crate::pump::Receiving::new(options.poll_interval())),
            receive_wake: Arc::new(Notify::new()),
            settle_wake: Arc::new(Notify::new()),
            handlers: TaskTracker::new(),
            abandon: CancellationToken::new(),
            stats: Arc::new(ConsumerStats::default()),
            calls: broadcast::channel(CALL_CAPACITY).0,
            subscription,
        };
        Consumer { pump: Arc::new(pump), notifications: Arc::new(notifications), namespace, buffered }
    }
}

impl<S: StoreSource> Consumer<S> {
    /// The subscription this pump serves.
    pub fn subscription(&self) -> &Subscription {
        &self.pump.subscription
    }

    /// The pump's counters, readable while it runs and after.
    pub fn stats(&self) -> Arc<ConsumerStats> {
        Arc::clone(&self.pump.stats)
    }

    /// A subscription to the pump's handler calls from now on, each told as it ends: how
    /// it ended and how long it ran (for metrics, OBS-2). The channel closes once the pump
    /// has stopped and its last settlements are written.
    pub fn subscribe(&self) -> broadcast::Receiver<HandlerCall> {
        self.pump.calls.subscribe()
    }
}

impl<S> Consumer<S>
where
    S: StoreSource,
    S::Session: VerifySchema + ReceiveQueue + SettleQueue + ExtendVisibility + RecordInbox,
{
    /// Checks the schema, then consumes until `shutdown` is cancelled. A failed receive,
    /// settlement or heartbeat (a lost connection, a restarting database) is logged and
    /// retried with backoff; nothing a handler does ends the pump (RES-1, QUE-5).
    ///
    /// At shutdown it stops receiving, lets handlers in flight finish within
    /// `shutdown_grace`, writes their settlements, and abandons the rest: their messages
    /// reappear after the visibility timeout (QUE-5). Returns an error only when it cannot
    /// start.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let pump = self.pump;
        if !wait_for_schema(&pump, &self.namespace, &shutdown).await? {
            return Ok(());
        }
        let options = pump.subscription.options().clone();
        let queue = pump.subscription.queue().to_owned();
        tracing::info!(target: TARGET, %queue, settings = %options.canonical_settings(), "consumer starting");

        let background = CancellationToken::new();
        let notifications = Arc::clone(&self.notifications);
        let (backoff, heard) = (options.pass_backoff(), waker(queue.clone(), Arc::clone(&pump.receive_wake)));
        let until = Box::pin(background.clone().cancelled_owned());
        let listener =
            tokio::spawn(async move { notifications.listen(backoff, Box::new(heard), until).await });
        let heartbeat_interval = options.heartbeat_interval();
        let heartbeat_backoff = PassBackoff::new(heartbeat_interval, heartbeat_interval)
            .unwrap_or_else(|_| options.pass_backoff());
        let mut heartbeat = PassLoop::new(
            WorkerKind::Consumer,
            HeartbeatPass { pump: Arc::clone(&pump) },
            heartbeat_backoff,
            Leadership::EveryInstance,
        )
        .spawn(background.child_token());
        let mut settle = PassLoop::new(
            WorkerKind::Consumer,
            SettlePass { pump: Arc::clone(&pump) },
            options.pass_backoff(),
            Leadership::EveryInstance,
        )
        .wake_on(Arc::clone(&pump.settle_wake))
        .wake_during_backoff()
        .spawn(background.child_token());
        let stop_dispatch = CancellationToken::new();
        // A host that gives up on this run at its shutdown bound drops it: nothing the run
        // started may outlive it then (LIF-1). The guards stop the LISTEN task, the
        // heartbeat and settle loops, the dispatcher and the handlers still running.
        let _stop_on_drop = (
            background.clone().drop_guard(),
            stop_dispatch.clone().drop_guard(),
            pump.abandon.clone().drop_guard(),
        );
        let dispatcher = tokio::spawn(Arc::clone(&pump).dispatch(self.buffered, stop_dispatch.clone()));
        let mut receive = PassLoop::new(
            WorkerKind::Consumer,
            ReceivePass { pump: Arc::clone(&pump) },
            options.pass_backoff(),
            Leadership::EveryInstance,
        )
        .wake_on(Arc::clone(&pump.receive_wake))
        // A wake-up (a notification, a drained buffer) ends a failure backoff too: a receive
        // that timed out on a slow database is tried again when messages are announced,
        // not only after the backoff an outage earns.
        .wake_during_backoff()
        .spawn(shutdown.child_token());

        shutdown.cancelled().await;
        receive.shutdown().await;
        stop_dispatch.cancel();
        match dispatcher.await {
            Ok(buffered) => pump.release(buffered).await,
            Err(error) => tracing::error!(target: TARGET, %queue, %error, "the dispatcher ended abnormally"),
        }
        pump.handlers.close();
        if tokio::time::timeout(options.shutdown_grace(), pump.handlers.wait()).await.is_err() {
            tracing::warn!(target: TARGET, %queue, in_flight = pump.in_flight.len(),
                "handlers still running after the shutdown grace; abandoning them, their messages reappear \
                 after the visibility timeout");
            pump.abandon.cancel();
            pump.handlers.wait().await;
        }
        settle.shutdown().await;
        if let Err(error) = pump.settle_pending(true).await {
            let left = pump.pending().len() as u64;
            pump.stats.add(Counter::Abandoned, left);
            tracing::warn!(target: TARGET, %queue, left, error = %relayer_core::error_chain(&error),
                "the last settlements could not be written; those messages reappear after the visibility timeout");
        }
        heartbeat.shutdown().await;
        background.cancel();
        if let Err(error) = listener.await {
            tracing::error!(target: TARGET, %queue, %error, "the LISTEN task ended abnormally");
        }
        tracing::info!(target: TARGET, %queue, stats = %pump.stats.snapshot(), "consumer stopped");
        Ok(())
    }
}

/// Wakes the receive loop on (re)connect and on every notification for `queue`, and once
/// more [`DEFAULT_NOTIFY_INTERVAL`] after the latest notification of a burst: writers
/// notify a queue at most once per such interval, so what committed after a notification
/// is read then (QUE-4). Each notification pushes that trailing read back, up to
/// [`TRAILING_CAP`] after the burst's first, so a steady stream of notifications cannot
/// postpone it forever.
fn waker(queue: String, wake: Arc<Notify>) -> impl Fn(Heard<'_>) + Send + Sync + 'static {
    let trailing: Arc<Mutex<Option<TrailingRead>>> = Arc::default();
    move |heard| match heard {
        Heard::Connected => wake.notify_one(),
        Heard::Notification(payload) if payload == queue => {
            wake.notify_one();
            let now = Instant::now();
            let mut window = trailing.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(window) = window.as_mut() {
                window.heard(now);
                return;
            }
            *window = Some(TrailingRead::new(now));
            let (wake, trailing) = (Arc::clone(&wake), Arc::clone(&trailing));
            tokio::spawn(async move {
                loop {
                    let Some(at) = trailing.lock().unwrap_or_else(PoisonError::into_inner).map(|w| w.read_at)
                    else {
                        return;
                    };
                    tokio::time::sleep_until(at).await;
                    let mut window = trailing.lock().unwrap_or_else(PoisonError::into_inner);
                    if window.is_some_and(|w| w.read_at <= Instant::now()) {
                        *window = None;
                        wake.notify_one();
                        return;
                    }
                }
            });
        }
        Heard::Notification(_) => {}
    }
}

/// The latest a trailing read waits after the first notification of a burst.
const TRAILING_CAP: Duration = DEFAULT_NOTIFY_INTERVAL.saturating_mul(4);

/// A burst of notifications and the read that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TrailingRead {
    first: Instant,
    read_at: Instant,
}

impl TrailingRead {
    fn new(now: Instant) -> Self {
        TrailingRead { first: now, read_at: now + DEFAULT_NOTIFY_INTERVAL }
    }

    /// Another notification at `now`: the read follows it by an interval, at most
    /// [`TRAILING_CAP`] after the first; never earlier than already planned.
    fn heard(&mut self, now: Instant) {
        let pushed = (now + DEFAULT_NOTIFY_INTERVAL).min(self.first + TRAILING_CAP);
        self.read_at = self.read_at.max(pushed);
    }
}

/// Checks the schema before the pump starts: a missing or old schema is refused (OPT-5),
/// a database that cannot be reached yet (down, restarting, no connection) is retried with
/// the subscription's backoff, so a pump started during an outage runs once it is over
/// (RES-1). `false`: shut down meanwhile.
async fn wait_for_schema<S>(
    pump: &Pump<S>,
    namespace: &Namespace,
    shutdown: &CancellationToken,
) -> Result<bool, WorkerError>
where
    S: StoreSource,
    S::Session: ConsumeSession,
{
    let backoff = pump.subscription.options().pass_backoff();
    let mut failures = 0u32;
    loop {
        let checked = match pump.source.open().await {
            Ok(session) => match session.verify_schema().await {
                Ok(_) => return Ok(true),
                // A schema not applied yet is waited for (RES-4); a wrong version is not.
                Err(error) if !error.is_transient() && !error.is_schema_missing() => {
                    return Err(WorkerError::store(
                        format!(
                            "the consumer of queue {:?} cannot start: checking the schema of {namespace}",
                            pump.subscription.queue()
                        ),
                        error,
                    ));
                }
                Err(error) => relayer_core::error_chain(&error),
            },
            Err(error) => relayer_core::error_chain(&error),
        };
        failures = failures.saturating_add(1);
        let wait = backoff.wait_after(failures);
        tracing::warn!(target: TARGET, queue = %pump.subscription.queue(), failures, ?wait, cause = %checked,
            "consumer cannot check the schema yet; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return Ok(false),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QUE-4: the trailing read follows the latest notification of a burst, not the first.
    #[tokio::test(start_paused = true)]
    async fn the_trailing_read_follows_the_latest_notification_que_4() {
        let wake = Arc::new(Notify::new());
        let heard = waker("orders".to_owned(), Arc::clone(&wake));
        let start = Instant::now();
        heard(Heard::Notification("orders"));
        wake.notified().await; // the notification's own wake-up
        tokio::time::advance(Duration::from_millis(30)).await;
        heard(Heard::Notification("orders"));
        wake.notified().await;
        // The first notification's interval ends at 50 ms: no read then.
        let early = tokio::time::timeout(Duration::from_millis(45), wake.notified()).await;
        assert!(early.is_err(), "a trailing read {:?} after the start", start.elapsed());
        wake.notified().await;
        assert_eq!(start.elapsed(), Duration::from_millis(30) + DEFAULT_NOTIFY_INTERVAL);
    }

    /// QUE-4: a notification every 7 ms cannot postpone the trailing read past
    /// [`TRAILING_CAP`] after the first.
    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_notifications_cannot_postpone_the_trailing_read_forever_que_4() {
        let wake = Arc::new(Notify::new());
        let heard = waker("orders".to_owned(), Arc::clone(&wake));
        let start = Instant::now();
        let trailing = loop {
            heard(Heard::Notification("orders"));
            wake.notified().await;
            if tokio::time::timeout(Duration::from_millis(7), wake.notified()).await.is_ok() {
                break start.elapsed();
            }
        };
        assert_eq!(trailing, TRAILING_CAP);
    }

    proptest::proptest! {
        /// However notifications fall, the read comes an interval after the latest one
        /// or at the cap, never before either, and never moves earlier.
        #[test]
        fn the_trailing_read_is_an_interval_after_the_latest_notification_or_at_the_cap(
            gaps in proptest::collection::vec(0u64..120, 1..30),
        ) {
            let first = Instant::now();
            let mut read = TrailingRead::new(first);
            let mut now = first;
            for gap in gaps {
                let before = read.read_at;
                now += Duration::from_millis(gap);
                read.heard(now);
                proptest::prop_assert!(read.read_at >= before);
                proptest::prop_assert!(read.read_at <= (first + TRAILING_CAP).max(before));
                proptest::prop_assert!(
                    read.read_at >= (now + DEFAULT_NOTIFY_INTERVAL).min(first + TRAILING_CAP)
                );
            }
        }
    }
}
