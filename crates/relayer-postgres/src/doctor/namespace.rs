//! The namespace's side of the doctor: its schema version, and relayer's own state — rows
//! waiting on an unserved transport (TRN-6), parked lanes, dead letters and dead rows nobody
//! acted on, stalled workers, settings disagreements. Each statement names its cost beside
//! it; none reads more than `cap` rows of a relayer table.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::Client;

use super::report::{DoctorOptions, Finding, Severity, age, rows};
use crate::error::{StorageError, column};
use crate::migrate::current_version;
use crate::schema::SCHEMA_VERSION;
use crate::status::elapsed::{duration_from_micros, micros_since};
use crate::status::{
    Disagreement, LastPassSource, NamespaceStatus, WorkerPass, namespace_gauges, stalled_after, workers,
};

/// At most this many parked lanes and dead-letter groups are listed one by one.
const LISTED: i64 = 20;

/// The schema version against this build's. Cost: one read of `schema_version` (a few rows).
pub(super) async fn schema(
    client: &Client,
    namespace: &Namespace,
    findings: &mut Vec<Finding>,
) -> Result<Option<i32>, StorageError> {
    let version = current_version(client, namespace).await?;
    let subject = format!("namespace {namespace}");
    let finding = match version {
        None => Finding::new(
            Severity::Critical,
            "schema.version",
            subject,
            format!("no relayer schema in namespace {namespace}; only the server-wide checks ran"),
            "Check that --schema/--prefix name the namespace your services use; create it with `relayer schema \
             apply` (or `relayer schema print` for your own migration tool)",
        ),
        Some(v) if v < SCHEMA_VERSION => Finding::new(
            Severity::Warning,
            "schema.version",
            subject,
            format!("schema version {v}; this relayer migrates to {SCHEMA_VERSION}"),
            "Run `relayer schema apply` (idempotent, under an advisory lock); workers of this version refuse to \
             start on an older schema",
        ),
        Some(v) if v > SCHEMA_VERSION => Finding::new(
            Severity::Warning,
            "schema.version",
            subject,
            format!("schema version {v} is newer than this relayer knows ({SCHEMA_VERSION})"),
            "Use the doctor of the relayer version that migrated it; its findings may miss newer tables",
        ),
        Some(v) => Finding::new(Severity::Ok, "schema.version", subject, format!("schema version {v}"), ""),
    };
    findings.push(finding);
    Ok(version)
}

/// relayer's own state: unserved transports, parked lanes, stuck dead letters and dead rows,
/// stalled workers, settings disagreements.
pub(super) async fn relayer_state(
    client: &Client,
    namespace: &Namespace,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    // The sidecar's bounded snapshot: no statement reads more than `cap` rows of a table
    // (status/sampled.rs); leases and instances are a handful of rows.
    let gauges = namespace_gauges(client, namespace, options.cap).await?;
    unserved(client, namespace, &gauges, options, findings).await?;
    parked_lanes(client, namespace, gauges.lanes_parked, options, findings).await?;
    dead_letters(client, namespace, options, findings).await?;
    dead_rows(client, namespace, options, findings).await?;
    stalled_workers(&gauges.workers, findings);
    disagreements(&workers::disagreements(&gauges.instances), findings);
    Ok(())
}

