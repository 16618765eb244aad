//! A namespace's health at a glance (OBS-3 `status`): backlog, oldest pending message,
//! parked lanes, dead rows, queue depths, dead letters per queue and reason, and leases. Counting is O(table): this is for an
//! operator's command, not for a worker's pass.

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use crate::error::StorageError;
use crate::migrate::current_version;

/// A snapshot of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamespaceStatus {
    /// The schema version (`None`: no relayer schema).
    pub schema_version: Option<i32>,
    /// Outbox rows not yet accepted by their transport.
    pub outbox_pending: i64,
    /// Of those, rows free to send now (due, no live claim).
    pub outbox_due: i64,
    /// Of those, rows on an ordered lane.
    pub outbox_ordered: i64,
    /// Age of the oldest pending row, on the database clock.
    pub oldest_pending_age: Option<Duration>,
    /// Lanes parked behind a dead head.
    pub lanes_parked: i64,
    /// Rows in the outbox's dead table.
    pub dead: i64,
    /// Inbox records.
    pub inbox: i64,
    /// Messages per queue in the PostgreSQL queue transport, dead-letter queues included.
    pub queues: Vec<(String, i64)>,
    /// Leases: job, owner, term, and whether it is still live.
    pub leases: Vec<(String, String, i64, bool)>,
    /// Queue dead letters per dead-letter queue, original topic and rejection reason, with
    /// their count (OBS-3, DLP-7).
    pub dead_letters: Vec<DeadLetterCount>,
}

/// How many dead letters one (queue, original topic, reason) holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterCount {
    /// The dead-letter queue.
    pub queue: String,
    /// Where they came from (`None`: not stamped by relayer).
    pub original_topic: Option<String>,
    /// Why they were dead-lettered.
    pub reason: Option<String>,
    /// How many.
    pub count: i64,
}

/// Reads the status of `namespace`.
pub async fn namespace_status(
    client: &impl GenericClient,
    namespace: &Namespace,
) -> Result<NamespaceStatus, StorageError> {
    let schema_version = current_version(client, namespace).await?;
    if schema_version.is_none() {
        return Ok(NamespaceStatus::default());
    }
    let context = || format!("reading the status of {namespace}");
    let outbox = namespace.table("outbox");
    let row = client
        .query_one(
            &format!(
                "SELECT count(*), \
                        count(*) FILTER (WHERE visible_at <= now()), \
                        count(*) FILTER (WHERE lane IS NOT NULL), \
                        (extract(epoch FROM now() - min(created_at)) * 1e6)::bigint, \
                        (SELECT count(*) FROM {lanes} WHERE parked_at IS NOT NULL), \
                        (SELECT count(*) FROM {dead}), \
                        (SELECT count(*) FROM {inbox}) \
                 FROM {outbox}",
                lanes = namespace.table("lanes"),
                dead = namespace.table("dead"),
                inbox = namespace.table("inbox"),
            ),
            &[],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let oldest: Option<i64> = row.get(3);
    let queues = client
        .query(
            &format!(
                "SELECT queue, count(*) FROM {} GROUP BY queue ORDER BY queue",
                namespace.table("queue")
            ),
            &[],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let leases = client
        .query(
            &format!(
                "SELECT job, owner, term, expires_at > now() FROM {} ORDER BY job",
                namespace.table("leases")
            ),
            &[],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let dead_letters = client
        .query(
            &format!(
                "SELECT queue, original_topic, rejection_reason, count(*) FROM {} \
                 WHERE dead_lettered_at IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
                namespace.table("queue")
            ),
            &[],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?
        .iter()
        .map(|r| DeadLetterCount {
            queue: r.get(0),
            original_topic: r.get(1),
            reason: r.get(2),
            count: r.get(3),
        })
        .collect();
    Ok(NamespaceStatus {
        schema_version,
        dead_letters,
        outbox_pending: row.get(0),
        outbox_due: row.get(1),
        outbox_ordered: row.get(2),
        oldest_pending_age: oldest.map(|m| Duration::from_micros(u64::try_from(m).unwrap_or(0))),
        lanes_parked: row.get(4),
        dead: row.get(5),
        inbox: row.get(6),
        queues,
        leases,
    })
}
