//! A namespace's health at a glance (OBS-3 `relayer status`, and the sidecar's gauges).
//!
//! One snapshot, read in a few statements: the backlog and the age of the oldest pending
//! row per transport and destination, the rows waiting on a transport no live instance
//! registers (TRN-6), scheduled rows, parked lanes with their reason, dead
//! rows and dead letters by queue and reason (this module); leases, instances and their
//! settings disagreements, and each worker's last successful pass (`status/workers.rs`); the
//! database's xmin horizon and dead tuples (`status/database.rs`). Every age is measured on the
//! database clock (NS-4). Counting is O(table): this is for an operator's command or a
//! scrape every few seconds, not for a worker's pass.

mod database;
pub(crate) mod elapsed;
mod sampled;
pub(crate) mod workers;

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use crate::error::{StorageError, column};
use crate::migrate::current_version;
use crate::status::elapsed::{duration_from_micros, micros_since};

pub use database::{DeadTuples, Horizon};
pub use sampled::namespace_gauges;
pub use workers::{Disagreement, InstanceStatus, LastPassSource, LeaseStatus, WorkerPass, stalled_after};

/// A snapshot of one namespace.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct NamespaceStatus {
    /// The schema version (`None`: no relayer schema; every other field is empty).
    pub schema_version: Option<i32>,
    /// Outbox rows not yet accepted by their transport.
    pub outbox_pending: i64,
    /// Of those, rows free to send now (due, no live claim).
    pub outbox_due: i64,
    /// Of those, rows on an ordered lane.
    pub outbox_ordered: i64,
    /// Of those, rows whose delivery time is still ahead.
    pub outbox_scheduled: i64,
    /// Age of the oldest pending row that is not scheduled for later.
    pub oldest_pending_age: Option<Duration>,
    /// The backlog per transport and destination, largest first.
    pub backlog: Vec<Backlog>,
    /// Rows waiting on a transport that no live instance registers (TRN-6), per transport:
    /// nothing running can deliver them (a rolling deploy not finished, a service stopped).
    pub unserved: Vec<Unserved>,
    /// Lanes parked behind a dead head.
    pub lanes_parked: i64,
    /// The parked lanes, oldest park first.
    pub parked_lanes: Vec<ParkedLaneStatus>,
    /// Rows in the outbox's dead table.
    pub dead: i64,
    /// The dead table per transport and destination.
    pub dead_rows: Vec<DeadRows>,
    /// Queue dead letters per queue, original topic and reason.
    pub dead_letters: Vec<DeadLetters>,
    /// Inbox records.
    pub inbox: i64,
    /// Messages per queue in the PostgreSQL queue transport, dead-letter queues included.
    pub queues: Vec<(String, i64)>,
    /// Every lease row.
    pub leases: Vec<LeaseStatus>,
    /// Instances seen within the last ten minutes, per worker they run.
    pub instances: Vec<InstanceStatus>,
    /// Workers whose live instances recorded different settings (OPT-4).
    pub disagreements: Vec<Disagreement>,
    /// Each worker's last successful pass, as far as the database shows it.
    pub workers: Vec<WorkerPass>,
    /// The oldest transaction and xmin horizon of the whole server.
    pub horizon: Horizon,
    /// Live and dead tuples of the namespace's tables.
    pub dead_tuples: Vec<DeadTuples>,
}

/// The backlog of one transport and destination.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backlog {
    /// The transport name.
    pub transport: String,
    /// The destination.
    pub destination: String,
    /// Rows pending.
    pub pending: i64,
    /// Of those, free to send now.
    pub due: i64,
    /// Of those, scheduled for later.
    pub scheduled: i64,
    /// Of those, failed at least once.
    pub retrying: i64,
    /// Of those, on an ordered lane.
    pub ordered: i64,
    /// Age of the oldest row not scheduled for later.
    pub oldest_age: Option<Duration>,
}

/// Outbox rows of a transport that no live instance registers (TRN-6).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unserved {
    /// The transport name.
    pub transport: String,
    /// Rows pending, on every destination.
    pub pending: i64,
    /// Age of the oldest row not scheduled for later.
    pub oldest_age: Option<Duration>,
}