/// Rows waiting on a transport no live instance registers (TRN-6). Cost: a skip scan of
/// `outbox_due_idx (transport, visible_at) WHERE lane IS NULL` — one descent per distinct
/// transport — then, per unserved transport, a count of at most `cap` index entries and
/// one descent for the oldest; lane rows from the sidecar's sample of the oldest `cap` rows.
async fn unserved(
    client: &Client,
    namespace: &Namespace,
    gauges: &NamespaceStatus,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let served: Vec<String> = gauges
        .instances
        .iter()
        .flat_map(|i| i.transports.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let outbox = namespace.table("outbox");
    let cap = i64::from(options.cap.max(1));
    let what = "the outbox's transports (outbox_due_idx)";
    let found = rows(
        client,
        &format!(
            "WITH RECURSIVE transports AS ( \
               (SELECT transport FROM {outbox} WHERE lane IS NULL ORDER BY transport LIMIT 1) \
               UNION ALL \
               SELECT (SELECT o.transport FROM {outbox} o WHERE o.lane IS NULL AND o.transport > t.transport \
                       ORDER BY o.transport LIMIT 1) \
               FROM transports t WHERE t.transport IS NOT NULL) \
             SELECT t.transport, \
                    (SELECT count(*) FROM (SELECT 1 FROM {outbox} o WHERE o.lane IS NULL \
                                           AND o.transport = t.transport LIMIT $1) AS capped), \
                    {oldest} \
             FROM transports t WHERE t.transport IS NOT NULL AND NOT (t.transport = ANY($2)) \
             ORDER BY t.transport LIMIT 100",
            oldest = micros_since(&format!(
                "(SELECT least(min(o.visible_at), now()) FROM {outbox} o WHERE o.lane IS NULL AND o.transport = t.transport)"
            )),
        ),
        &[&cap, &served],
        what,
    )
    .await?;
    // Per transport: how many rows (as the message words it) and the oldest.
    let mut waiting: BTreeMap<String, (String, Option<Duration>)> = BTreeMap::new();
    for row in &found {
        let transport: String = column(row, 0, what)?;
        let count: i64 = column(row, 1, what)?;
        let oldest = column::<Option<i64>>(row, 2, what)?.map(duration_from_micros);
        let count = if count >= cap { format!("at least {count}") } else { count.to_string() };
        waiting.insert(transport, (count, oldest));
    }
    // Lane rows (outside outbox_due_idx) of the sampled oldest rows; a transport seen only
    // there has its count estimated from the sample.
    for u in &gauges.unserved {
        let entry =
            waiting.entry(u.transport.clone()).or_insert_with(|| (format!("about {}", u.pending), None));
        entry.1 = entry.1.max(u.oldest_age);
    }
    for (transport, (count, oldest)) in &waiting {
        let oldest = oldest.unwrap_or_default();
        let severity = if oldest >= options.stuck_after { Severity::Critical } else { Severity::Warning };
        findings.push(Finding::new(
            severity,
            "transport.unserved",
            format!("transport {transport}"),
            format!(
                "{count} outbox rows of transport {transport:?} wait, the oldest for {}, and no live instance \
                 registers that transport (TRN-6): nothing running will deliver them",
                age(oldest)
            ),
            format!(
                "Start, or finish deploying, a service whose relayer host registers transport {transport:?}; \
                 rows stay pending (never dead) until one does. `relayer status` lists them per destination; \
                 live instances and their transports are in the instances table"
            ),
        ));
    }
    if waiting.is_empty() {
        findings.push(Finding::new(
            Severity::Ok,
            "transport.unserved",
            "outbox",
            if served.is_empty() {
                "no pending rows wait on a transport (no live instance registers any)".to_owned()
            } else {
                format!(
                    "every pending row's transport is registered by a live instance ({})",
                    served.join(", ")
                )
            },
            "",
        ));
    }
    Ok(())
}

/// Parked lanes (LAN-2), oldest park first. Cost: `lanes_parked_idx`, at most 20 entries;
/// per lane, at most `cap` entries of `outbox_lane_idx`.
async fn parked_lanes(
    client: &Client,
    namespace: &Namespace,
    parked: i64,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let cap = i64::from(options.cap.max(1));
    let what = "the parked lanes (lanes_parked_idx)";
    let lanes = rows(
        client,
        &format!(
            "SELECT l.lane, {parked}, l.parked_seq, coalesce(l.parked_reason, ''), \
                    (SELECT count(*) FROM (SELECT 1 FROM {outbox} o WHERE o.lane = l.lane LIMIT $1) AS capped) \
             FROM {lanes} l WHERE l.parked_at IS NOT NULL ORDER BY l.parked_at, l.lane LIMIT {LISTED}",
            parked = micros_since("l.parked_at"),
            outbox = namespace.table("outbox"),
            lanes = namespace.table("lanes"),
        ),
        &[&cap],
        what,
    )
    .await?;
    for row in &lanes {
        let lane: String = column(row, 0, what)?;
        let parked_for = duration_from_micros(column(row, 1, what)?);
        let head: Option<i64> = column(row, 2, what)?;
        let reason: String = column(row, 3, what)?;
        let waiting: i64 = column(row, 4, what)?;
        let severity = if parked_for >= options.stuck_after { Severity::Critical } else { Severity::Warning };
        findings.push(Finding::new(
            severity,
            "lanes.parked",
            format!("lane {lane}"),
            format!(
                "lane {lane:?} has been parked for {} behind head seq {} ({waiting} rows waiting): {reason}",
                age(parked_for),
                head.map_or_else(|| "?".to_owned(), |s| s.to_string()),
            ),
            format!(
                "Nothing behind the head moves until an operator acts (LAN-5). Fix the cause named above, then \
                 `relayer lanes release {lane} --yes` to retry the head, or `relayer lanes skip {lane} --yes` to \
                 move it to the dead table and let the lane go on"
            ),
        ));
    }
    if parked > i64::try_from(lanes.len()).unwrap_or(i64::MAX) {
        findings.push(Finding::new(
            Severity::Warning,
            "lanes.parked",
            "lanes",
            format!("{parked} lanes are parked in all (the {LISTED} oldest are listed)"),
            "`relayer lanes list` shows every parked lane",
        ));
    }
    if lanes.is_empty() {
        findings.push(Finding::new(Severity::Ok, "lanes.parked", "lanes", "no parked lane", ""));
    }
    Ok(())
}

/// Queue dead letters per dead-letter queue and original topic: those dead-lettered longer
/// than `stuck_after` ago, which neither a policy nor an operator has acted on. Cost: a skip
/// scan of `queue_dead_letter_idx (queue, original_topic, dead_lettered_at) WHERE
/// original_topic IS NOT NULL` — one descent per group, at most 20 groups — then per group
/// one descent for the oldest and counts of at most `cap` entries.
async fn dead_letters(
    client: &Client,
    namespace: &Namespace,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let queue = namespace.table("queue");
    let cap = i64::from(options.cap.max(1));
    let stuck = i64::try_from(options.stuck_after.as_micros()).unwrap_or(i64::MAX);
    let what = "the queue's dead letters (queue_dead_letter_idx)";
    let groups = rows(
        client,
        &format!(
            "WITH RECURSIVE groups AS ( \
               (SELECT queue, original_topic FROM {queue} WHERE original_topic IS NOT NULL \
                ORDER BY queue, original_topic LIMIT 1) \
               UNION ALL \
               SELECT n.queue, n.original_topic FROM groups g CROSS JOIN LATERAL ( \
                 SELECT queue, original_topic FROM {queue} \
                 WHERE original_topic IS NOT NULL AND (queue, original_topic) > (g.queue, g.original_topic) \
                 ORDER BY queue, original_topic LIMIT 1) AS n) \
             SELECT g.queue, g.original_topic, \
                    {oldest}, \
                    (SELECT count(*) FROM (SELECT 1 FROM {queue} q WHERE q.queue = g.queue \
                       AND q.original_topic = g.original_topic \
                       AND q.dead_lettered_at <= now() - $1::int8 * interval '1 microsecond' LIMIT $2) AS s), \
                    (SELECT count(*) FROM (SELECT 1 FROM {queue} q WHERE q.queue = g.queue \
                       AND q.original_topic = g.original_topic AND q.dead_lettered_at IS NOT NULL LIMIT $2) AS a) \
             FROM (SELECT * FROM groups LIMIT {LISTED}) AS g ORDER BY g.queue, g.original_topic",
            oldest = micros_since(&format!(
                "(SELECT min(q.dead_lettered_at) FROM {queue} q WHERE q.queue = g.queue \
                  AND q.original_topic = g.original_topic AND q.dead_lettered_at IS NOT NULL)"
            )),
        ),
        &[&stuck, &cap],
        what,
    )
    .await?;
    let (mut total, mut capped, mut young_oldest) = (0_i64, false, Duration::ZERO);
    for row in &groups {
        let (dlq, topic): (String, String) = (column(row, 0, what)?, column(row, 1, what)?);
        let oldest = column::<Option<i64>>(row, 2, what)?.map(duration_from_micros).unwrap_or_default();
        let (stuck_count, all): (i64, i64) = (column(row, 3, what)?, column(row, 4, what)?);
        total += all;
        capped |= all >= cap;
        if stuck_count == 0 {
            young_oldest = young_oldest.max(oldest);
            continue;
        }
        let at_least = if stuck_count >= cap { "at least " } else { "" };
        findings.push(Finding::new(
            Severity::Warning,
            "dead_letters.stuck",
            format!("dead-letter queue {dlq} (from {topic})"),
            format!(
                "{at_least}{stuck_count} dead letters of {topic:?} in {dlq:?} were dead-lettered more than {} ago \
                 (the oldest {} ago), and nothing has redriven or expired them",
                age(options.stuck_after),
                age(oldest)
            ),
            format!(
                "Look at them (`relayer dead-letters list --queue {dlq} --topic {topic}`; `show <id>` for one); \
                 once the cause is fixed, `relayer dead-letters redrive --queue {dlq} --topic {topic} --yes`, or \
                 `purge` them. A dead-letter policy (DLP-1) does either on its own; under a redrive policy these \
                 are past its give_up_after window (DLP-5)"
            ),
        ));
    }
    if !findings.iter().any(|f| f.code == "dead_letters.stuck") {
        findings.push(Finding::new(
            Severity::Ok,
            "dead_letters.stuck",
            "queue",
            if total == 0 {
                "no dead letters".to_owned()
            } else {
                format!(
                    "{}{total} dead letters, none older than {} (the oldest {})",
                    if capped { "at least " } else { "" },
                    age(options.stuck_after),
                    age(young_oldest)
                )
            },
            "",
        ));
    }
    Ok(())
}

/// Outbox dead rows (DSP-5) older than `stuck_after`. Cost: `dead_failed_at_idx`, at most
/// `cap` entries and one descent for the oldest.
async fn dead_rows(
    client: &Client,
    namespace: &Namespace,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let dead = namespace.table("dead");
    let cap = i64::from(options.cap.max(1));
    let stuck = i64::try_from(options.stuck_after.as_micros()).unwrap_or(i64::MAX);
    let what = "the outbox's dead rows (dead_failed_at_idx)";
    let row = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM (SELECT 1 FROM {dead} \
                          WHERE failed_at <= now() - $1::int8 * interval '1 microsecond' LIMIT $2) AS s), \
                        {oldest}",
                oldest = micros_since(&format!("(SELECT min(failed_at) FROM {dead})")),
            ),
            &[&stuck, &cap],
        )
        .await
        .map_err(|e| StorageError::database(format!("reading {what}"), e))?;
    let count: i64 = column(&row, 0, what)?;
    let oldest = column::<Option<i64>>(&row, 1, what)?.map(duration_from_micros);
    findings.push(if count > 0 {
        let at_least = if count >= cap { "at least " } else { "" };
        Finding::new(
            Severity::Warning,
            "dead.outbox",
            format!("table {}", namespace.table("dead")),
            format!(
                "{at_least}{count} outbox rows reached max_attempts more than {} ago (the oldest {} ago) and wait \
                 in the dead table",
                age(options.stuck_after),
                age(oldest.unwrap_or_default())
            ),
            "Look at them (`relayer dead-letters list --outbox`); once the destination works again, `relayer \
             dead-letters redrive --outbox … --yes` puts them back in the outbox; cleanup deletes them after \
             dead_retention",
        )
    } else {
        Finding::new(
            Severity::Ok,
            "dead.outbox",
            "outbox",
            match oldest {
                None => "no dead rows".to_owned(),
                Some(oldest) => format!("dead rows, none older than {} (the oldest {})", age(options.stuck_after), age(oldest)),
            },
            "",
        )
    });
    Ok(())
}

