//! The messages a pump holds: received and not yet settled.
//!
//! The heartbeat renews the visibility of each of them (QUE-5): while it waits in the
//! receive-ahead buffer for a slot (at most a handler deadline and a visibility timeout),
//! while its handler runs and is within its deadline, and after the handler finished until
//! its settlement is written (for at most a few visibility timeouts).
//! A handler that overran is abandoned by the deadline; one that blocks its thread and
//! cannot be abandoned stops being renewed at its deadline, so its message reappears.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

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
}

impl InFlight {
    /// A message just received, renewed until `until` while it waits for a slot.
    pub(crate) fn received(&self, receipt: Receipt, until: Instant) {
        self.entries().insert(receipt.seq, Entry { receipt, renew_until: until });
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
