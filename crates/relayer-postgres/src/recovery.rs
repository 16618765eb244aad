//! The recovery sweeper's read (SWP-2, SWP-3, SWP-4), one statement per pass.
//!
//! A traversal first captures the highest pending unordered `seq` as its fixed boundary,
//! then pages through `(after, boundary]` in `seq` order, picking rows that are unordered,
//! due (`visible_at <= now()`: no live claim, delivery and retry time reached) and at least
//! `recovery_delay` old, of a transport registered in this process (TRN-6), and locks them
//! for the pass's transaction. The boundary and the
//! page use `{prefix}outbox_recovery_idx` (`(seq, visible_at) INCLUDE (created_at,
//! transport) WHERE lane IS NULL`), so a page costs O(rows scanned in the window), never O(table). The
//! cursor itself is pure logic in `relayer_core::cursor`; sends and completions reuse
//! direct dispatch's. Locked rows are decoded one at a time (`crate::row_codec`): one that
//! cannot be decoded comes back in [`LockedPage::undecodable`], still locked, and the pass
//! buries it with its completion, so it never stalls the page or the traversal.

use relayer_core::store::{LockedPage, PageRequest};
use relayer_core::time::database_micros;
use relayer_core::{KeysetCursor, Namespace, PassPlan, ScanWindow};
use tokio_postgres::types::Type;

use crate::error::StorageError;
use crate::exec::Executor;
use crate::row_codec::{CLAIMED_COLUMNS, RowCodec, registered_ctes};

/// The recovery statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct RecoveryStatements {
    lock_page: String,
    codec: RowCodec,
}

impl RecoveryStatements {
    /// Renders the statements for `namespace`. Pages read rows of any transport; see
    /// [`with_transports`](Self::with_transports).
    pub fn new(namespace: &Namespace) -> Self {
        let (outbox, leases) = (namespace.table("outbox"), namespace.table("leases"));
        RecoveryStatements {
            // One round trip per pass for the whole read (SWP-2, SWP-3, SWP-4):
            // - `bound`: the window's upper bound — $2, or, for a new traversal ($2 NULL), the
            //   highest pending unordered seq (a backward descent of outbox_recovery_idx). No
            //   row unless the lease ($6, $7) is live and the caller's, when one is named: a
            //   pass sends this together with its lease acquisition, and a contender then
            //   reads and locks nothing.
            // - `page`: a range scan of outbox_recovery_idx in seq order, reading at most $5
            //   rows of the window (visible_at and created_at come from the index), so a pass
            //   costs O(batch) even when the window is full of pending rows that are not
            //   eligible — young, scheduled, backing off. The scan streams through the row
            //   numbering into the LIMIT, so it stops at the $4th eligible row; when the cap
            //   stops it first, its last row (`last_scanned`) says how far it read, and the
            //   cursor moves past it. Only rows of the registered transports ($8, TRN-6; any
            //   when NULL) are eligible, judged from the index's INCLUDE (transport), so rows a
            //   sweeper lacks the transport of cost a page what young rows cost. The
            //   uncorrelated guard on min(visible_at) per registered transport is an InitPlan
            //   run once, as a one-time filter, before any scan: when no unordered row of them is
            //   visible at all (an idle pass), it costs one descent of outbox_due_idx per
            //   registered transport and the
            //   window is never walked, whatever plan stale statistics chose for the scan
            //   (docs/performance.md, Maintenance).
            // The answer is one summary row (the bound, the eligible seqs, the last row read
            // when the cap stopped the scan; its claimed columns NULL) and then the page's
            // eligible rows, through outbox_pkey, under the same conditions as a claim, locked
            // FOR UPDATE SKIP LOCKED until the pass's transaction ends: the lock is the claim
            // (SWP-4); rows a dispatcher holds are skipped. No row at all means the lease was
            // not held. (A join of the page with the locked rows became a nested loop over
            // both under a generic plan; `IN (SELECT …)` cost twice this `= ANY(ARRAY(…))`.)
            lock_page: format!(
                "WITH RECURSIVE {registered}, \
                 bound AS ( \
                   SELECT coalesce($2::int8, (SELECT max(seq) FROM {outbox} WHERE lane IS NULL)) AS up_to \
                   WHERE $6::text IS NULL \
                      OR EXISTS (SELECT 1 FROM {leases} \
                                 WHERE job = $6 AND owner = $7::text AND expires_at > now())), \
                 page AS ( \
                   SELECT seq, eligible, n = $5 AS last_scanned FROM ( \
                     SELECT seq, eligible, row_number() OVER (ORDER BY seq) AS n FROM ( \
                       SELECT seq, visible_at <= now() \
                                   AND created_at <= now() - ($3::int8 * interval '1 microsecond') \
                                   AND ($8::text[] IS NULL OR transport = ANY($8::text[])) AS eligible \
                       FROM {outbox} \
                       WHERE lane IS NULL AND seq > $1::int8 AND seq <= (SELECT up_to FROM bound) \
                         AND EXISTS (SELECT 1 FROM registered r WHERE (SELECT min(visible_at) FROM {outbox} \
                                     WHERE lane IS NULL AND transport = r.t) <= now()) \
                       ORDER BY seq LIMIT $5::int8) AS scanned) AS numbered \
                   WHERE eligible OR n = $5 \
                   ORDER BY seq LIMIT $4::int8) \
                 SELECT b.up_to, ARRAY(SELECT seq FROM page WHERE eligible ORDER BY seq) AS eligible, \
                        (SELECT seq FROM page WHERE last_scanned) AS last_scanned, l.* \
                 FROM bound b LEFT JOIN (SELECT {CLAIMED_COLUMNS} FROM {outbox} LIMIT 0) AS l ON true \
                 UNION ALL \
                 SELECT NULL, NULL, NULL, l.* FROM ( \
                   SELECT {CLAIMED_COLUMNS} FROM {outbox} \
                   WHERE seq = ANY(ARRAY(SELECT seq FROM page WHERE eligible)) \
                     AND lane IS NULL AND visible_at <= now() \
                     AND ($8::text[] IS NULL OR transport = ANY($8::text[])) \
                   FOR UPDATE SKIP LOCKED) AS l",
                registered = registered_ctes(&outbox, "$8"),
            ),
            codec: RowCodec::new(namespace),
        }
    }

