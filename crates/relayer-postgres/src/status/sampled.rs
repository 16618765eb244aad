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
//! - Dead rows and parked lanes are counted up to `cap`, and past it estimated the same
//!   way; dead letters are counted per queue and reason among the first `cap` (through
//!   `queue_dead_letter_idx`): past it, a lower bound.
//! - Leases, instances (small tables), the xmin horizon and dead tuples (catalogs) are read
//!   as `relayer status` reads them.

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use super::elapsed::{duration_from_micros, micros_since};
use super::{Backlog, DeadLetters, NamespaceStatus, database, workers};
use crate::error::StorageError;
use crate::migrate::current_version;

/// A bounded snapshot of `namespace` for gauges (see the [module docs](self)): no
/// statement reads more than `cap` rows of a table; counts past `cap` are estimates. Only
/// what the gauges show is filled: the backlog and its ages, scheduled rows, parked lanes
/// (counted), dead rows (counted), dead letters per queue and reason, rows no live
/// instance can send (TRN-6), leases, instances, workers' last passes, the horizon and dead
/// tuples.
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
    let sampled: i64 = rows.iter().map(|r| r.get::<_, i64>(2)).sum();
    let scale = rows.first().map_or(1.0, |r| scale(r.get(5), r.get(6), sampled, cap));
    let backlog: Vec<Backlog> = rows
        .iter()
        .map(|r| Backlog {
            transport: r.get(0),
            destination: r.get(1),
            pending: scaled(r.get(2), scale),
            due: 0,
            scheduled: scaled(r.get(3), scale),
            retrying: 0,
            ordered: 0,
            oldest_age: r.get::<_, Option<i64>>(4).map(duration_from_micros),
        })
        .collect();
    // Index: lanes_parked_idx.
    let lanes_parked = bounded_count(client, &lanes, "parked_at IS NOT NULL", cap, &context).await?;
    // Index: dead_failed_at_idx would serve an ordered read; a plain capped count reads at
    // most `cap` rows either way.
    let dead_count = bounded_count(client, &dead, "true", cap, &context).await?;
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
    let dead_letters: Vec<DeadLetters> = letters
        .iter()
        .map(|r| DeadLetters {
            queue: r.get(0),
            original_topic: None,
            reason: r.get(1),
            count: r.get(2),
            oldest_age: duration_from_micros(r.get(3)),
        })
        .collect();
    let version = schema_version.unwrap_or_default();
    let (leases, instances) =
        (workers::leases(client, namespace).await?, workers::instances(client, namespace, version).await?);
    let workers = workers::last_passes(&leases, &instances);
    // Rows no live instance can send (TRN-6), among the sampled backlog.
    let unserved = super::unserved(&backlog, &instances);
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

/// Rows of `table` matching `condition`, counted up to `cap`; at `cap`, the larger of `cap`
/// and the table's estimated size.
async fn bounded_count(
    client: &impl GenericClient,
    table: &str,
    condition: &str,
    cap: i64,
    context: &impl Fn() -> String,
) -> Result<i64, StorageError> {
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
    let (capped, estimate): (i64, Option<i64>) = (row.get(0), row.get(1));
    Ok(if capped < cap { capped } else { estimate.unwrap_or(cap).max(cap) })
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
}
