//! Waking a worker when new work committed: [`Notifications`] (LISTEN/NOTIFY on
//! PostgreSQL, `relayer_postgres::PgNotifications`).
//!
//! A listener holds a connection of its own for its whole life (never a pooled one: it
//! must not starve passes, LIF-2). After every (re)connect it reports [`Heard::Connected`]
//! once, since notifications sent while nobody listened are lost: a worker then looks for
//! work at once. A wake-up is only ever a hint; workers poll to cover the gaps.

use std::future::Future;
use std::pin::Pin;

use std::time::Duration;

use async_trait::async_trait;

use crate::backoff::PassBackoff;

/// How often, at most, a writer notifies one channel (and, for relayer's queue, one queue)
/// unless told otherwise. A listener that wakes on a notification looks again this long
/// later, so what committed after the notification is read then (QUE-4).
///
/// 5 ms: a message committed in a writer's silent window is picked up within about that
/// (the pickup target at a steady load is p99 ≤ 15 ms), while a writer still notifies at
/// most 200 times a second per queue, so busy writers rarely queue their commits behind
/// one another's NOTIFY (50 ms before, which cost a steady load tens of milliseconds per
/// pickup; docs/performance.md).
pub const DEFAULT_NOTIFY_INTERVAL: Duration = Duration::from_millis(5);

/// What a listener heard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard<'a> {
    /// The listener (re)connected: anything may have been missed meanwhile.
    Connected,
    /// A notification with this payload.
    Notification(&'a str),
}

/// A source of wake-ups on one channel, chosen when the listener was built (the queue's,
/// the outbox's).
#[async_trait]
pub trait Notifications: Send + Sync + 'static {
    /// Listens until `until` completes, calling `heard` for every notification and after
    /// every (re)connect; a lost connection is reopened after `backoff.wait_after(failures)`.
    /// Returns once the connection is closed.
    async fn listen(
        &self,
        backoff: PassBackoff,
        heard: Box<dyn for<'h> Fn(Heard<'h>) + Send + Sync>,
        until: Pin<Box<dyn Future<Output = ()> + Send>>,
    );
}
