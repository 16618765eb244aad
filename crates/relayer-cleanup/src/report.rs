//! What one cleanup pass did.

use std::fmt;

use relayer_core::RetentionTable;

/// What one cleanup pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CleanupReport {
    /// Whether this instance led the pass; `false`: another instance holds the lease and
    /// nothing was done.
    pub led: bool,
    /// The lease term the pass was fenced by (lease leadership only).
    pub term: Option<i64>,
    /// Dead rows deleted.
    pub dead_deleted: u64,
    /// Inbox rows deleted.
    pub inbox_deleted: u64,
    /// Delete statements run.
    pub batches: u32,
    /// The pass stopped before the backlog was gone: its time budget was spent or the host
    /// is shutting down. The next pass carries on.
    pub stopped_early: bool,
    /// The lease was no longer this instance's at a batch (it lapsed while the process
    /// stalled, and another instance took it over): that batch deleted nothing and the
    /// pass ended there (LDR-6).
    pub lease_lost: bool,
}

impl CleanupReport {
    /// Rows deleted from `table` (always 0 for the outbox).
    pub fn deleted(&self, table: RetentionTable) -> u64 {
        match table {
            RetentionTable::Outbox => 0,
            RetentionTable::Dead => self.dead_deleted,
            RetentionTable::Inbox => self.inbox_deleted,
        }
    }
}

impl fmt::Display for CleanupReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dead_deleted={} inbox_deleted={} batches={}",
            self.dead_deleted, self.inbox_deleted, self.batches
        )?;
        if self.stopped_early {
            f.write_str(" stopped_early")?;
        }
        if self.lease_lost {
            f.write_str(" lease_lost")?;
        }
        Ok(())
    }
}