/// The backlog's transports that none of the live `instances` registers, with their rows
/// and oldest age, by transport name.
fn unserved(backlog: &[Backlog], instances: &[InstanceStatus]) -> Vec<Unserved> {
    let served: std::collections::BTreeSet<&str> =
        instances.iter().flat_map(|i| i.transports.iter().map(String::as_str)).collect();
    let mut waiting: std::collections::BTreeMap<&str, Unserved> = std::collections::BTreeMap::new();
    for b in backlog.iter().filter(|b| !served.contains(b.transport.as_str())) {
        let entry = waiting.entry(&b.transport).or_insert_with(|| Unserved {
            transport: b.transport.clone(),
            pending: 0,
            oldest_age: None,
        });
        entry.pending += b.pending;
        entry.oldest_age = entry.oldest_age.max(b.oldest_age);
    }
    waiting.into_values().collect()
}

/// A parked lane (LAN-2).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParkedLaneStatus {
    /// The lane key.
    pub lane: String,
    /// How long it has been parked.
    pub parked_for: Duration,
    /// The head that could not be delivered.
    pub parked_seq: Option<i64>,
    /// The head's last error.
    pub reason: Option<String>,
    /// Rows of the lane waiting, the head included.
    pub waiting: i64,
}

/// Dead rows of one transport and destination.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadRows {
    /// The transport name.
    pub transport: String,
    /// The destination.
    pub destination: String,
    /// Rows.
    pub count: i64,
    /// Since the oldest failed.
    pub oldest_age: Duration,
}

/// Queue dead letters of one queue, original topic and reason.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetters {
    /// The dead-letter queue.
    pub queue: String,
    /// Where they came from (`None`: not stamped by relayer).
    pub original_topic: Option<String>,
    /// The rejection reason.
    pub reason: Option<String>,
    /// Dead letters.
    pub count: i64,
    /// Since the oldest was dead-lettered.
    pub oldest_age: Duration,
}

