//! The database's side of relayer's health: the xmin horizon and dead tuples.
//!
//! Queues live on vacuum. A transaction left open — or a replication slot, or a prepared
//! transaction — holds the xmin horizon: no dead row newer than it can be removed, and
//! every `SKIP LOCKED` scan walks the dead rows. The horizon is server-wide, so it is read
//! from `pg_stat_activity`, `pg_replication_slots` and `pg_prepared_xacts`, leaving out
//! the session reading it.

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::GenericClient;

use super::elapsed::duration_from_micros;
use crate::error::{StorageError, column};

/// The oldest transaction and the xmin horizon of the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Horizon {
    /// Age of the oldest open transaction of another session.
    pub oldest_transaction_age: Option<Duration>,
    /// Its process id.
    pub oldest_transaction_pid: Option<i32>,
    /// Its application name.
    pub oldest_transaction_application: Option<String>,
    /// Age, in transaction ids, of the oldest xmin any session, replication slot or
    /// prepared transaction holds.
    pub xmin_age: Option<i32>,
}

/// Live and dead tuples of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadTuples {
    /// The table's name (with the prefix).
    pub table: String,
    /// Estimated live tuples.
    pub live: i64,
    /// Estimated dead tuples.
    pub dead: i64,
}

pub(super) async fn horizon(client: &impl GenericClient) -> Result<Horizon, StorageError> {
    let row = client
        .query_one(
            "SELECT (extract(epoch FROM now() - oldest.xact_start) * 1e6)::int8, oldest.pid, \
                    oldest.application_name, \
                    greatest((SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE pid <> pg_backend_pid()), \
                             (SELECT max(greatest(age(xmin), age(catalog_xmin))) FROM pg_replication_slots), \
                             (SELECT max(age(transaction)) FROM pg_prepared_xacts)) \
             FROM (SELECT 1) AS one LEFT JOIN LATERAL ( \
               SELECT xact_start, pid, application_name FROM pg_stat_activity \
               WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() \
               ORDER BY xact_start LIMIT 1) AS oldest ON true",
            &[],
        )
        .await
        .map_err(|e| StorageError::database("reading the xmin horizon", e))?;
    Ok(Horizon {
        oldest_transaction_age: column::<Option<i64>>(&row, 0, "the xmin horizon")?.map(duration_from_micros),
        oldest_transaction_pid: column(&row, 1, "the xmin horizon")?,
        oldest_transaction_application: column(&row, 2, "the xmin horizon")?,
        xmin_age: column(&row, 3, "the xmin horizon")?,
    })
}

pub(super) async fn dead_tuples(
    client: &impl GenericClient,
    namespace: &Namespace,
) -> Result<Vec<DeadTuples>, StorageError> {
    let rows = client
        .query(
            "SELECT relname::text, n_live_tup, n_dead_tup FROM pg_stat_user_tables \
             WHERE schemaname = $1 AND left(relname, length($2)) = $2 ORDER BY n_dead_tup DESC, relname",
            &[&namespace.schema(), &namespace.prefix()],
        )
        .await
        .map_err(|e| StorageError::database(format!("reading the dead tuples of {namespace}"), e))?;
    rows.iter()
        .map(|r| {
            let what = "the dead tuples";
            Ok(DeadTuples {
                table: column(r, 0, what)?,
                live: column(r, 1, what)?,
                dead: column(r, 2, what)?,
            })
        })
        .collect()
}
