//! The sidecar's gauges (OBS-2), read every few seconds: the same snapshot as
//! [`namespace_status`](super::namespace_status), but bounded — no statement reads more
//! than `cap` rows of a relayer table, however large it grew. A scrape must not become a
//! full-table scan every 15 s on the very table that is backing up.
//!
//! - The outbox backlog is read from its oldest `cap` rows, by `seq` (the primary key):
//!   per transport and destination, the count and the age of the oldest row (exact for
//!   every destination with a row among them: the oldest rows are those). When the outbox
//!   holds more than `cap` rows, each count is scaled to the table's estimated size
//!   (`pg_class.reltuples`, else `pg_stat_user_tables.n_live_tup`), so the counts are
//!   estimates, and a destination whose rows are all newer than the oldest `cap` is not
//!   shown.
//! - Dead rows are counted up to `cap`, and past it estimated the same way. Parked lanes
//!   are counted up to `cap`, and past it shown as `cap`, a lower bound (the lanes table's
//!   size says nothing of how many are parked); dead letters are counted per queue and reason among the first `cap` (through
//!   `queue_dead_letter_idx`): past it, a lower bound.
//! - Leases, instances (small tables), the xmin horizon and dead tuples (catalogs) are read
//!   as `relayer status` reads them.

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use super::elapsed::{duration_from_micros, micros_since};
use super::{Backlog, DeadLetters, NamespaceStatus, database, workers};
use crate::error::{StorageError, column};
use crate::migrate::current_version;

/// A bounded snapshot of `namespace` for gauges (how each count is bounded: the comment at the top of `status/sampled.rs`): no
/// statement reads more than `cap` rows of a table; counts past `cap` are estimates. Only
/// what the gauges show is filled: the backlog and its ages, scheduled rows, parked lanes
/// (counted), dead rows (counted), dead letters per queue and reason, rows no live
/// instance can send (TRN-6), leases, instances and their settings disagreements, workers'
/// last passes, the horizon and dead tuples.
pub async fn namespace_gauges(
    client: &impl GenericClient,
    namespace: &Namespace,
    cap: u32,
) -> Result<NamespaceStatus, StorageError> {
    let schema_version = current_version(client, namespace).await?;
    if schema_version.is_none() {
        return Ok(NamespaceStatus {
            horizon: database::horizon(client).await?,
            ..NamespaceStatus::default()
        });
    }
    let cap = i64::from(cap.max(1));
    let context = || format!("sampling the gauges of {namespace}");
    let (outbox, lanes, dead, queue) = (
        namespace.table("outbox"),
        namespace.table("lanes"),
        namespace.table("dead"),
        namespace.table("queue"),
    );
    // Index: outbox_pkey (seq), the oldest `cap` rows; the estimate from the catalog.
    let rows = client
        .query(
            &format!(
                "SELECT transport, destination, count(*), count(*) FILTER (WHERE deliver_at > now()), {age}, \
                        (SELECT count(*) FROM (SELECT 1 FROM {outbox} LIMIT $1) AS capped), \
                        (SELECT greatest(c.reltuples::int8, coalesce(s.n_live_tup, 0)) \
                         FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
                         WHERE c.oid = to_regclass($2)) \
                 FROM (SELECT transport, destination, deliver_at, created_at FROM {outbox} ORDER BY seq LIMIT $1) AS oldest \
                 GROUP BY transport, destination ORDER BY count(*) DESC, transport, destination",
                age = micros_since("min(created_at) FILTER (WHERE deliver_at IS NULL OR deliver_at <= now())"),
            ),
            &[&cap, &outbox],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let what = "the sampled outbox backlog";
    let mut sampled: i64 = 0;
    for row in &rows {
        sampled += column::<i64>(row, 2, what)?;
    }
    let scale = match rows.first() {
        Some(r) => scale(column(r, 5, what)?, column(r, 6, what)?, sampled, cap),
        None => 1.0,
    };
    let backlog = rows
        .iter()
        .map(|r| {
            Ok(Backlog {
                transport: column(r, 0, what)?,
                destination: column(r, 1, what)?,
                pending: scaled(column(r, 2, what)?, scale),
                due: 0,
                scheduled: scaled(column(r, 3, what)?, scale),
                retrying: 0,
                ordered: 0,
                oldest_age: column::<Option<i64>>(r, 4, what)?.map(duration_from_micros),
            })
        })
        .collect::<Result<Vec<Backlog>, StorageError>>()?;
    // Index: lanes_parked_idx. Past `cap`, `cap` (a lower bound): the table's size says
    // nothing of how many lanes are parked.
    let lanes_parked = bounded_count(client, &lanes, Some("parked_at IS NOT NULL"), cap, &context).await?;
    // Index: dead_failed_at_idx would serve an ordered read; a plain capped count reads at
    // most `cap` rows either way.
    let dead_count = bounded_count(client, &dead, None, cap, &context).await?;
    // Index: queue_dead_letter_idx (every relayer dead letter carries its original topic).
    let letters = client
        .query(
            &format!(
                "SELECT queue, rejection_reason, count(*), {age} \
                 FROM (SELECT queue, rejection_reason, dead_lettered_at FROM {queue} \
                       WHERE original_topic IS NOT NULL AND dead_lettered_at IS NOT NULL LIMIT $1) AS dead \
                 GROUP BY queue, rejection_reason ORDER BY queue, rejection_reason",
                age = micros_since("min(dead_lettered_at)"),
            ),
            &[&cap],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let what = "the sampled dead letters";
    let dead_letters = letters
        .iter()
        .map(|r| {
            Ok(DeadLetters {
                queue: column(r, 0, what)?,
                original_topic: None,
                reason: column(r, 1, what)?,
                count: column(r, 2, what)?,
                oldest_age: duration_from_micros(column(r, 3, what)?),
            })
        })
        .collect::<Result<Vec<DeadLetters>, StorageError>>()?;
    let version = schema_version.unwrap_or_default();
    let (leases, instances) =
        (workers::leases(client, namespace).await?, workers::instances(client, namespace, version).await?);
    let workers = workers::last_passes(&leases, &instances);
    // Rows no live instance can send (TRN-6), among the sampled backlog.
    let unserved = super::unserved(&backlog, &instances);
    // In memory, from the instances just read.
    let disagreements = workers::disagreements(&instances);
    Ok(NamespaceStatus {
        schema_version,
        outbox_pending: backlog.iter().map(|b| b.pending).sum(),
        outbox_scheduled: backlog.iter().map(|b| b.scheduled).sum(),
        oldest_pending_age: backlog.iter().filter_map(|b| b.oldest_age).max(),
        backlog,
        unserved,
        lanes_parked,
        dead: dead_count,
        dead_letters,
        leases,
        instances,
        disagreements,
        workers,
        horizon: database::horizon(client).await?,
        dead_tuples: database::dead_tuples(client, namespace).await?,
        ..NamespaceStatus::default()
    })
}

/// How much each sampled count stands for: 1 when the sample holds the whole table (fewer
/// rows than `cap`), else the table's estimated size over the sample's.
#[allow(clippy::cast_precision_loss)]
fn scale(capped: i64, estimate: Option<i64>, sampled: i64, cap: i64) -> f64 {
    if capped < cap || sampled == 0 {
        return 1.0;
    }
    let estimate = estimate.unwrap_or(0).max(cap);
    estimate as f64 / sampled as f64
}

#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn scaled(count: i64, scale: f64) -> i64 {
    (count as f64 * scale).round() as i64
}

