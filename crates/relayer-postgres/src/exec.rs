//! Where the worker statements run: [`Executor`].
//!
//! Any tokio-postgres [`GenericClient`] (a client, a transaction) is an executor that sends
//! each statement unnamed with explicit parameter types (`query_typed`): one round trip,
//! planned for the values at hand, every time. [`Prepared`] pairs such a client with the
//! [`StatementCache`] of its connection: a statement is prepared once per connection and
//! then only bound and executed, which saves its planning on every later call (more than
//! its execution for most worker statements, docs/performance.md).
//!
//! PostgreSQL may then run a cached *generic* plan. Every worker statement is written to
//! stay correct and bounded under one: each "take a batch of n" has the
//! `seq = ANY(ARRAY(SELECT … LIMIT n FOR UPDATE SKIP LOCKED))` shape, which a generic plan
//! cannot turn into "take every row" (docs/performance.md, "Raw limits"), and the tests run the claim, the
//! recovery page and the completion under `plan_cache_mode = force_generic_plan`.
//!
//! A server that loses the prepared statements (`DISCARD ALL`, a pooler handing the
//! session to another server connection) fails one call; the cache then forgets them all,
//! and after a few such losses stops preparing (see [`StatementCache`]). Behind a
//! transaction-mode pooler that does not track prepared statements, build pools with
//! [`StatementMode::Unnamed`](crate::StatementMode): there a named statement could reach a
//! server connection where another client prepared a different one under the same name.

use async_trait::async_trait;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use crate::error::{StorageError, StorageErrorKind};
use crate::pool::{PgClient, StatementCache};

/// Typed parameters of one statement: each value with its PostgreSQL type.
pub type TypedParams<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// Something worker statements run on: a tokio-postgres client or transaction
/// ([`GenericClient`]), or one with its connection's statement cache ([`Prepared`]).
#[async_trait]
pub trait Executor: Sync {
    /// Runs `sql` and returns its rows.
    async fn rows(&self, sql: &str, params: &TypedParams<'_>) -> Result<Vec<Row>, tokio_postgres::Error>;

    /// Runs `sql` and returns how many rows it affected.
    async fn affected(&self, sql: &str, params: &TypedParams<'_>) -> Result<u64, tokio_postgres::Error>;
}

#[async_trait]
impl<C: GenericClient + Sync> Executor for C {
    async fn rows(&self, sql: &str, params: &TypedParams<'_>) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.query_typed(sql, params).await
    }

    async fn affected(&self, sql: &str, params: &TypedParams<'_>) -> Result<u64, tokio_postgres::Error> {
        self.execute_typed(sql, params).await
    }
}

/// A client or transaction whose statements are prepared once on its connection and
/// cached in `statements` (see the [module docs](self)).
///
/// `statements` must be the cache of the connection `client` runs on:
/// [`PgClient::split`](crate::PgClient::split) lends both.
#[derive(Debug)]
pub struct Prepared<'a, C> {
    client: &'a C,
    statements: &'a StatementCache,
}

impl<'a, C: GenericClient + Sync> Prepared<'a, C> {
    /// Runs `client`'s statements through `statements`, its connection's cache.
    pub fn new(client: &'a C, statements: &'a StatementCache) -> Self {
        Prepared { client, statements }
    }

    /// The client the statements run on.
    pub fn client(&self) -> &C {
        self.client
    }

    /// The prepared statement for `sql` and the cache generation it belongs to: from the
    /// cache, or prepared now (one more round trip, once per connection).
    async fn statement(
        &self,
        sql: &str,
        params: &TypedParams<'_>,
    ) -> Result<(tokio_postgres::Statement, u64), tokio_postgres::Error> {
        let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
        let (cached, generation) = self.statements.get(sql, &types);
        if let Some(statement) = cached {
            return Ok((statement, generation));
        }
        let prepared = self.client.prepare_typed(sql, &types).await;
        let statement = self.forget_on_error(sql, generation, prepared)?;
        self.statements.insert(sql, statement.clone(), generation);
        Ok((statement, generation))
    }

    /// Drops a statement whose use failed: a schema change may have invalidated it, and
    /// it is cheaper to prepare it again than to tell why. When the server does not know
    /// the connection's statements, or already has one by the name we chose, the session
    /// is not what the cache assumed: it forgets them all.
    fn forget_on_error<T>(
        &self,
        sql: &str,
        generation: u64,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        if let Err(error) = &result {
            let code = error.code();
            if code == Some(&SqlState::INVALID_SQL_STATEMENT_NAME)
                || code == Some(&SqlState::DUPLICATE_PSTATEMENT)
            {
                self.statements.lost_all(generation);
            } else {
                self.statements.forget(sql);
            }
        }
        result
    }
}

#[async_trait]
impl<C: GenericClient + Sync> Executor for Prepared<'_, C> {
    async fn rows(&self, sql: &str, params: &TypedParams<'_>) -> Result<Vec<Row>, tokio_postgres::Error> {
        if !self.statements.is_enabled() {
            return self.client.rows(sql, params).await;
        }
        let (statement, generation) = self.statement(sql, params).await?;
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
        let result = self.client.query(&statement, &values).await;
        self.forget_on_error(sql, generation, result)
    }

    async fn affected(&self, sql: &str, params: &TypedParams<'_>) -> Result<u64, tokio_postgres::Error> {
        if !self.statements.is_enabled() {
            return self.client.affected(sql, params).await;
        }
        let (statement, generation) = self.statement(sql, params).await?;
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
        let result = self.client.execute(&statement, &values).await;
        self.forget_on_error(sql, generation, result)
    }
}

/// Runs `sql` and returns its rows; `what` names the statement in errors. Every storage
/// statement that reads rows runs through here (or [`one_row`]).
pub(crate) async fn rows(
    client: &impl Executor,
    sql: &str,
    params: &TypedParams<'_>,
    what: impl Into<String>,
) -> Result<Vec<Row>, StorageError> {
    client.rows(sql, params).await.map_err(|e| StorageError::database(what, e))
}

/// Runs `sql` and returns how many rows it changed; `what` names the statement in errors.
pub(crate) async fn affected(
    client: &impl Executor,
    sql: &str,
    params: &TypedParams<'_>,
    what: impl Into<String>,
) -> Result<u64, StorageError> {
    client.affected(sql, params).await.map_err(|e| StorageError::database(what, e))
}

/// Runs `sql`, which returns exactly one row by construction (an aggregate, a count), and
/// returns that row; `what` names the statement in errors.
pub(crate) async fn one_row(
    client: &impl Executor,
    sql: &str,
    params: &TypedParams<'_>,
    what: &str,
) -> Result<Row, StorageError> {
    let rows = rows(client, sql, params, what).await?;
    rows.into_iter().next().ok_or_else(|| {
        StorageError::new(format!("{what}: the statement returned no row"), StorageErrorKind::MalformedRow)
    })
}

/// A pooled connection runs its statements through its own cache, each within the
/// connection's statement timeout (RES-5, [`PgClient::bounded`]).
#[async_trait]
impl Executor for PgClient {
    async fn rows(&self, sql: &str, params: &TypedParams<'_>) -> Result<Vec<Row>, tokio_postgres::Error> {
        let prepared = Prepared::new(&**self, self.statements());
        self.bounded(prepared.rows(sql, params), crate::error::timed_out).await
    }

    async fn affected(&self, sql: &str, params: &TypedParams<'_>) -> Result<u64, tokio_postgres::Error> {
        let prepared = Prepared::new(&**self, self.statements());
        self.bounded(prepared.affected(sql, params), crate::error::timed_out).await
    }
}
