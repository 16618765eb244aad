//! `relayer doctor` (OBS-6): what hurts a PostgreSQL queue, found on a live database, each
//! finding with what to do about it.
//!
//! A [`Report`] is a list of [`Finding`]s, each with a [`Severity`], a stable `code`
//! (documented in docs/operations.md, one section per code), the `subject` it is about (a
//! pid, a slot, a table, a lane, a worker), what was seen, and advice. Every check yields at
//! least one finding, an `Ok` one when it saw nothing wrong, so a reader sees what was
//! checked. The report's severity is its worst finding's; `relayer doctor` exits 0, 1 or 2
//! for ok, warning and critical.
//!
//! The checks, in report order:
//!
//! - **pooler** — whether this connection goes through a transaction-mode pooler (the same
//!   probe the advisory lock makes before it trusts a session, LDR-6). When it does, the
//!   report stops there: what the other checks would read of "this session" through a
//!   pooler is not to be trusted;
//! - **schema** — the namespace's schema version against this build's;
//! - **xmin horizon** — sessions holding a snapshot (`backend_xmin`, with pid, application,
//!   state and age), replication slots' `xmin`/`catalog_xmin` (and inactive slots, which
//!   keep WAL), prepared transactions, standbys reporting through `hot_standby_feedback`,
//!   and this server's own `hot_standby_feedback` when it is a standby;
//! - **vacuum** — autovacuum on or off, each relayer table's dead tuples and last
//!   autovacuum, and the queue and outbox tables' settings against
//!   [`RECOMMENDED_AUTOVACUUM`] (schema step 5);
//! - **notifications** — `pg_notification_queue_usage()`;
//! - **relayer's own state** — rows waiting on a transport no live instance registers
//!   (TRN-6), parked lanes, dead letters and dead rows nobody acted on, workers whose last
//!   pass is stale, and instances whose settings disagree (OPT-4).
//!
//! Every statement is cheap on a database of any size: catalog and statistics views,
//! in-memory activity views, and index reads bounded by [`DoctorOptions::cap`] rows — never
//! a scan of a relayer table (docs/operations.md lists each statement's cost). Every age is
//! measured on the database clock (NS-4).

mod horizon;
mod namespace;
mod report;
mod server;

use relayer_core::Namespace;

use crate::connector::Connector;
use crate::error::StorageError;

pub use report::{CHURNING_TABLES, DoctorOptions, Finding, RECOMMENDED_AUTOVACUUM, Report, Severity};

/// Examines the database `database` connects to, and `namespace` in it.
///
/// Opens its own connection (and, for the pooler probe, a second one for a moment), reads
/// only what the [module docs](self) list, and changes nothing. An error means a statement
/// failed (the connection, a permission); a finding never does.
pub async fn diagnose(
    database: &Connector,
    namespace: &Namespace,
    options: &DoctorOptions,
) -> Result<Report, StorageError> {
    let client = database
        .connect()
        .await
        .map_err(|e| StorageError::database(format!("connecting to {}", database.target()), e))?;
    let mut findings = Vec::new();
    // First, and in the simple query protocol: behind a transaction-mode pooler the other
    // statements (prepared, then executed) may land on different backends, and what they
    // read of "this session" would be wrong. Then only the pooler is reported.
    if server::pooler(&client, database, &mut findings).await? {
        return Ok(Report { namespace: namespace.to_string(), findings });
    }
    // Each statement is bounded; a doctor waiting on a lock would be no help.
    client
        .batch_execute("SET statement_timeout = '15s'; SET lock_timeout = '2s'")
        .await
        .map_err(|e| StorageError::database("setting the doctor's timeouts", e))?;
    let version = namespace::schema(&client, namespace, &mut findings).await?;
    horizon::check(&client, options, &mut findings).await?;
    server::vacuum(&client, namespace, version.is_some(), &mut findings).await?;
    server::notification_queue(&client, &mut findings).await?;
    if version.is_some() {
        namespace::relayer_state(&client, namespace, options, &mut findings).await?;
    }
    Ok(Report { namespace: namespace.to_string(), findings })
}
