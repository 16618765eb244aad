//! Settings fingerprints of running instances (OPT-4): one row per (worker, instance) in
//! `{prefix}instances`.
//!
//! All instances sharing a namespace must agree on timing and retention. At start, each
//! instance records, per worker it runs, a fingerprint of that worker's options and the
//! settings themselves (a jsonb object `{"batch_size": "100", …}`, so a disagreement can
//! name the settings that differ); it then reads the rows of the other instances *seen*
//! recently and compares. A running instance refreshes `seen_at` now and then, and a
//! graceful shutdown removes its rows, so rows of stopped instances fade out of the
//! comparison instead of raising stale warnings. Comparing is the caller's business; this
//! module only stores and reads.
//!
//! Each row also lists the transports the instance registers for that worker (TRN-6): a
//! dispatcher's or sweeper's registry, empty for workers that send nothing. `status` and
//! the metrics name the outbox rows whose transport no live instance registers.
//!
//! Every statement reads or writes through the primary key `instances_pkey (worker,
//! instance)`; the table holds a handful of rows per running instance.

use std::time::{Duration, SystemTime};

use relayer_core::time::database_micros;
use relayer_core::{Namespace, Timestamp};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use crate::error::StorageError;

/// One instance's recorded settings for one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceSettings {
    /// The worker (`dispatcher`, `sweeper`, `cleanup`, …).
    pub worker: String,
    /// The instance's identity (host, pid, a random suffix).
    pub instance: String,
    /// The fingerprint of the worker's options (`…Options::fingerprint`).
    pub fingerprint: String,
    /// The settings, as a jsonb object of setting name to rendered value.
    pub settings: serde_json::Value,
    /// When this instance last recorded or refreshed its row (database clock).
    pub seen_at: Timestamp,
}

/// The instances statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct InstanceStatements {
    record: String,
    others_seen_within: String,
    touch: String,
    forget_instance: String,
    forget_unseen: String,
}

impl InstanceStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let instances = namespace.table("instances");
        InstanceStatements {
            // instances_pkey. A restart under the same instance id keeps its started_at.
            record: format!(
                "INSERT INTO {instances} (worker, instance, fingerprint, settings, transports) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (worker, instance) DO UPDATE \
                 SET fingerprint = excluded.fingerprint, settings = excluded.settings, \
                     transports = excluded.transports, seen_at = now()"
            ),
            // instances_pkey, prefix (worker); the live rows are few.
            others_seen_within: format!(
                "SELECT instance, fingerprint, settings, seen_at FROM {instances} \
                 WHERE worker = $1 AND instance <> $2 \
                   AND seen_at > now() - ($3::bigint * interval '1 microsecond') \
                 ORDER BY instance"
            ),
            // Sequential scan of a table of a few rows.
            touch: format!("UPDATE {instances} SET seen_at = now() WHERE instance = $1"),
            forget_instance: format!("DELETE FROM {instances} WHERE instance = $1"),
            forget_unseen: format!(
                "DELETE FROM {instances} WHERE seen_at < now() - ($1::bigint * interval '1 microsecond')"
            ),
        }
    }

    /// Records (or replaces) `instance`'s `fingerprint`, `settings` and registered
    /// `transports` (TRN-6; empty for a worker that sends nothing) for `worker`, seen now.
    pub async fn record(
        &self,
        client: &impl GenericClient,
        worker: &str,
        instance: &str,
        fingerprint: &str,
        settings: &serde_json::Value,
        transports: &[&str],
    ) -> Result<(), StorageError> {
        client
            .execute_typed(
                &self.record,
                &[
                    (&worker, Type::TEXT),
                    (&instance, Type::TEXT),
                    (&fingerprint, Type::TEXT),
                    (settings, Type::JSONB),
                    (&transports, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(|e| {
                StorageError::database(format!("recording the {worker} settings of instance {instance:?}"), e)
            })?;
        Ok(())
    }

    /// The rows of `worker` recorded by instances other than `instance` and seen within
    /// `window` (database clock), ordered by instance.
    pub async fn others_seen_within(
        &self,
        client: &impl GenericClient,
        worker: &str,
        instance: &str,
        window: Duration,
    ) -> Result<Vec<InstanceSettings>, StorageError> {
        let rows = client
            .query_typed(
                &self.others_seen_within,
                &[(&worker, Type::TEXT), (&instance, Type::TEXT), (&database_micros(window), Type::INT8)],
            )
            .await
            .map_err(|e| {
                StorageError::database(format!("reading the {worker} settings of other instances"), e)
            })?;
        Ok(rows
            .iter()
            .map(|row| InstanceSettings {
                worker: worker.to_owned(),
                instance: row.get(0),
                fingerprint: row.get(1),
                settings: row.get(2),
                seen_at: Timestamp::from_system_time(row.get::<_, SystemTime>(3)),
            })
            .collect())
    }

    /// Marks every row of `instance` as seen now; returns how many rows it has.
    pub async fn touch(&self, client: &impl GenericClient, instance: &str) -> Result<u64, StorageError> {
        client
            .execute_typed(&self.touch, &[(&instance, Type::TEXT)])
            .await
            .map_err(|e| StorageError::database(format!("refreshing instance {instance:?}"), e))
    }

    /// Removes every row of `instance` (graceful shutdown); returns how many it removed.
    pub async fn forget_instance(
        &self,
        client: &impl GenericClient,
        instance: &str,
    ) -> Result<u64, StorageError> {
        client
            .execute_typed(&self.forget_instance, &[(&instance, Type::TEXT)])
            .await
            .map_err(|e| StorageError::database(format!("removing instance {instance:?}"), e))
    }

    /// Removes the rows not seen for `age`: instances that crashed long ago. Keeps the
    /// table bounded when instance ids are random per start.
    pub async fn forget_unseen_for(
        &self,
        client: &impl GenericClient,
        age: Duration,
    ) -> Result<u64, StorageError> {
        client
            .execute_typed(&self.forget_unseen, &[(&database_micros(age), Type::INT8)])
            .await
            .map_err(|e| StorageError::database("removing instances not seen for a long time", e))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use relayer_test_support::TestDb;

    use super::*;
    use crate::migrate;

    const WINDOW: Duration = Duration::from_secs(600);

    #[tokio::test]
    async fn records_are_read_back_by_other_instances_only_opt_4() {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        migrate(&mut client, db.namespace()).await.unwrap();
        let statements = InstanceStatements::new(db.namespace());
        let settings = serde_json::json!({"batch_size": "100"});
        statements.record(&client, "cleanup", "a", "f1", &settings, &[]).await.unwrap();
        statements.record(&client, "cleanup", "b", "f2", &settings, &[]).await.unwrap();
        statements.record(&client, "cleanup", "a", "f3", &settings, &[]).await.unwrap();
        statements.record(&client, "sweeper", "c", "f4", &settings, &["queue"]).await.unwrap();

        let others = statements.others_seen_within(&client, "cleanup", "b", WINDOW).await.unwrap();
        assert_eq!(others.len(), 1);
        assert_eq!((others[0].instance.as_str(), others[0].fingerprint.as_str()), ("a", "f3"));
        assert_eq!(others[0].settings, settings);

        assert_eq!(statements.touch(&client, "a").await.unwrap(), 1);
        assert_eq!(statements.forget_unseen_for(&client, WINDOW).await.unwrap(), 0);
        assert_eq!(statements.forget_instance(&client, "a").await.unwrap(), 1);
        assert!(statements.others_seen_within(&client, "cleanup", "b", WINDOW).await.unwrap().is_empty());
    }
}
