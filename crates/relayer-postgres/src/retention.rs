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

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use crate::error::StorageError;
use crate::recovery::micros;

/// The retention statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct RetentionStatements {
    delete_dead: String,
    delete_inbox: String,
}

impl RetentionStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let (dead, inbox) = (namespace.table("dead"), namespace.table("inbox"));
        RetentionStatements {
            // dead_failed_at_idx
            delete_dead: format!(
                "DELETE FROM {dead} WHERE ctid = ANY(ARRAY(\
                   SELECT ctid FROM {dead} \
                   WHERE failed_at < now() - ($1::bigint * interval '1 microsecond') \
                   ORDER BY failed_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
            ),
            // inbox_processed_at_idx
            delete_inbox: format!(
                "DELETE FROM {inbox} WHERE ctid = ANY(ARRAY(\
                   SELECT ctid FROM {inbox} \
                   WHERE processed_at < now() - ($1::bigint * interval '1 microsecond') \
                   ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
            ),
        }
    }

    /// Deletes up to `limit` dead rows that failed more than `retention` ago; returns how
    /// many it deleted. Fewer than `limit` means the backlog is gone (for now).
    pub async fn delete_expired_dead(
        &self,
        client: &impl GenericClient,
        retention: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        client
            .execute(&self.delete_dead, &[&micros(retention), &i64::from(limit)])
            .await
            .map_err(|e| StorageError::database("deleting expired dead rows", e))
    }

    /// Deletes up to `limit` inbox rows processed more than `retention` ago; returns how
    /// many it deleted.
    pub async fn delete_expired_inbox(
        &self,
        client: &impl GenericClient,
        retention: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        client
            .execute(&self.delete_inbox, &[&micros(retention), &i64::from(limit)])
            .await
            .map_err(|e| StorageError::database("deleting expired inbox rows", e))
    }
}
