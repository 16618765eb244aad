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

use relayer_core::{Namespace, RecoveryPage};
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
            // Range scan of outbox_recovery_idx in seq order, reading at most $5 rows of the
            // window (visible_at and created_at come from the index): a pass costs O(batch)
            // even when the window is full of pending rows that are not eligible — young,
            // scheduled, backing off. When the batch is not filled within those rows, a last
            // row (`capped`) says how far the scan read, and the cursor moves past it.
            // The uncorrelated guard is an InitPlan the executor evaluates once, as a one-time
            // filter, before any scan: when no unordered row is visible at all (an idle pass),
            // it costs one descent of outbox_due_idx and the window is never walked, whatever
            // plan stale statistics chose for the scan (docs/performance.md, Maintenance).
            page: format!(
                "WITH scanned AS ( \
                   SELECT seq, visible_at <= now() \
                               AND created_at <= now() - ($3::bigint * interval '1 microsecond') AS eligible \
                   FROM {outbox} \
                   WHERE lane IS NULL AND seq > $1 AND seq <= $2 \
                     AND (SELECT min(visible_at) FROM {outbox} WHERE lane IS NULL) <= now() \
                   ORDER BY seq LIMIT $5), \
                 page AS (SELECT seq FROM scanned WHERE eligible ORDER BY seq LIMIT $4) \
                 SELECT seq, false AS capped FROM page \
                 UNION ALL \
                 SELECT max(seq), true FROM scanned \
                 WHERE (SELECT count(*) FROM page) < $4 HAVING count(*) >= $5"
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

    /// Up to `limit` recovery-eligible `seq`s in `(after, up_to]`, ascending, reading at
    /// most [`SCAN_ROWS_PER_ELIGIBLE`] × `limit` rows of the window.
    pub async fn page(
        &self,
        client: &impl GenericClient,
        after: i64,
        up_to: i64,
        recovery_delay: Duration,
        limit: u32,
    ) -> Result<RecoveryPage, StorageError> {
        let delay = micros(recovery_delay);
        let (limit, cap) = (i64::from(limit), i64::from(limit).saturating_mul(SCAN_ROWS_PER_ELIGIBLE));
        let rows = client
            .query(&self.page, &[&after, &up_to, &delay, &limit, &cap])
            .await
            .map_err(|e| StorageError::database("reading a recovery page", e))?;
        let mut page = RecoveryPage::default();
        for row in &rows {
            let seq: i64 = row.get(0);
            if row.get::<_, bool>(1) {
                page.scanned_up_to = Some(seq);
            } else {
                page.eligible.push(seq);
            }
        }
        Ok(page)
    }
}

/// How many rows of its window a recovery page may read per eligible row it may return.
pub const SCAN_ROWS_PER_ELIGIBLE: i64 = 50;

/// A duration in whole microseconds for SQL (`$n::bigint * interval '1 microsecond'`),
/// saturating far beyond any validated option.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