/// Reads the status of `namespace`.
pub async fn namespace_status(
    client: &impl GenericClient,
    namespace: &Namespace,
) -> Result<NamespaceStatus, StorageError> {
    let schema_version = current_version(client, namespace).await?;
    if schema_version.is_none() {
        return Ok(NamespaceStatus {
            horizon: database::horizon(client).await?,
            ..NamespaceStatus::default()
        });
    }
    let context = || format!("reading the status of {namespace}");
    let query = |sql: String| async move {
        client.query(&sql, &[]).await.map_err(|e| StorageError::database(context(), e))
    };
    let (outbox, lanes, dead, queue) = (
        namespace.table("outbox"),
        namespace.table("lanes"),
        namespace.table("dead"),
        namespace.table("queue"),
    );
    // Index: none; a grouped scan of the outbox (small when healthy).
    let backlog: Vec<Backlog> = query(format!(
        "SELECT transport, destination, count(*), \
                count(*) FILTER (WHERE visible_at <= now()), \
                count(*) FILTER (WHERE deliver_at > now()), \
                count(*) FILTER (WHERE attempts > 0), \
                count(*) FILTER (WHERE lane IS NOT NULL), \
                {age} \
         FROM {outbox} GROUP BY transport, destination ORDER BY count(*) DESC, transport, destination",
        age = micros_since("min(created_at) FILTER (WHERE deliver_at IS NULL OR deliver_at <= now())"),
    ))
    .await?
    .iter()
    .map(|r| {
        Ok(Backlog {
            transport: column(r, 0, "the outbox backlog")?,
            destination: column(r, 1, "the outbox backlog")?,
            pending: column(r, 2, "the outbox backlog")?,
            due: column(r, 3, "the outbox backlog")?,
            scheduled: column(r, 4, "the outbox backlog")?,
            retrying: column(r, 5, "the outbox backlog")?,
            ordered: column(r, 6, "the outbox backlog")?,
            oldest_age: column::<Option<i64>>(r, 7, "the outbox backlog")?.map(duration_from_micros),
        })
    })
    .collect::<Result<_, StorageError>>()?;
    // Index: lanes_parked_idx; outbox_lane_idx for the rows waiting behind each.
    let parked_lanes: Vec<ParkedLaneStatus> = query(format!(
        "SELECT l.lane, {age}, l.parked_seq, l.parked_reason, \
                (SELECT count(*) FROM {outbox} o WHERE o.lane = l.lane) \
         FROM {lanes} l WHERE l.parked_at IS NOT NULL ORDER BY l.parked_at, l.lane",
        age = micros_since("l.parked_at"),
    ))
    .await?
    .iter()
    .map(|r| {
        Ok(ParkedLaneStatus {
            lane: column(r, 0, "the parked lanes")?,
            parked_for: duration_from_micros(column(r, 1, "the parked lanes")?),
            parked_seq: column(r, 2, "the parked lanes")?,
            reason: column(r, 3, "the parked lanes")?,
            waiting: column(r, 4, "the parked lanes")?,
        })
    })
    .collect::<Result<_, StorageError>>()?;
    let dead_rows: Vec<DeadRows> = query(format!(
        "SELECT transport, destination, count(*), {age} FROM {dead} \
         GROUP BY transport, destination ORDER BY count(*) DESC, transport, destination",
        age = micros_since("min(failed_at)"),
    ))
    .await?
    .iter()
    .map(|r| {
        Ok(DeadRows {
            transport: column(r, 0, "the dead rows")?,
            destination: column(r, 1, "the dead rows")?,
            count: column(r, 2, "the dead rows")?,
            oldest_age: duration_from_micros(column(r, 3, "the dead rows")?),
        })
    })
    .collect::<Result<_, StorageError>>()?;
    let dead_letters: Vec<DeadLetters> = query(format!(
        "SELECT queue, original_topic, rejection_reason, count(*), {age} FROM {queue} \
         WHERE dead_lettered_at IS NOT NULL GROUP BY queue, original_topic, rejection_reason \
         ORDER BY queue, original_topic, rejection_reason",
        age = micros_since("min(dead_lettered_at)"),
    ))
    .await?
    .iter()
    .map(|r| {
        Ok(DeadLetters {
            queue: column(r, 0, "the dead letters")?,
            original_topic: column(r, 1, "the dead letters")?,
            reason: column(r, 2, "the dead letters")?,
            count: column(r, 3, "the dead letters")?,
            oldest_age: duration_from_micros(column(r, 4, "the dead letters")?),
        })
    })
    .collect::<Result<_, StorageError>>()?;
    let counts = client
        .query_one(&format!("SELECT count(*) FROM {inbox}", inbox = namespace.table("inbox"),), &[])
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let queues = query(format!("SELECT queue, count(*) FROM {queue} GROUP BY queue ORDER BY queue"))
        .await?
        .iter()
        .map(|r| Ok((column(r, 0, "the queues")?, column(r, 1, "the queues")?)))
        .collect::<Result<_, StorageError>>()?;
    let version = schema_version.unwrap_or_default();
    let (leases, instances) =
        (workers::leases(client, namespace).await?, workers::instances(client, namespace, version).await?);
    let unserved = unserved(&backlog, &instances);
    let disagreements = workers::disagreements(&instances);
    let workers = workers::last_passes(&leases, &instances);
    Ok(NamespaceStatus {
        schema_version,
        outbox_pending: backlog.iter().map(|b| b.pending).sum(),
        outbox_due: backlog.iter().map(|b| b.due).sum(),
        outbox_ordered: backlog.iter().map(|b| b.ordered).sum(),
        outbox_scheduled: backlog.iter().map(|b| b.scheduled).sum(),
        oldest_pending_age: backlog.iter().filter_map(|b| b.oldest_age).max(),
        backlog,
        unserved,
        lanes_parked: i64::try_from(parked_lanes.len()).unwrap_or(i64::MAX),
        parked_lanes,
        dead: dead_rows.iter().map(|d| d.count).sum(),
        dead_rows,
        dead_letters,
        inbox: column(&counts, 0, "the inbox count")?,
        queues,
        leases,
        instances,
        disagreements,
        workers,
        horizon: database::horizon(client).await?,
        dead_tuples: database::dead_tuples(client, namespace).await?,
    })
}