    /// Pages judge only rows naming one of `names` (the worker's registry) eligible
    /// (TRN-6): a row of a transport this sweeper lacks is stepped over, never locked,
    /// sent, counted or buried; it waits for an instance that has it.
    pub fn with_transports<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.codec = self.codec.with_transports(names);
        self
    }

    /// Reads one recovery page of `request` and locks its eligible rows until the end of
    /// the caller's transaction (see [`ScanRecovery::lock_recovery_page`]).
    ///
    /// [`ScanRecovery::lock_recovery_page`]: relayer_core::ScanRecovery::lock_recovery_page
    pub async fn lock_page(
        &self,
        client: &impl Executor,
        request: &PageRequest<'_>,
    ) -> Result<Option<LockedPage>, StorageError> {
        let (after, up_to) = match request.plan {
            PassPlan::CaptureBoundary => (KeysetCursor::START, None),
            PassPlan::Scan(window) => (window.after, Some(window.up_to)),
        };
        let delay = database_micros(request.recovery_delay);
        let limit = i64::from(request.limit);
        let cap = limit.saturating_mul(SCAN_ROWS_PER_ELIGIBLE);
        let (job, owner) = request.leader.map_or((None, None), |l| (Some(l.job), Some(l.owner)));
        let rows = crate::exec::rows(
            client,
            &self.lock_page,
            &[
                (&after, Type::INT8),
                (&up_to, Type::INT8),
                (&delay, Type::INT8),
                (&limit, Type::INT8),
                (&cap, Type::INT8),
                (&job, Type::TEXT),
                (&owner, Type::TEXT),
                (&self.codec.registered(), Type::TEXT_ARRAY),
            ],
            "reading and locking a recovery page",
        )
        .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let decode = |e| StorageError::database("decoding a recovery page", e);
        let mut found = LockedPage::default();
        let mut last_scanned = None;
        for row in &rows {
            match row.try_get::<_, Option<Vec<i64>>>(1).map_err(decode)? {
                Some(eligible) => {
                    let boundary: Option<i64> = row.try_get(0).map_err(decode)?;
                    found.window = boundary.map(|up_to| ScanWindow { after, up_to });
                    found.page.eligible = eligible;
                    last_scanned = row.try_get(2).map_err(decode)?;
                }
                // One row at a time: an undecodable row is set aside, never fails the page.
                None => match self.codec.decode(row, LOCKED_OFFSET)? {
                    Ok(message) => found.locked.push(message),
                    Err(undecodable) => found.undecodable.push(undecodable),
                },
            }
        }
        found.locked.sort_by_key(|message| message.seq);
        found.undecodable.sort_by_key(|row| row.seq);
        // The cap matters only to a short page: a full one ends at its last eligible row.
        if i64::try_from(found.page.eligible.len()).unwrap_or(i64::MAX) < limit {
            found.page.scanned_up_to = last_scanned;
        }
        Ok(Some(found))
    }
}

/// Where the locked row's columns start in a `lock_page` row.
const LOCKED_OFFSET: usize = 3;

/// How many rows of its window a recovery page may read per eligible row it may return.
pub const SCAN_ROWS_PER_ELIGIBLE: i64 = 50;
