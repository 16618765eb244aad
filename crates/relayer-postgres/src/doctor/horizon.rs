//! Who holds the xmin horizon: sessions, replication slots, prepared transactions and
//! standbys. The horizon is server-wide: whoever holds it keeps dead rows in every table of
//! every namespace, relayer's queue included (docs/performance.md, "Held horizons").
//!
//! Costs: `pg_stat_activity` and `pg_stat_replication` read shared memory (one entry per
//! connection); `pg_replication_slots` and `pg_prepared_xacts` read a few in-memory entries.
//! None touches a table.

use std::time::Duration;

use tokio_postgres::Client;

use super::report::{DoctorOptions, Finding, Severity, age, by_time, by_xid_age, rows};
use crate::error::{StorageError, column};
use crate::status::elapsed::{duration_from_micros, micros_since};

/// At most this many holders of each kind are listed.
const LISTED: i64 = 5;

pub(super) async fn check(
    client: &Client,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    sessions(client, options, findings).await?;
    slots(client, options, findings).await?;
    prepared(client, options, findings).await?;
    standbys(client, options, findings).await
}

/// Sessions with a snapshot, oldest xmin first; the doctor's own left out. Walsenders are
/// judged as standbys; autovacuum workers are left out (a vacuum's xmin holds back no other
/// vacuum). Sessions of other roles show no xmin to a role without
/// `pg_read_all_stats`: said so when it matters.
async fn sessions(
    client: &Client,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let what = "the sessions holding the xmin horizon (pg_stat_activity)";
    let rows = rows(
        client,
        &format!(
            "SELECT pid, coalesce(application_name, ''), coalesce(state, ''), coalesce(usename::text, ''), \
                    coalesce(datname::text, ''), age(backend_xmin), \
                    {held}, left(coalesce(query, ''), 80) \
             FROM pg_stat_activity \
             WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() \
               AND coalesce(backend_type, '') NOT IN ('walsender', 'autovacuum worker') \
             ORDER BY age(backend_xmin) DESC, pid LIMIT {LISTED}",
            held = micros_since("coalesce(xact_start, query_start, backend_start)"),
        ),
        &[],
        what,
    )
    .await?;
    let mut listed = 0;
    for row in &rows {
        let (pid, application, state, user, database): (i32, String, String, String, String) = (
            column(row, 0, what)?,
            column(row, 1, what)?,
            column(row, 2, what)?,
            column(row, 3, what)?,
            column(row, 4, what)?,
        );
        let xid_age: i32 = column(row, 5, what)?;
        let held = duration_from_micros(column::<Option<i64>>(row, 6, what)?.unwrap_or(0));
        let query: String = column(row, 7, what)?;
        let severity = by_time(held, options.horizon_warning, options.horizon_critical)
            .max(by_xid_age(xid_age, options));
        if severity == Severity::Ok && listed > 0 {
            continue;
        }
        listed += 1;
        let message = format!(
            "pid {pid} (application_name {application:?}, user {user}, database {database}, state {state}) \
             has held a snapshot for {} — its xmin is {xid_age} transactions old; last statement: {query:?}",
            age(held)
        );
        let advice = if severity == Severity::Ok {
            String::new()
        } else {
            format!(
                "While it holds it, no row deleted or updated since can be vacuumed in any table, and every \
                 queue receive walks them. Find the owner of application {application:?}; end it with \
                 SELECT pg_terminate_backend({pid}) if it is stuck; bound such sessions with \
                 idle_in_transaction_session_timeout (e.g. ALTER ROLE … SET idle_in_transaction_session_timeout \
                 = '60s') and statement_timeout for reporting roles"
            )
        };
        findings.push(Finding::new(severity, "xmin.session", format!("pid {pid}"), message, advice));
    }
    if rows.is_empty() {
        let visible: bool = client
            .query_one(
                "SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') \
                        OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
                &[],
            )
            .await
            .map_err(|e| StorageError::database("reading the doctor's own privileges", e))
            .and_then(|row| column::<Option<bool>>(&row, 0, "the doctor's own privileges"))?
            .unwrap_or(false);
        let (message, advice) = if visible {
            ("no other session holds a snapshot".to_owned(), String::new())
        } else {
            (
                "no session of this role holds a snapshot; sessions of other roles are hidden".to_owned(),
                "Run the doctor as a role with pg_monitor (GRANT pg_monitor TO …) to see every session"
                    .to_owned(),
            )
        };
        findings.push(Finding::new(Severity::Ok, "xmin.session", "server", message, advice));
    }
    Ok(())
}

