//! Applying and checking the schema (NS-3).
//!
//! `migrate` is idempotent and safe when replicas start together: it runs in one
//! transaction under a transaction-scoped advisory lock on the schema, so concurrent
//! callers apply each step once and the others find it done. Workers never create tables;
//! they call [`verify_schema`] at start and fail with a clear error if it is missing or old.
//!
//! No lock wait of a migration is unbounded (RES-5): the transaction runs with
//! `lock_timeout` = [`MIGRATION_LOCK_TIMEOUT`], so a step that needs a table lock held by a
//! long transaction (or the migration lock, held by a caller that went silent) gives up
//! instead of queueing every worker's statements behind it, and is tried again, up to
//! [`MIGRATION_ATTEMPTS`] times in all.

use std::time::Duration;

use relayer_core::{Namespace, advisory_lock_key};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row};

use crate::error::{StorageError, StorageErrorKind};
use crate::schema::{MIGRATIONS, SCHEMA_VERSION, create_schema_sql, version_table_sql};

/// What [`migrate`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationReport {
    /// The version found before migrating (0: no relayer schema).
    pub from: i32,
    /// The version after migrating.
    pub to: i32,
    /// The steps this call applied (empty when another caller, or an earlier run, had).
    pub applied: Vec<i32>,
}

/// The advisory-lock resource that serializes migrations of one schema. Keyed by schema,
/// not namespace, because namespaces sharing a schema race on `CREATE SCHEMA`.
pub fn migration_lock_resource(namespace: &Namespace) -> String {
    format!("migrate:{}", namespace.schema())
}

/// The longest one lock wait of a migration lasts before its transaction gives up (and is
/// tried again): the migration lock, and the table locks its steps take (RES-5).
pub const MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times [`migrate`] tries before a lock timeout is its answer.
pub const MIGRATION_ATTEMPTS: u32 = 5;

/// Brings `namespace` to [`SCHEMA_VERSION`], creating the schema if needed.
///
/// Every lock wait lasts at most [`MIGRATION_LOCK_TIMEOUT`]; a transaction that timed out
/// waiting was rolled back whole and is tried again after a pause (1 s, 2 s, 4 s …), up to
/// [`MIGRATION_ATTEMPTS`] tries. The last lock timeout is then returned (SQLSTATE 55P03,
/// transient), naming the namespace.
pub async fn migrate(
    client: &mut tokio_postgres::Client,
    namespace: &Namespace,
) -> Result<MigrationReport, StorageError> {
    let mut attempt = 1;
    loop {
        match migrate_once(client, namespace).await {
            Err(error)
                if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) && attempt < MIGRATION_ATTEMPTS =>
            {
                let pause = Duration::from_secs(1 << (attempt - 1).min(5));
                tracing::warn!(target: "relayer::schema", %namespace, attempt, ?pause,
                    cause = %relayer_core::error_chain(&error),
                    "a migration lock wait timed out (a long transaction holds a table, or another \
                     migration is running); trying again");
                tokio::time::sleep(pause).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// One try of [`migrate`]: one transaction, its lock waits bounded.
async fn migrate_once(
    client: &mut tokio_postgres::Client,
    namespace: &Namespace,
) -> Result<MigrationReport, StorageError> {
    let context = || format!("migrating namespace {namespace}");
    let tx = client.transaction().await.map_err(|e| StorageError::database(context(), e))?;
    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{}ms'", MIGRATION_LOCK_TIMEOUT.as_millis()))
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let key = advisory_lock_key(&migration_lock_resource(namespace));
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key])
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    tx.batch_execute(&format!("{}{}", create_schema_sql(namespace), version_table_sql(namespace)))
        .await
        .map_err(|e| StorageError::database(context(), e))?;
    let from = current_version(&tx, namespace).await?.unwrap_or(0);
    if from > SCHEMA_VERSION {
        return Err(StorageError::schema(
            namespace,
            StorageErrorKind::SchemaTooNew { found: from, known: SCHEMA_VERSION },
        ));
    }
    let mut applied = Vec::new();
    for step in MIGRATIONS.iter().filter(|step| step.version > from) {
        tx.batch_execute(&step.render(namespace)).await.map_err(|e| {
            StorageError::database(format!("applying schema step {} to {namespace}", step.version), e)
        })?;
        tx.execute(
            &format!(
                "INSERT INTO {} (version, description) VALUES ($1, $2)",
                namespace.table("schema_version")
            ),
            &[&step.version, &step.description],
        )
        .await
        .map_err(|e| StorageError::database(context(), e))?;
        applied.push(step.version);
    }
    tx.commit().await.map_err(|e| StorageError::database(context(), e))?;
    if !applied.is_empty() {
        tracing::info!(target: "relayer::schema", %namespace, from, to = SCHEMA_VERSION, ?applied, "schema migrated");
    }
    Ok(MigrationReport { from, to: SCHEMA_VERSION, applied })
}

/// The namespace's schema version, or `None` when it has no relayer schema.
///
/// Unnamed statements (`query_typed`), so it works behind a transaction-mode pooler too.
pub async fn current_version(
    client: &impl GenericClient,
    namespace: &Namespace,
) -> Result<Option<i32>, StorageError> {
    let context = || format!("reading the schema version of {namespace}");
    let version_table = namespace.table("schema_version");
    let exists: bool = client
        .query_typed("SELECT to_regclass($1) IS NOT NULL", &[(&version_table, Type::TEXT)])
        .await
        .map_err(|e| StorageError::database(context(), e))
        .and_then(|rows| first_row(rows, context))?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let row = client
        .query_typed(&format!("SELECT max(version) FROM {version_table}"), &[])
        .await
        .map_err(|e| StorageError::database(context(), e))
        .and_then(|rows| first_row(rows, context))?;
    Ok(row.get::<_, Option<i32>>(0))
}

/// The one row an aggregate returns.
fn first_row(rows: Vec<Row>, context: impl Fn() -> String) -> Result<Row, StorageError> {
    rows.into_iter().next().ok_or_else(|| StorageError::new(context(), StorageErrorKind::MalformedRow))
}

/// Checks that `namespace` has the schema this build needs. A newer schema is accepted
/// (steps are additive, so a rolling deploy can run old and new replicas side by side);
/// a missing or older one is an error naming the namespace and what to do.
pub async fn verify_schema(client: &impl GenericClient, namespace: &Namespace) -> Result<i32, StorageError> {
    match current_version(client, namespace).await? {
        None | Some(0) => Err(StorageError::schema(namespace, StorageErrorKind::SchemaMissing)),
        Some(found) if found < SCHEMA_VERSION => Err(StorageError::schema(
            namespace,
            StorageErrorKind::SchemaOutdated { found, required: SCHEMA_VERSION },
        )),
        Some(found) => {
            if found > SCHEMA_VERSION {
                tracing::warn!(target: "relayer::schema", %namespace, found, known = SCHEMA_VERSION,
                    "schema is newer than this build; running with the steps it knows");
            }
            Ok(found)
        }
    }
}
