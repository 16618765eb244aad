//! Retention deletes (RET-1..3).
//!
//! Dead rows older than their retention (from `failed_at`) and inbox rows older than theirs
//! (from `processed_at`) are deleted in batches. Each batch is one short statement:
//! `DELETE … WHERE ctid = ANY(ARRAY(SELECT ctid … ORDER BY ts LIMIT n FOR UPDATE SKIP LOCKED))`.
//! The `ARRAY(…)` shape matters: written as `ctid IN (SELECT … LIMIT n)`, a plan cached while
//! the table was empty can re-run the subquery per row and delete far more than `n`
//! (docs/performance.md, "Raw limits"). `SKIP LOCKED` lets replicas clean side by side without blocking.
//! Outbox rows are never deleted here: accepted rows go at once in fenced deletes, and
//! pending, parked and scheduled rows never expire by age (RET-1).
//!
//! A cleanup leader runs each batch as its own short transaction, so the lease cannot be
//! held by one transaction for the whole pass. A batch under a lease therefore carries the
//! lease in the batch itself (LDR-2, LDR-6): one statement locks the lease row (`FOR UPDATE
//! SKIP LOCKED`, never waiting), deletes only while the lease is still the caller's (same
//! owner and term) and unexpired, and renews it from the end of the batch
//! (`clock_timestamp()`). While a batch runs, a contender finds the lease row locked and
//! skips its turn, even if the lease has lapsed meanwhile; between batches the lease was
//! just renewed, so it is live and the caller's. A leader deposed since its last batch
//! deletes nothing more.

use std::time::Duration;

use relayer_core::Namespace;
use relayer_core::RetentionTable;
use relayer_core::store::UnderLease;
use relayer_core::time::database_micros;
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::{Executor, one_row};
use crate::leases::Lease;

/// The retention statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct RetentionStatements {
    delete_dead: String,
    delete_inbox: String,
    delete_dead_leased: String,
    delete_inbox_leased: String,
}

impl RetentionStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let (dead, inbox, leases) =
            (namespace.table("dead"), namespace.table("inbox"), namespace.table("leases"));
        // dead_failed_at_idx (dead, failed_at) and inbox_processed_at_idx (inbox, processed_at).
        let batch = |table: &str, aged: &str, fence: &str| {
            format!(
                "DELETE FROM {table} WHERE ctid = ANY(ARRAY(\
                   SELECT ctid FROM {table} \
                   WHERE {aged} < now() - ($1::bigint * interval '1 microsecond'){fence} \
                   ORDER BY {aged} LIMIT $2 FOR UPDATE SKIP LOCKED))"
            )
        };
        let dead_batch = |fence: &str| batch(&dead, "failed_at", fence);
        let inbox_batch = |fence: &str| batch(&inbox, "processed_at", fence);
        // The lease row through leases_pkey, locked first; the fence in the batch's subquery
        // is uncorrelated, so the planner evaluates it once and a false fence scans nothing.
        // The renewal waits for the delete (it reads its count), so the expiry restarts at
        // the end of the batch.
        let leased = |delete: String| {
            format!(
                "WITH held AS MATERIALIZED ( \
                   SELECT job FROM {leases} \
                   WHERE job = $3 AND owner = $4 AND term = $5 AND expires_at > now() \
                   FOR UPDATE SKIP LOCKED), \
                 deleted AS ({delete} RETURNING 1), \
                 renewed AS ( \
                   UPDATE {leases} SET renewed_at = clock_timestamp(), \
                     expires_at = clock_timestamp() + ($6::int8 * interval '1 microsecond') \
                   WHERE job = (SELECT job FROM held) AND (SELECT count(*) FROM deleted) >= 0 \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM deleted), EXISTS (SELECT 1 FROM renewed)"
            )
        };
        let fence = " AND EXISTS (SELECT 1 FROM held)";
        RetentionStatements {
            delete_dead: dead_batch(""),
            delete_inbox: inbox_batch(""),
            delete_dead_leased: leased(dead_batch(fence)),
            delete_inbox_leased: leased(inbox_batch(fence)),
        }
    }

    /// Deletes up to `limit` rows of `table` older than `retention` (dead rows by
    /// `failed_at`, inbox rows by `processed_at`); returns how many. Fewer than `limit`
    /// means the backlog is gone (for now). The outbox never expires by age (RET-1): for it
    /// this deletes nothing.
    ///
    /// Under `lease` the one statement also locks the lease row, deletes only while the
    /// lease is still its owner's, at the same term, and unexpired, and renews it for its
    /// `lease_duration` (one transaction when `client` is not in one). `None` then means
    /// the lease was not the caller's, or its row was locked by another session at that
    /// instant ([`LeaseStatements::holds`](crate::LeaseStatements::holds) tells which);
    /// nothing was deleted or renewed. Without a lease the answer is always `Some`.
    pub async fn delete_expired(
        &self,
        client: &impl Executor,
        table: RetentionTable,
        retention: Duration,
        limit: u32,
        lease: Option<UnderLease<'_>>,
    ) -> Result<Option<u64>, StorageError> {
        let (unfenced, fenced, what, what_leased) = match table {
            RetentionTable::Dead => (
                &self.delete_dead,
                &self.delete_dead_leased,
                "deleting expired dead rows",
                "deleting expired dead rows under the cleanup lease",
            ),
            RetentionTable::Inbox => (
                &self.delete_inbox,
                &self.delete_inbox_leased,
                "deleting expired inbox rows",
                "deleting expired inbox rows under the cleanup lease",
            ),
            RetentionTable::Outbox => return Ok(Some(0)),
        };
        match lease {
            None => batch(client, unfenced, what, retention, limit).await.map(Some),
            Some(UnderLease { lease, lease_duration }) => {
                leased_batch(client, fenced, what_leased, retention, limit, lease, lease_duration).await
            }
        }
    }
}

/// Runs one unfenced batch delete.
async fn batch(
    client: &impl Executor,
    statement: &str,
    what: &'static str,
    retention: Duration,
    limit: u32,
) -> Result<u64, StorageError> {
    let (retention, limit) = (database_micros(retention), i64::from(limit));
    let params: [(&(dyn ToSql + Sync), Type); 2] = [(&retention, Type::INT8), (&limit, Type::INT8)];
    crate::exec::affected(client, statement, &params, what).await
}

/// Runs one batch delete under a lease; `None` when the lease was not held.
async fn leased_batch(
    client: &impl Executor,
    statement: &str,
    what: &'static str,
    retention: Duration,
    limit: u32,
    lease: &Lease,
    lease_duration: Duration,
) -> Result<Option<u64>, StorageError> {
    let (retention, limit, duration) =
        (database_micros(retention), i64::from(limit), database_micros(lease_duration));
    let params: [(&(dyn ToSql + Sync), Type); 6] = [
        (&retention, Type::INT8),
        (&limit, Type::INT8),
        (&lease.job, Type::TEXT),
        (&lease.owner, Type::TEXT),
        (&lease.term, Type::INT8),
        (&duration, Type::INT8),
    ];
    let row = one_row(client, statement, &params, what).await?;
    let (deleted, renewed): (i64, bool) = (row.get(0), row.get(1));
    Ok(renewed.then(|| u64::try_from(deleted).unwrap_or(0)))
}
