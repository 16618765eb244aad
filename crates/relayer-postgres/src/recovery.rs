//! The recovery sweeper's reads (SWP-2, SWP-3).
//!
//! A traversal first reads the highest pending unordered `seq` as its fixed boundary, then
//! pages through `(after, boundary]` in `seq` order, picking rows that are unordered, due
//! (`visible_at <= now()`: no live claim, delivery and retry time reached) and at least
//! `recovery_delay` old. Both statements use `{prefix}outbox_recovery_idx`
//! (`(seq, visible_at) INCLUDE (created_at) WHERE lane IS NULL`), so a page costs
//! O(rows scanned in the window), never O(table). The cursor itself is pure logic in
//! `relayer_core::cursor`; claims and sends reuse direct dispatch.

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use crate::error::StorageError;

/// The recovery statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct RecoveryStatements {
    highest_pending: String,
    page: String,
}

impl RecoveryStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let outbox = namespace.table("outbox");
        RecoveryStatements {
            // Backward scan of outbox_recovery_idx: one index page.
            highest_pending: format!("SELECT max(seq) FROM {outbox} WHERE lane IS NULL"),
            // Range scan of outbox_recovery_idx; visible_at and created_at are filtered from the index.
            // The uncorrelated guard is an InitPlan the executor evaluates once, as a one-time
            // filter, before any scan: when no unordered row is visible at all (an idle pass),
            // it costs one descent of outbox_due_idx and the window is never walked, whatever
            // plan stale statistics chose for the scan (docs/performance.md, Maintenance).
            page: format!(
                "SELECT seq FROM {outbox} \
                 WHERE lane IS NULL AND seq > $1 AND seq <= $2 \
                   AND visible_at <= now() \
                   AND created_at <= now() - ($3::bigint * interval '1 microsecond') \
                   AND (SELECT min(visible_at) FROM {outbox} WHERE lane IS NULL) <= now() \
                 ORDER BY seq LIMIT $4"
            ),
        }
    }

    /// The highest `seq` among pending unordered rows, eligible or not: the boundary of a
    /// new traversal. `None` when there is no such row.
    pub async fn highest_pending_unordered(
        &self,
        client: &impl GenericClient,
    ) -> Result<Option<i64>, StorageError> {
        let row = client
            .query_one(&self.highest_pending, &[])
            .await
            .map_err(|e| StorageError::database("reading the recovery boundary", e))?;
        Ok(row.get(0))
    }

    /// Up to `limit` recovery-eligible `seq`s in `(after, up_to]`, ascending.
    pub async fn page(
        &self,
        client: &impl GenericClient,
        after: i64,
        up_to: i64,
        recovery_delay: Duration,
        limit: u32,
    ) -> Result<Vec<i64>, StorageError> {
        let delay = micros(recovery_delay);
        let rows = client
            .query(&self.page, &[&after, &up_to, &delay, &i64::from(limit)])
            .await
            .map_err(|e| StorageError::database("reading a recovery page", e))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}

/// A duration in whole microseconds for SQL (`$n::bigint * interval '1 microsecond'`),
/// saturating far beyond any validated option.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
