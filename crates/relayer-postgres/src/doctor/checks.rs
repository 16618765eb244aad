//! The doctor's checks other than the horizon: schema, vacuum, the notification queue, a
//! pooler in front, and relayer's own state. Each statement names its cost beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relayer_core::Namespace;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::{CHURNING_TABLES, DoctorOptions, Finding, RECOMMENDED_AUTOVACUUM, Severity, age};
use crate::connector::Connector;
use crate::error::{StorageError, column};
use crate::migrate::current_version;
use crate::schema::{SCHEMA_VERSION, TABLES};
use crate::status::elapsed::{duration_from_micros, micros_since};
use crate::status::{
    Disagreement, LastPassSource, NamespaceStatus, WorkerPass, namespace_gauges, stalled_after, workers,
};

/// Notification queue usage from which the doctor warns, and from which it is critical: at
/// 100% every NOTIFY fails, and with it every commit that enqueues.
const NOTIFY_WARNING: f64 = 0.10;
const NOTIFY_CRITICAL: f64 = 0.50;
/// Dead tuples past which a table is critical whatever else is true.
const DEAD_CRITICAL: i64 = 1_000_000;
/// Fewer dead tuples than this are never worth a finding.
const DEAD_FLOOR: i64 = 10_000;
/// At most this many parked lanes and dead-letter groups are listed one by one.
const LISTED: i64 = 20;

async fn rows(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    what: &str,
) -> Result<Vec<tokio_postgres::Row>, StorageError> {
    client.query(sql, params).await.map_err(|e| StorageError::database(format!("reading {what}"), e))
}

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

/// The server's autovacuum settings; a per-table value overrides them.
struct VacuumSettings {
    on: bool,
    threshold: f64,
    scale_factor: f64,
    naptime: Duration,
}

