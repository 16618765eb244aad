//! The connection pool workers use (bb8 over tokio-postgres).
//!
//! Workers keep their own pool (DRV-1). A pass takes one connection for everything it does
//! and never waits for a second while holding one (LIF-2), so a pool of size 1 works.

use std::time::Duration;

use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::NoTls;

use crate::error::StorageError;

/// A pool of plain-TCP or unix-socket PostgreSQL connections.
pub type PgPool = bb8::Pool<PostgresConnectionManager<NoTls>>;

/// A connection borrowed from a [`PgPool`].
pub type PgConnection<'a> = bb8::PooledConnection<'a, PostgresConnectionManager<NoTls>>;

/// Builds a pool of at most `max_size` connections to `config`, checking that one
/// connection can be made now so a wrong address fails at start, not on the first pass.
pub async fn connect_pool(config: tokio_postgres::Config, max_size: u32) -> Result<PgPool, StorageError> {
    let manager = PostgresConnectionManager::new(config, NoTls);
    let pool = bb8::Pool::builder()
        .max_size(max_size.max(1))
        .connection_timeout(Duration::from_secs(10))
        .test_on_check_out(false)
        .build_unchecked(manager);
    drop(pool.get().await.map_err(|e| StorageError::pool("connecting to PostgreSQL", e))?);
    Ok(pool)
}
