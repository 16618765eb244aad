//! The messages a pump holds: received and not yet settled.
//!
//! The heartbeat renews the visibility of each of them (QUE-5): while it waits in the
//! receive-ahead buffer for a slot (at most a handler deadline and a visibility timeout),
//! while its handler runs and is within its deadline, and after the handler finished until
//! its settlement is written (for at most a few visibility timeouts).
//! A handler that overran is abandoned by the deadline; one that blocks its thread and
//! cannot be abandoned stops being renewed at its deadline, so its message reappears.
//!
//! Each entry also keeps how long its message is surely still invisible to other readers:
//! a lower bound on the row's `visible_at`, counted from when the receive or the last
//! heartbeat that renewed it was *sent* (the database's clock reads later). A buffered
//! message whose renewal window ran out (its slot came too late) or whose heartbeats failed
//! may have reappeared and been received by another reader; the dispatcher asks
//! [`InFlight::startable`] before starting it, and drops it rather than hand it out twice.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use relayer_core::Receipt;
use tokio::time::Instant;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    entries: Mutex<HashMap<i64, Entry>>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    receipt: Receipt,
    /// Renewed until then: the handler's deadline while it runs, then a bounded time for
    /// its settlement to be written (QUE-5: never renewed forever).
    renew_until: Instant,
    /// Until then no other reader can have received it (see the module docs).
    invisible_until: Instant,
}

impl InFlight {
    /// A message just received, renewed until `until` while it waits for a slot;
    /// invisible to others until `invisible_until` (the receive's send time plus the
    /// visibility timeout).
    pub(crate) fn received(&self, receipt: Receipt, until: Instant, invisible_until: Instant) {
        self.entries().insert(receipt.seq, Entry { receipt, renew_until: until, invisible_until });
    }

    /// Whether the buffered message of `receipt` may start: it is still held and stays
    /// invisible to other readers past `needed` (now: from then on the heartbeat keeps it,
    /// as any running handler's). If
    /// not, it is forgotten: it may have reappeared and been received by another reader,
    /// and is left to the queue (QUE-5: never handled by two readers because its lease
    /// lapsed while it waited).
    pub(crate) fn startable(&self, receipt: Receipt, needed: Instant) -> bool {
        let mut entries = self.entries();
        match entries.get(&receipt.seq) {
            Some(entry) if entry.receipt == receipt && entry.invisible_until > needed => true,
            Some(entry) if entry.receipt == receipt => {
                entries.remove(&receipt.seq);
                false
            }
            _ => false,
        }
    }

    /// A heartbeat sent at `sent` answered at `answered`, having renewed `held` of
    /// `receipts` for `visibility`. When every receipt held, each row was renewed from no
    /// earlier than `sent`. Otherwise only entries still surely invisible when it was
    /// answered are moved on (the statement ran while no other reader could hold their
    /// rows, so it renewed them); one that may have lapsed before keeps its old bound.
    pub(crate) fn renewed(
        &self,
        receipts: &[Receipt],
        held: u64,
        sent: Instant,
        answered: Instant,
        visibility: Duration,
    ) {
        let all_held = held >= receipts.len() as u64;
        let mut entries = self.entries();
        for receipt in receipts {
            let renewed =
                |e: &&mut Entry| e.receipt == *receipt && (all_held || e.invisible_until > answered);
            if let Some(entry) = entries.get_mut(&receipt.seq).filter(renewed) {
                entry.invisible_until = entry.invisible_until.max(sent + visibility);
            }
        }
    }

    /// The handler of `receipt` starts now and must end by `deadline`: renewed until then.
    pub(crate) fn started(&self, receipt: Receipt, deadline: Instant) {
        self.renew_until(receipt, deadline);
    }

    /// The handler of `receipt` is done; its settlement is pending and is renewed until
    /// `until`. A settlement that cannot be written by then (the database keeps refusing
    /// it) stops being renewed: the message reappears for another reader, and the late
    /// settlement, fenced by its receipt, changes nothing.
    pub(crate) fn settling(&self, receipt: Receipt, until: Instant) {
        self.renew_until(receipt, until);
    }

    fn renew_until(&self, receipt: Receipt, until: Instant) {
        if let Some(entry) = self.entries().get_mut(&receipt.seq).filter(|e| e.receipt == receipt) {
            entry.renew_until = until;
        }
    }

    /// `receipt` is settled, or given up: no longer renewed.
    pub(crate) fn forget(&self, receipt: Receipt) {
        let mut entries = self.entries();
        if entries.get(&receipt.seq).is_some_and(|e| e.receipt == receipt) {
            entries.remove(&receipt.seq);
        }
    }

    /// The receipts to renew at `now`.
    pub(crate) fn to_renew(&self, now: Instant) -> Vec<Receipt> {
        self.entries().values().filter(|e| e.renew_until > now).map(|e| e.receipt).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<i64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