/// A storage parameter of `reloptions` (`name=value` each), as a number.
fn reloption(reloptions: &[String], name: &str) -> Option<String> {
    reloptions.iter().find_map(|o| o.strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
}

/// Whether a table vacuums at least as eagerly as [`RECOMMENDED_AUTOVACUUM`]: no larger
/// scale factor, no larger threshold. The effective values, for the message.
fn as_eager_as_recommended(reloptions: &[String], server: &VacuumSettings) -> (bool, f64, f64) {
    let number = |name: &str, default: f64| {
        reloption(reloptions, name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(default)
    };
    let threshold = number("autovacuum_vacuum_threshold", server.threshold);
    let scale_factor = number("autovacuum_vacuum_scale_factor", server.scale_factor);
    let recommended = |name: &str| {
        RECOMMENDED_AUTOVACUUM
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .unwrap_or(f64::INFINITY)
    };
    let eager = threshold <= recommended("autovacuum_vacuum_threshold")
        && scale_factor <= recommended("autovacuum_vacuum_scale_factor");
    (eager, threshold, scale_factor)
}

/// Autovacuum on the server and on each relayer table: dead tuples, last (auto)vacuum, and
/// the churning tables' settings. Cost: `pg_settings` (the server's GUCs, in memory), and
/// `pg_class` ⋈ `pg_stat_user_tables` for the namespace's nine tables (catalog and
/// statistics, by name).
pub(super) async fn vacuum(
    client: &Client,
    namespace: &Namespace,
    has_schema: bool,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let what = "the autovacuum settings (pg_settings)";
    let row = client
        .query_one(
            "SELECT current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on', \
                    current_setting('autovacuum_vacuum_threshold')::float8, \
                    current_setting('autovacuum_vacuum_scale_factor')::float8, \
                    (SELECT setting::int8 FROM pg_settings WHERE name = 'autovacuum_naptime')",
            &[],
        )
        .await
        .map_err(|e| StorageError::database(format!("reading {what}"), e))?;
    let server = VacuumSettings {
        on: column(&row, 0, what)?,
        threshold: column(&row, 1, what)?,
        scale_factor: column(&row, 2, what)?,
        naptime: Duration::from_secs(u64::try_from(column::<i64>(&row, 3, what)?).unwrap_or(60)),
    };
    findings.push(if server.on {
        Finding::new(
            Severity::Ok,
            "vacuum.autovacuum",
            "server",
            format!("autovacuum is on (naptime {})", age(server.naptime)),
            "",
        )
    } else {
        Finding::new(
            Severity::Critical,
            "vacuum.autovacuum",
            "server",
            "autovacuum (or track_counts, which it needs) is off on this server: dead rows of the queue and \
             outbox are never removed",
            "ALTER SYSTEM SET autovacuum = on (and track_counts = on); SELECT pg_reload_conf(). Until then, \
             VACUUM the queue and outbox tables on a schedule (every minute under load)",
        )
    });
    if !has_schema {
        return Ok(());
    }
    let names: Vec<String> = TABLES.iter().map(|t| format!("{}{t}", namespace.prefix())).collect();
    let what = "the relayer tables' vacuum state (pg_stat_user_tables)";
    let tables = rows(
        client,
        &format!(
            "SELECT c.relname::text, coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), \
                    {since}, coalesce(s.autovacuum_count, 0), coalesce(c.reloptions, '{{}}')::text[] \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
             WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind = 'r' \
             ORDER BY coalesce(s.n_dead_tup, 0) DESC, c.relname",
            since = micros_since("greatest(s.last_autovacuum, s.last_vacuum)"),
        ),
        &[&namespace.schema(), &names],
        what,
    )
    .await?;
    let churning: Vec<String> =
        CHURNING_TABLES.iter().map(|t| format!("{}{t}", namespace.prefix())).collect();
    let mut worst_ok: Option<String> = None;
    for row in &tables {
        let table: String = column(row, 0, what)?;
        let (live, dead): (i64, i64) = (column(row, 1, what)?, column(row, 2, what)?);
        let since: Option<Duration> = column::<Option<i64>>(row, 3, what)?.map(duration_from_micros);
        let vacuums: i64 = column(row, 4, what)?;
        let reloptions: Vec<String> = column(row, 5, what)?;
        let quoted = format!("\"{}\".\"{table}\"", namespace.schema());
        if reloption(&reloptions, "autovacuum_enabled").as_deref() == Some("false") {
            findings.push(Finding::new(
                Severity::Critical,
                "vacuum.settings",
                format!("table {table}"),
                format!("autovacuum is disabled on {table} (autovacuum_enabled = false)"),
                format!("ALTER TABLE {quoted} RESET (autovacuum_enabled)"),
            ));
        }
        let (eager, threshold, scale_factor) = as_eager_as_recommended(&reloptions, &server);
        if churning.contains(&table) {
            let wanted: Vec<String> =
                RECOMMENDED_AUTOVACUUM.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            findings.push(if eager {
                Finding::new(
                    Severity::Ok,
                    "vacuum.settings",
                    format!("table {table}"),
                    format!("vacuumed once {threshold} + {scale_factor} × live rows are dead"),
                    "",
                )
            } else {
                Finding::new(
                    Severity::Warning,
                    "vacuum.settings",
                    format!("table {table}"),
                    format!(
                        "{table} is vacuumed only once {threshold} + {scale_factor} × live rows are dead ({} \
                         now): rows that stay (dead letters, parked lanes, scheduled rows) postpone the vacuum of \
                         the churning ones",
                        (threshold + scale_factor * live as f64).round()
                    ),
                    format!(
                        "`relayer schema apply` (schema step 5) sets the recommended values; or ALTER TABLE \
                         {quoted} SET ({})",
                        wanted.join(", ")
                    ),
                )
            });
        }
        let vacuumed_lately = since.is_some_and(|s| s <= 3 * server.naptime);
        let trigger = threshold + scale_factor * live as f64;
        let many = dead >= DEAD_FLOOR && dead as f64 >= 2.0 * trigger;
        let severity = if dead >= DEAD_CRITICAL && dead > live {
            Severity::Critical
        } else if many && !vacuumed_lately {
            Severity::Warning
        } else {
            Severity::Ok
        };
        let last =
            since.map_or_else(|| "never vacuumed".to_owned(), |s| format!("last vacuumed {} ago", age(s)));
        let seen =
            format!("{table}: {dead} dead and {live} live tuples (estimates), {last}, {vacuums} autovacuums");
        if severity == Severity::Ok {
            worst_ok.get_or_insert(seen);
            continue;
        }
        findings.push(Finding::new(
            severity,
            "vacuum.dead_tuples",
            format!("table {table}"),
            seen,
            format!(
                "Dead tuples cost every scan of the table until vacuum removes them. If autovacuum ran lately \
                 and they stay, something holds the xmin horizon (see the xmin findings; VACUUM (VERBOSE) \
                 {quoted} reports them as \"dead but not yet removable\"); else run VACUUM {quoted} now, and \
                 check the table's settings and the server's autovacuum_naptime"
            ),
        ));
    }
    if let Some(seen) = worst_ok {
        findings.push(Finding::new(Severity::Ok, "vacuum.dead_tuples", "namespace", seen, ""));
    }
    Ok(())
}

/// `pg_notification_queue_usage()`: the share of the server's NOTIFY queue (8 GB by default)
/// holding notifications some listener has not read. Cost: one function call.
pub(super) async fn notification_queue(
    client: &Client,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let usage: f64 = client
        .query_one("SELECT pg_notification_queue_usage()", &[])
        .await
        .map_err(|e| StorageError::database("reading pg_notification_queue_usage()", e))
        .and_then(|row| column(&row, 0, "pg_notification_queue_usage()"))?;
    let severity = if usage >= NOTIFY_CRITICAL {
        Severity::Critical
    } else if usage >= NOTIFY_WARNING {
        Severity::Warning
    } else {
        Severity::Ok
    };
    findings.push(Finding::new(
        severity,
        "notify.queue",
        "server",
        format!("the NOTIFY queue is {:.2}% full", usage * 100.0),
        if severity == Severity::Ok {
            String::new()
        } else {
            "A session that LISTENs and then stays in a transaction keeps every notification since unread; \
             find it (pg_stat_activity, state 'idle in transaction', and the xmin findings) and end it. At 100% \
             every NOTIFY — and so every commit that enqueues a message — fails"
                .to_owned()
        },
    ));
    Ok(())
}

/// Whether this connection reaches PostgreSQL through a transaction-mode pooler, probed as
/// the advisory lock probes its session (relayer-advisory-lock's `session.rs`, LDR-6): a
/// setting written by one statement must be read back by the next on the same backend, and
/// a second connection must get a backend of its own. Cost: three trivial statements and a
/// connection opened and closed. Returns whether a pooler was found.
pub(super) async fn pooler(
    client: &Client,
    database: &Connector,
    findings: &mut Vec<Finding>,
) -> Result<bool, StorageError> {
    let db = |e| StorageError::database("probing for a connection pooler", e);
    let nonce = format!(
        "{:x}-{:x}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    // The simple query protocol: a transaction-mode pooler may refuse named statements, and
    // the finding should name the pooler, not that symptom.
    let first = client
        .simple_query(&format!(
            "SELECT pg_backend_pid(), set_config('relayer.doctor_probe', '{nonce}', false)"
        ))
        .await
        .map_err(db)?;
    let second = client
        .simple_query("SELECT pg_backend_pid(), current_setting('relayer.doctor_probe', true)")
        .await
        .map_err(db)?;
    let witness = database.connect().await.map_err(db)?;
    let other = witness.simple_query("SELECT pg_backend_pid(), ''").await.map_err(db)?;
    drop(witness);
    let (first, second, other) = (first_row(&first), first_row(&second), first_row(&other));
    let why = match (first, second, other) {
        (Some((a, _)), Some((b, _)), _) if a != b => {
            Some(format!("two statements on one connection ran on backends {a} and {b}"))
        }
        (Some(_), Some((_, value)), _) if value != nonce => {
            Some("a session setting did not survive to the next statement".to_owned())
        }
        (Some((a, _)), _, Some((c, _))) if a == c => {
            Some(format!("a second connection was served by this connection's backend (pid {a})"))
        }
        (Some(_), Some(_), Some(_)) => None,
        _ => Some("the probe returned no row".to_owned()),
    };
    let pooled = why.is_some();
    findings.push(match why {
        None => Finding::new(
            Severity::Ok,
            "pooler.transaction_mode",
            database.target(),
            "this connection is a real PostgreSQL session (direct, or a session-mode pool)",
            "",
        ),
        Some(why) => Finding::new(
            Severity::Critical,
            "pooler.transaction_mode",
            database.target(),
            format!(
                "{why}: a transaction-mode pooler is in front. Session state does not survive between \
                 transactions there: advisory-lock leadership refuses to run (LDR-6), LISTEN loses its \
                 wake-ups (consumers and dispatchers fall back to polling), and the doctor's own session \
                 checks would be wrong, so they did not run"
            ),
            "Point relayer's workers, consumers' LISTEN and the doctor at PostgreSQL directly or at a \
             session-mode pool; keep the transaction-mode pooler for enqueueing application traffic only",
        ),
    });
    Ok(pooled)
}

/// The first data row of a simple query's answer: a pid and a text column.
fn first_row(messages: &[SimpleQueryMessage]) -> Option<(i32, String)> {
    messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => {
            Some((row.get(0)?.parse().ok()?, row.get(1).unwrap_or_default().to_owned()))
        }
        _ => None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> VacuumSettings {
        VacuumSettings { on: true, threshold: 50.0, scale_factor: 0.2, naptime: Duration::from_secs(60) }
    }

    #[test]
    fn a_table_is_as_eager_as_recommended_only_with_both_settings_at_most_step_5s_obs_6() {
        let opts = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(!as_eager_as_recommended(&[], &server()).0, "the server's defaults are not");
        let step5 = opts(&["autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=1000"]);
        assert_eq!(as_eager_as_recommended(&step5, &server()), (true, 1000.0, 0.0));
        let stricter = opts(&["autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=200"]);
        assert!(as_eager_as_recommended(&stricter, &server()).0);
        let half = opts(&["autovacuum_vacuum_threshold=1000"]);
        assert!(!as_eager_as_recommended(&half, &server()).0, "scale factor left at 0.2");
        assert_eq!(reloption(&step5, "autovacuum_vacuum_threshold").as_deref(), Some("1000"));
        assert_eq!(reloption(&step5, "autovacuum_vacuum_threshold_x"), None);
    }
}