/// Workers whose last successful pass is stale (status/workers.rs says how it is derived).
fn stalled_workers(workers: &[WorkerPass], findings: &mut Vec<Finding>) {
    for w in workers.iter().filter(|w| w.stalled) {
        let from = match w.source {
            LastPassSource::Lease => "its lease was last renewed",
            LastPassSource::InstanceHeartbeat => "its instances last refreshed their heartbeat",
        };
        findings.push(Finding::new(
            Severity::Critical,
            "workers.stalled",
            format!("worker {}", w.worker),
            format!(
                "{from} {} ago (pass interval {}, stalled after {}; {} live instances run it)",
                age(w.since),
                w.interval.map_or_else(|| "unknown".to_owned(), |i| age(i).to_string()),
                age(stalled_after(w.interval)),
                w.instances
            ),
            format!(
                "Read the logs of the instances running it (target relayer::{}) and their \
                 relayer_worker_seconds_since_last_success gauge: a pass failing and backing off, a database \
                 error, or no instance running it at all (then its lease expires and no one takes it)",
                w.worker
            ),
        ));
    }
    if !workers.iter().any(|w| w.stalled) {
        findings.push(Finding::new(
            Severity::Ok,
            "workers.stalled",
            "workers",
            if workers.is_empty() {
                "no worker has recorded a pass or a heartbeat in the last 10 minutes".to_owned()
            } else {
                let names: Vec<&str> = workers.iter().map(|w| w.worker.as_str()).collect();
                format!("every worker passed lately ({})", names.join(", "))
            },
            "",
        ));
    }
}

/// Workers whose live instances recorded different settings (OPT-4).
fn disagreements(found: &[Disagreement], findings: &mut Vec<Finding>) {
    for d in found {
        let groups: Vec<String> =
            d.groups.iter().map(|(print, instances)| format!("{print}: {}", instances.join(", "))).collect();
        findings.push(Finding::new(
            Severity::Warning,
            "settings.disagreement",
            format!("worker {}", d.worker),
            format!(
                "live instances of {} run with different settings ({}): {}",
                d.worker,
                d.settings.join(", "),
                groups.join("; ")
            ),
            "Instances sharing a namespace must agree on timing and retention (OPT-4): the one with the shortest \
             retention or interval wins in practice. Deploy one configuration to all of them; `relayer status` \
             shows each instance's settings",
        ));
    }
    if found.is_empty() {
        findings.push(Finding::new(
            Severity::Ok,
            "settings.disagreement",
            "instances",
            "live instances agree on their settings",
            "",
        ));
    }
}