/// Replication slots: `xmin` (a physical slot fed by a standby's hot_standby_feedback) holds
/// every table; `catalog_xmin` (logical decoding) holds the system catalogs; an inactive
/// slot keeps WAL from its `restart_lsn` on, however far behind.
async fn slots(
    client: &Client,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let what = "the replication slots (pg_replication_slots)";
    let rows = rows(
        client,
        "SELECT slot_name::text, slot_type, active, age(xmin), age(catalog_xmin), \
                CASE WHEN restart_lsn IS NULL OR pg_is_in_recovery() THEN NULL \
                     ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 END \
         FROM pg_replication_slots ORDER BY slot_name",
        &[],
        what,
    )
    .await?;
    for row in &rows {
        let (name, kind, active): (String, String, bool) =
            (column(row, 0, what)?, column(row, 1, what)?, column(row, 2, what)?);
        let (xmin, catalog_xmin): (Option<i32>, Option<i32>) = (column(row, 3, what)?, column(row, 4, what)?);
        let retained: Option<i64> = column(row, 5, what)?;
        let mut severity = Severity::Ok;
        let mut seen = vec![format!("{kind} slot, {}", if active { "active" } else { "inactive" })];
        let mut advice = Vec::new();
        if let Some(age) = xmin {
            seen.push(format!("holds xmin {age} transactions old (every table)"));
            severity = severity.max(if active { by_xid_age(age, options) } else { Severity::Critical });
        }
        if let Some(age) = catalog_xmin {
            seen.push(format!("holds catalog_xmin {age} transactions old (system catalogs)"));
            severity = severity.max(by_xid_age(age, options).min(Severity::Warning));
        }
        if let Some(bytes) = retained {
            seen.push(format!("keeps {} MiB of WAL", bytes / (1024 * 1024)));
        }
        if !active {
            severity = severity.max(Severity::Warning);
            advice.push(format!(
                "An inactive slot holds its horizon and WAL until its consumer returns: if the standby or \
                 subscriber behind {name:?} is gone for good, SELECT pg_drop_replication_slot('{name}')"
            ));
        } else if xmin.is_some() && severity > Severity::Ok {
            advice.push(
                "A standby with hot_standby_feedback holds the primary's horizon for its longest query: run \
                 long queries on a replica without it, or bound them with statement_timeout there"
                    .to_owned(),
            );
        }
        findings.push(Finding::new(
            severity,
            "xmin.slot",
            format!("slot {name}"),
            seen.join("; "),
            advice.join(" "),
        ));
    }
    if rows.is_empty() {
        findings.push(Finding::new(Severity::Ok, "xmin.slot", "server", "no replication slot", ""));
    }
    Ok(())
}

/// Prepared (two-phase) transactions: each holds the horizon and its locks until someone
/// commits or rolls it back, across restarts.
async fn prepared(
    client: &Client,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let what = "the prepared transactions (pg_prepared_xacts)";
    let rows = rows(
        client,
        &format!(
            "SELECT gid, owner::text, database::text, age(transaction), {held} FROM pg_prepared_xacts \
             ORDER BY prepared, gid LIMIT {LISTED}",
            held = micros_since("prepared"),
        ),
        &[],
        what,
    )
    .await?;
    for row in &rows {
        let (gid, owner, database): (String, String, String) =
            (column(row, 0, what)?, column(row, 1, what)?, column(row, 2, what)?);
        let xid_age: i32 = column(row, 3, what)?;
        let held: Duration = duration_from_micros(column(row, 4, what)?);
        let severity = by_time(held, options.horizon_warning, options.horizon_critical)
            .max(by_xid_age(xid_age, options))
            // A prepared transaction outlives its session: nothing ends it but a person.
            .max(Severity::Warning);
        findings.push(Finding::new(
            severity,
            "xmin.prepared",
            format!("prepared transaction {gid:?}"),
            format!(
                "prepared by {owner} in database {database} {} ago; its xmin is {xid_age} transactions old",
                age(held)
            ),
            format!(
                "A prepared transaction holds the horizon and its locks until it is finished, even across \
                 restarts. If its transaction manager has given up on it: in database {database}, as \
                 {owner}, ROLLBACK PREPARED '{gid}' (or COMMIT PREPARED when it must complete)"
            ),
        ));
    }
    if rows.is_empty() {
        findings.push(Finding::new(Severity::Ok, "xmin.prepared", "server", "no prepared transaction", ""));
    }
    Ok(())
}

/// Standbys reporting their oldest snapshot through `hot_standby_feedback`, and this
/// server's own setting when it is a standby.
async fn standbys(
    client: &Client,
    options: &DoctorOptions,
    findings: &mut Vec<Finding>,
) -> Result<(), StorageError> {
    let what = "the standbys (pg_stat_replication)";
    let rows = rows(
        client,
        &format!(
            "SELECT coalesce(application_name, ''), coalesce(host(client_addr), 'local'), age(backend_xmin), \
                    coalesce(state, '') \
             FROM pg_stat_replication WHERE backend_xmin IS NOT NULL ORDER BY age(backend_xmin) DESC LIMIT {LISTED}"
        ),
        &[],
        what,
    )
    .await?;
    for row in &rows {
        let (application, address): (String, String) = (column(row, 0, what)?, column(row, 1, what)?);
        let (xid_age, state): (i32, String) = (column(row, 2, what)?, column(row, 3, what)?);
        let severity = by_xid_age(xid_age, options);
        findings.push(Finding::new(
            severity,
            "xmin.standby",
            format!("standby {application:?} at {address}"),
            format!(
                "reports an xmin {xid_age} transactions old through hot_standby_feedback (state {state})"
            ),
            if severity == Severity::Ok {
                String::new()
            } else {
                "Its longest query holds this primary's horizon: run long queries on a replica with \
                 hot_standby_feedback off, or bound them with statement_timeout on the standby"
                    .to_owned()
            },
        ));
    }
    let own = client
        .query_one("SELECT pg_is_in_recovery(), current_setting('hot_standby_feedback')", &[])
        .await
        .map_err(|e| StorageError::database("reading hot_standby_feedback", e))?;
    let (standby, feedback): (bool, String) =
        (column(&own, 0, "hot_standby_feedback")?, column(&own, 1, "hot_standby_feedback")?);
    if standby && feedback == "on" {
        findings.push(Finding::new(
            Severity::Warning,
            "xmin.standby",
            "this server",
            "this server is a standby with hot_standby_feedback = on: its long queries hold the primary's horizon",
            "Bound queries here with statement_timeout, or turn hot_standby_feedback off and accept query \
             cancellations on this standby",
        ));
    } else if rows.is_empty() {
        findings.push(Finding::new(
            Severity::Ok,
            "xmin.standby",
            "server",
            format!("no standby reports an xmin (hot_standby_feedback here: {feedback})"),
            "",
        ));
    }
    Ok(())
}
