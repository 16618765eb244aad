//! Retention deletes (RET-1..3).
//!
//! Dead rows older than their retention (from `failed_at`) and inbox rows older than theirs
//! (from `processed_at`) are deleted in batches. Each batch is one short statement:
//! `DELETE … WHERE ctid = ANY(ARRAY(SELECT ctid … ORDER BY ts LIMIT n FOR UPDATE SKIP LOCKED))`.
//! The `ARRAY(…)` shape matters: written as `ctid IN (SELECT … LIMIT n)`, a plan cached while
//! the table was empty can re-run the subquery per row and delete far more than `n`
//! (BASELINE.md). `SKIP LOCKED` lets replicas clean side by side without blocking.
//! Outbox rows are never deleted here: accepted rows go at once in fenced deletes, and
//! pending, parked and scheduled rows never expire by age (RET-1).
//!
//! A cleanup leader runs each batch as its own short transaction, outside the transaction
//! that took its lease, so the `*_fenced` variants add the lease fence (LDR-6): a leader
//! deposed since it took the lease deletes nothing.

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::Executor;
use crate::leases::{Lease, fence_clause};
use crate::recovery::micros;

/// The retention statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct RetentionStatements {
    delete_dead: String,
    delete_inbox: String,
    delete_dead_fenced: String,
    delete_inbox_fenced: String,
}

impl RetentionStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let (dead, inbox) = (namespace.table("dead"), namespace.table("inbox"));
        // The fence sits in the batch's subquery, before any row is locked; being uncorrelated,
        // the planner evaluates it once, and a false fence scans nothing.
        let fence = fence_clause(namespace, 3);
        // dead_failed_at_idx
        let dead_batch = |fence: &str| {
            format!(
                "DELETE FROM {dead} WHERE ctid = ANY(ARRAY(\
                   SELECT ctid FROM {dead} \
                   WHERE failed_at < now() - ($1::bigint * interval '1 microsecond'){fence} \
                   ORDER BY failed_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
            )
        };
        // inbox_processed_at_idx
        let inbox_batch = |fence: &str| {
            format!(
                "DELETE FROM {inbox} WHERE ctid = ANY(ARRAY(\
                   SELECT ctid FROM {inbox} \
                   WHERE processed_at < now() - ($1::bigint * interval '1 microsecond'){fence} \
                   ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
            )
        };
        let fenced = format!(" AND {fence}");
        RetentionStatements {
            delete_dead: dead_batch(""),
            delete_inbox: inbox_batch(""),
            delete_dead_fenced: dead_batch(&fenced),
            delete_inbox_fenced: inbox_batch(&fenced),
        }
    }

    /// Deletes up to `limit` dead rows that failed more than `retention` ago; returns how
    /// many it deleted. Fewer than `limit` means the backlog is gone (for now).
    pub async fn delete_expired_dead(
        &self,
        client: &impl Executor,
        retention: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        batch(client, &self.delete_dead, "deleting expired dead rows", retention, limit, None).await
    }

    /// Deletes up to `limit` inbox rows processed more than `retention` ago; returns how
    /// many it deleted.
    pub async fn delete_expired_inbox(
        &self,
        client: &impl Executor,
        retention: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        batch(client, &self.delete_inbox, "deleting expired inbox rows", retention, limit, None).await
    }

    /// Like [`delete_expired_dead`](Self::delete_expired_dead), fenced by `lease`: deletes
    /// nothing unless `lease` is still its owner's, at the same term, and unexpired.
    pub async fn delete_expired_dead_fenced(
        &self,
        client: &impl Executor,
        retention: Duration,
        limit: u32,
        lease: &Lease,
    ) -> Result<u64, StorageError> {
        let what = "deleting expired dead rows";
        batch(client, &self.delete_dead_fenced, what, retention, limit, Some(lease)).await
    }

    /// Like [`delete_expired_inbox`](Self::delete_expired_inbox), fenced by `lease`.
    pub async fn delete_expired_inbox_fenced(
        &self,
        client: &impl Executor,
        retention: Duration,
        limit: u32,
        lease: &Lease,
    ) -> Result<u64, StorageError> {
        let what = "deleting expired inbox rows";
        batch(client, &self.delete_inbox_fenced, what, retention, limit, Some(lease)).await
    }
}

/// Runs one batch delete; `lease` binds the fence's parameters of a fenced statement.
async fn batch(
    client: &impl Executor,
    statement: &str,
    what: &'static str,
    retention: Duration,
    limit: u32,
    lease: Option<&Lease>,
) -> Result<u64, StorageError> {
    let (retention, limit) = (micros(retention), i64::from(limit));
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![(&retention, Type::INT8), (&limit, Type::INT8)];
    if let Some(lease) = lease {
        // The fence's job, owner and term (fence_params' order).
        params.extend([
            (&lease.job as _, Type::TEXT),
            (&lease.owner as _, Type::TEXT),
            (&lease.term as _, Type::INT8),
        ]);
    }
    client.affected(statement, &params).await.map_err(|e| StorageError::database(what, e))
}
