//! This instance's settings fingerprints in the namespace (OPT-4): recorded and compared at
//! start, refreshed every minute while the host runs, removed at shutdown.

use std::sync::{Arc, Mutex, PoisonError};

use relayer_core::Namespace;
use relayer_postgres::{InstanceStatements, PgPool, StorageError};
use tokio_util::sync::CancellationToken;

use crate::error::StartError;
use crate::fingerprints::{
    FORGET_AFTER, REFRESH_INTERVAL, SettingsDisagreement, WorkerSettings, record_and_compare,
};

const TARGET: &str = "relayer::host";

/// The rows of one running instance, on the host's maintenance pool.
#[derive(Clone)]
pub(crate) struct SettingsRecord {
    pool: PgPool,
    statements: InstanceStatements,
    namespace: Namespace,
    instance_id: String,
    workers: Arc<[WorkerSettings]>,
    /// As last compared; shared with the refresh task.
    disagreements: Arc<Mutex<Vec<SettingsDisagreement>>>,
}

impl SettingsRecord {
    /// Records `workers`' settings as `instance_id`'s and compares them with the other live
    /// instances', logging each disagreement at WARN. Records nothing for a host without
    /// workers.
    pub(crate) async fn record(
        pool: PgPool,
        namespace: &Namespace,
        instance_id: &str,
        workers: Vec<WorkerSettings>,
    ) -> Result<SettingsRecord, StartError> {
        let record = SettingsRecord {
            pool,
            statements: InstanceStatements::new(namespace),
            namespace: namespace.clone(),
            instance_id: instance_id.to_owned(),
            workers: workers.into(),
            disagreements: Arc::default(),
        };
        if record.is_recorded() {
            let connection =
                record.pool.get().await.map_err(|e| {
                    StartError::Pool(StorageError::pool("recording the workers' settings", e))
                })?;
            if let Err(error) = record.statements.forget_unseen_for(&**connection, FORGET_AFTER).await {
                // Only housekeeping: the comparison below does not depend on it.
                tracing::debug!(target: TARGET, %error, "could not remove long-unseen instances");
            }
            let disagreements =
                record_and_compare(&**connection, &record.statements, instance_id, &record.workers)
                    .await
                    .map_err(StartError::Fingerprints)?;
            for disagreement in &disagreements {
                record.warn(disagreement);
            }
            *record.disagreements.lock().unwrap_or_else(PoisonError::into_inner) = disagreements;
        }
        Ok(record)
    }

    /// Whether this instance has rows: it runs at least one worker.
    pub(crate) fn is_recorded(&self) -> bool {
        !self.workers.is_empty()
    }

    /// The other live instances whose settings differ, as last compared.
    pub(crate) fn disagreements(&self) -> Vec<SettingsDisagreement> {
        self.disagreements.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Refreshes the rows every [`REFRESH_INTERVAL`] until `shutdown`, so this instance keeps
    /// counting as live, and compares again, logging disagreements not seen before.
    pub(crate) async fn refresh(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(REFRESH_INTERVAL) => {}
            }
            // Bounded (RES-5): the pool's wait, the statements' timeout, and shutdown.
            let refreshed = async {
                match self.pool.get().await {
                    Ok(connection) => {
                        connection
                            .bounded(
                                async {
                                    record_and_compare(
                                        &**connection,
                                        &self.statements,
                                        &self.instance_id,
                                        &self.workers,
                                    )
                                    .await
                                    .map_err(|e| relayer_core::error_chain(&e))
                                },
                                || "no answer from PostgreSQL within the statement timeout".to_owned(),
                            )
                            .await
                    }
                    Err(error) => Err(error.to_string()),
                }
            };
            let compared = tokio::select! {
                () = shutdown.cancelled() => return,
                compared = refreshed => compared,
            };
            match compared {
                Ok(current) => {
                    let mut known = self.disagreements.lock().unwrap_or_else(PoisonError::into_inner);
                    for disagreement in current.iter().filter(|d| !known.contains(d)) {
                        self.warn(disagreement);
                    }
                    *known = current;
                }
                // The next refresh tries again; rows stay live for ten minutes.
                Err(cause) => tracing::warn!(target: TARGET, instance = %self.instance_id, %cause,
                    "could not refresh this instance's fingerprint rows"),
            }
        }
    }

    /// Removes this instance's rows; a failure is logged (the rows fade out of comparisons
    /// once unseen for a while).
    pub(crate) async fn forget(&self) {
        let forgotten = match self.pool.get().await {
            Ok(connection) => {
                connection
                    .bounded(
                        async {
                            self.statements
                                .forget_instance(&**connection, &self.instance_id)
                                .await
                                .map_err(|e| e.to_string())
                        },
                        || "no answer from PostgreSQL within the statement timeout".to_owned(),
                    )
                    .await
            }
            Err(error) => Err(error.to_string()),
        };
        if let Err(cause) = forgotten {
            tracing::warn!(target: TARGET, instance = %self.instance_id, %cause,
                "could not remove this instance's fingerprint rows");
        }
    }

    fn warn(&self, disagreement: &SettingsDisagreement) {
        let differing: Vec<&str> = disagreement.differences.iter().map(|d| d.setting.as_str()).collect();
        tracing::warn!(target: TARGET, namespace = %self.namespace, worker = %disagreement.worker,
            instance = %disagreement.this_instance, other_instance = %disagreement.other_instance,
            settings = ?differing, "instances sharing a namespace disagree on settings (OPT-4): {disagreement}");
    }
}
