//! The server's side of the doctor: a transaction-mode pooler in front, autovacuum on the
//! server and on each relayer table, and the NOTIFY queue. Each statement names its cost
//! beside it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relayer_core::Namespace;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::report::{CHURNING_TABLES, Finding, RECOMMENDED_AUTOVACUUM, Severity, age, rows};
use crate::connector::Connector;
use crate::error::{StorageError, column};
use crate::schema::TABLES;
use crate::status::elapsed::{duration_from_micros, micros_since};

/// Notification queue usage from which the doctor warns, and from which it is critical: at
/// 100% every NOTIFY fails, and with it every commit that enqueues.
const NOTIFY_WARNING: f64 = 0.10;
const NOTIFY_CRITICAL: f64 = 0.50;
/// Dead tuples past which a table is critical whatever else is true.
const DEAD_CRITICAL: i64 = 1_000_000;
/// Fewer dead tuples than this are never worth a finding.
const DEAD_FLOOR: i64 = 10_000;

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
