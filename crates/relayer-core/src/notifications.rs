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
pub const DEFAULT_NOTIFY_INTERVAL: Duration = Duration::from_millis(50);

/// A queue write that comes at least this long after the writer's previous write to the
/// same queue notifies it even within [`DEFAULT_NOTIFY_INTERVAL`]: a steady load of a few
/// hundred transactions a second (a batch every 25 ms, say) is then picked up at once
/// instead of up to an interval later, while a writer committing faster than this — the
/// one whose commits a NOTIFY would serialize — still notifies at most once per interval.
pub const NOTIFY_AFTER_QUIET: Duration = Duration::from_millis(5);

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