/// Rows of `table` matching `filter` (every row when `None`), counted up to `cap`. At
/// `cap`, an unfiltered count is the larger of `cap` and the table's estimated size; a
/// filtered one stays `cap`, a lower bound: the table's size says nothing of how many rows
/// match (a million lanes, three parked).
async fn bounded_count(
    client: &impl GenericClient,
    table: &str,
    filter: Option<&str>,
    cap: i64,
    context: &impl Fn() -> String,
) -> Result<i64, StorageError> {
    let condition = filter.unwrap_or("true");
    let row = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {condition} LIMIT $1) AS capped), \
                        (SELECT greatest(c.reltuples::int8, coalesce(s.n_live_tup, 0)) \
                         FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
                         WHERE c.oid = to_regclass($2))"
            ),
            &[&cap, &table],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let what = format!("the capped count of {table}");
    let (capped, estimate): (i64, Option<i64>) = (column(&row, 0, &what)?, column(&row, 1, &what)?);
    Ok(capped_count(capped, estimate, cap, filter.is_some()))
}

/// [`bounded_count`]'s answer from the capped count and the table's estimated size.
fn capped_count(capped: i64, estimate: Option<i64>, cap: i64, filtered: bool) -> i64 {
    if capped < cap || filtered {
        return capped;
    }
    estimate.unwrap_or(cap).max(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_sample_is_exact_and_a_capped_one_scales_to_the_estimate_obs_2() {
        assert!((scale(40, Some(1_000), 40, 100) - 1.0).abs() < f64::EPSILON, "under the cap: exact");
        assert!((scale(100, Some(1_000), 100, 100) - 10.0).abs() < f64::EPSILON);
        assert!((scale(100, None, 100, 100) - 1.0).abs() < f64::EPSILON, "no estimate: at least the cap");
        assert_eq!(scaled(30, 10.0), 300);
    }

    #[test]
    fn a_capped_filtered_count_is_the_cap_and_an_unfiltered_one_the_estimate_obs_2() {
        assert_eq!(capped_count(3, Some(1_000_000), 100, true), 3, "under the cap: exact");
        assert_eq!(capped_count(100, Some(1_000_000), 100, true), 100, "filtered: the cap, a lower bound");
        assert_eq!(capped_count(100, Some(1_000_000), 100, false), 1_000_000);
        assert_eq!(capped_count(100, Some(10), 100, false), 100, "never below the cap");
        assert_eq!(capped_count(100, None, 100, false), 100);
    }
}
