//! What a pump has done so far: counters for health checks, tests and the demo.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one pump since it started; read with [`ConsumerStats::snapshot`].
#[derive(Debug, Default)]
pub struct ConsumerStats {
    received: AtomicU64,
    acked: AtomicU64,
    requeued: AtomicU64,
    dead_lettered: AtomicU64,
    undecodable: AtomicU64,
    duplicates: AtomicU64,
    panicked: AtomicU64,
    overran: AtomicU64,
    lapsed: AtomicU64,
    abandoned: AtomicU64,
    conflicts: AtomicU64,
    full_scans: AtomicU64,
}

/// The counters of a pump at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Messages received (undecodable rows included).
    pub received: u64,
    /// Messages acknowledged (deleted), duplicates skipped by the inbox included.
    pub acked: u64,
    /// Messages requeued.
    pub requeued: u64,
    /// Messages moved to the dead-letter or invalid-message queue, undecodable ones included.
    pub dead_lettered: u64,
    /// Rows that could not be decoded.
    pub undecodable: u64,
    /// Messages the inbox had already recorded: acked without calling the handler.
    pub duplicates: u64,
    /// Handler calls that panicked.
    pub panicked: u64,
    /// Handler calls abandoned at their deadline.
    pub overran: u64,
    /// Settlements that matched nothing: the receipt had lapsed and another reader owned
    /// the message (QUE-5).
    pub lapsed: u64,
    /// Messages left to reappear: abandoned at shutdown, or their settlement failed.
    pub abandoned: u64,
    /// Statements (receive, settle, heartbeat) that lost a conflict with a concurrent
    /// transaction — a deadlock, a serialization failure, a lock not available — and were
    /// retried after a short pause instead of the backoff an outage earns.
    pub conflicts: u64,
    /// Receives that read the queue from its oldest `visible_at` rather than from where
    /// the last one got to: the first, then at least one per poll interval (the safety net
    /// for rows committed long after their `visible_at`; see
    /// [`relayer_core::receive_cursor`]).
    pub full_scans: u64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Received,
    Acked,
    Requeued,
    DeadLettered,
    Undecodable,
    Duplicates,
    Panicked,
    Overran,
    Lapsed,
    Abandoned,
    Conflicts,
    FullScans,
}

impl ConsumerStats {
    pub(crate) fn add(&self, counter: Counter, n: u64) {
        let cell = match counter {
            Counter::Received => &self.received,
            Counter::Acked => &self.acked,
            Counter::Requeued => &self.requeued,
            Counter::DeadLettered => &self.dead_lettered,
            Counter::Undecodable => &self.undecodable,
            Counter::Duplicates => &self.duplicates,
            Counter::Panicked => &self.panicked,
            Counter::Overran => &self.overran,
            Counter::Lapsed => &self.lapsed,
            Counter::Abandoned => &self.abandoned,
            Counter::Conflicts => &self.conflicts,
            Counter::FullScans => &self.full_scans,
        };
        cell.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let read = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        StatsSnapshot {
            received: read(&self.received),
            acked: read(&self.acked),
            requeued: read(&self.requeued),
            dead_lettered: read(&self.dead_lettered),
            undecodable: read(&self.undecodable),
            duplicates: read(&self.duplicates),
            panicked: read(&self.panicked),
            overran: read(&self.overran),
            lapsed: read(&self.lapsed),
            abandoned: read(&self.abandoned),
            conflicts: read(&self.conflicts),
            full_scans: read(&self.full_scans),
        }
    }
}

impl fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received={} acked={} requeued={} dead_lettered={} undecodable={} duplicates={} panicked={} \
             overran={} lapsed={} abandoned={} conflicts={} full_scans={}",
            self.received,
            self.acked,
            self.requeued,
            self.dead_lettered,
            self.undecodable,
            self.duplicates,
            self.panicked,
            self.overran,
            self.lapsed,
            self.abandoned,
            self.conflicts,
            self.full_scans
        )
    }
}
