//! The second step of a start: the database. Opens each pool the plan sizes, checks the
//! namespace's schema (NS-3), and registers relayer's queue transport on its own pool.
//!
//! Each pool's sessions carry the configured `application_name` followed by the pool's name
//! (`orders/dispatcher`, `orders/maintenance`, `orders/queue-transport`,
//! `orders/consumer:invoices`; `relayer/…` when none is configured), so an operator can
//! count each pool's connections in `pg_stat_activity` against its size. Dedicated sessions
//! (LISTEN, advisory locks) and a pool the application lends keep their own names.

use std::sync::Arc;
use std::time::Duration;

use relayer_core::TransportRegistry;
use relayer_postgres::{Connector, PgPool, StatementMode, StorageError, connect_pool_with, verify_schema};

use crate::error::StartError;
use crate::validate::Setup;

/// The longest `application_name` PostgreSQL keeps (NAMEDATALEN - 1); longer is cut.
const APPLICATION_NAME_BYTES: usize = 63;

/// The pools of a host whose database answers and whose schema is current.
pub(crate) struct Connected {
    /// The sweeper's, cleanup's, the dead-letter policies' and the host's bookkeeping: the
    /// host's own, or the application's (lent: the host only ever drops its handle, so the
    /// application's pool stays open).
    pub(crate) maintenance: PgPool,
    /// The dispatcher's pool (asynchronous commit), when it runs.
    #[cfg_attr(not(feature = "dispatcher"), allow(dead_code))]
    pub(crate) dispatcher: Option<PgPool>,
    /// Each consumer's pool, by queue.
    #[cfg_attr(not(feature = "consumer"), allow(dead_code))]
    pub(crate) consumers: Vec<(String, PgPool)>,
    /// Every transport of the host, relayer's queue transport included.
    pub(crate) transports: Arc<TransportRegistry>,
}

/// Opens `setup`'s pools: the maintenance pool first (or takes the lent one), where the
/// schema is checked before any other pool opens.
pub(crate) async fn connect(setup: &Setup) -> Result<Connected, StartError> {
    let statement_timeout = statement_timeout(setup);
    let open = move |pool: String, size: u32, database: Connector| {
        let database = labeled(&database, &pool).with_statement_timeout(statement_timeout);
        connect_pool_with(database, size, setup.statements)
    };
    let maintenance = match (&setup.lent_pool, setup.pools.maintenance) {
        (Some(lent), _) => {
            let max_size = lent.config().max_size;
            if max_size < setup.maintenance_connections {
                tracing::warn!(target: "relayer::host", max_size, needed = setup.maintenance_connections,
                    "the lent pool is smaller than the maintenance work may hold at once (one connection \
                     per led worker and one for the bookkeeping): passes will wait for each other and \
                     for the application; lend a larger pool");
            }
            lent.clone()
        }
        (None, size) => {
            // The plan sizes the maintenance pool whenever none is lent.
            let size = size.unwrap_or(1);
            // Its transactions (a sweep pass under its lease row lock, a cleanup or
            // dead-letter batch) never idle past the shortest lease: the server ends one
            // whose client went silent within that bound, freeing its locks (RES-5).
            let database = setup.database.clone().with_transaction_idle_timeout(statement_timeout * 2);
            open("maintenance".to_owned(), size, database).await.map_err(StartError::Connect)?
        }
    };
    {
        let connection = maintenance
            .get()
            .await
            .map_err(|e| StartError::Pool(StorageError::pool("checking the schema", e)))?;
        if setup.lent_pool.is_some() {
            check_lent_statement_mode(connection.statements().mode(), setup.statements)?;
        }
        verify_schema(&**connection, &setup.namespace).await.map_err(StartError::Schema)?;
    }

    #[cfg_attr(not(feature = "queue"), allow(unused_mut))]
    let mut transports = setup.transports.clone();
    #[cfg(feature = "queue")]
    if let Some(size) = setup.pools.queue_transport {
        // Its own pool: a sweeper pass sends while it holds a maintenance connection in its
        // transaction, and a pass must never wait for a second connection of the pool it
        // holds one of (LIF-2b).
        let pool = open("queue-transport".to_owned(), size, setup.database.clone())
            .await
            .map_err(StartError::Connect)?;
        let queue = relayer_queue::PgQueueTransport::new(pool, &setup.namespace);
        transports.register(Arc::new(queue)).map_err(StartError::DuplicateTransport)?;
    }

    let dispatcher = match setup.pools.dispatcher {
        Some(size) => {
            let database = dispatcher_session(&setup.database);
            Some(open("dispatcher".to_owned(), size, database).await.map_err(StartError::Connect)?)
        }
        None => None,
    };

    let mut consumers = Vec::with_capacity(setup.pools.consumers.len());
    for (queue, size) in &setup.pools.consumers {
        let pool = open(format!("consumer:{queue}"), *size, setup.database.clone())
            .await
            .map_err(StartError::Connect)?;
        consumers.push((queue.clone(), pool));
    }

    Ok(Connected { maintenance, dispatcher, consumers, transports: Arc::new(transports) })
}

/// The longest one statement of the host's pools waits for its answer (RES-5): the default
/// bound, lowered to half the shortest lease or claim the host's statements run under, so a
/// black-holed connection is given up well before another instance may take over its work
/// (at least 1 s).
pub(crate) fn statement_timeout(setup: &Setup) -> Duration {
    let mut bound = relayer_postgres::DEFAULT_STATEMENT_TIMEOUT;
    let mut within = |limit: Duration| bound = bound.min(limit / 2);
    if let Some(dispatcher) = &setup.dispatcher {
        within(dispatcher.claim_duration());
    }
    if let Some(sweeper) = &setup.sweeper {
        within(sweeper.options().lease_duration());
    }
    if let Some(cleanup) = &setup.cleanup {
        within(cleanup.options().lease_duration());
    }
    #[cfg(feature = "dead-letters")]
    if let Some((_, led)) = &setup.dead_letters {
        within(led.options().lease_duration());
    }
    #[cfg(feature = "consumer")]
    for spec in &setup.consumers {
        within(spec.subscription.options().visibility_timeout());
    }
    bound.max(Duration::from_secs(1))
}

/// Refuses a lent pool whose connections send statements otherwise than the builder's
/// `statement_mode` says, which the host's own pools follow: behind a transaction-mode
/// pooler one of the two would break.
///
/// The lent pool's connections were opened in `lent` mode (as configured: a prepared-mode
/// connection whose cache gave up after lost statements is still a prepared-mode pool).
fn check_lent_statement_mode(lent: StatementMode, builder: StatementMode) -> Result<(), StartError> {
    let reason = match (lent, builder) {
        (StatementMode::Prepared, StatementMode::Prepared)
        | (StatementMode::Unnamed, StatementMode::Unnamed) => {
            return Ok(());
        }
        (StatementMode::Prepared, StatementMode::Unnamed) => {
            "is Unnamed, but the lent pool's connections prepare their statements; build the pool with \
             connect_pool_with(…, StatementMode::Unnamed), or leave statement_mode at Prepared"
        }
        (StatementMode::Unnamed, StatementMode::Prepared) => {
            "is Prepared (the default), but the lent pool's connections send their statements unnamed; \
             set .statement_mode(StatementMode::Unnamed) so the host's own pools do too"
        }
    };
    Err(StartError::Setting { setting: "statement_mode", reason: reason.to_owned() })
}

/// The dispatcher's sessions commit asynchronously (safe for its statements only, see
/// `relayer_postgres::asynchronous_commit`).
#[cfg(feature = "dispatcher")]
fn dispatcher_session(database: &Connector) -> Connector {
    database.with_config(relayer_postgres::asynchronous_commit(database.config().clone()))
}

/// Without the dispatcher feature no plan sizes a dispatcher pool.
#[cfg(not(feature = "dispatcher"))]
fn dispatcher_session(database: &Connector) -> Connector {
    database.clone()
}

/// `database` whose sessions are named after `pool`.
fn labeled(database: &Connector, pool: &str) -> Connector {
    let mut config = database.config().clone();
    let name = pool_session_name(config.get_application_name(), pool);
    config.application_name(name);
    database.with_config(config)
}

/// `{application}/{pool}`, the application's part shortened when needed so the pool's name
/// survives PostgreSQL's cut at 63 bytes.
fn pool_session_name(application: Option<&str>, pool: &str) -> String {
    let application = application.filter(|name| !name.is_empty()).unwrap_or("relayer");
    let room = APPLICATION_NAME_BYTES.saturating_sub(pool.len() + 1);
    let mut end = application.len().min(room);
    while !application.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}/{pool}", &application[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_sessions_are_named_after_the_application_and_the_pool() {
        assert_eq!(pool_session_name(Some("orders"), "dispatcher"), "orders/dispatcher");
        assert_eq!(pool_session_name(None, "maintenance"), "relayer/maintenance");
        assert_eq!(pool_session_name(Some(""), "maintenance"), "relayer/maintenance");
        // A long application name gives way to the pool's, at a character boundary.
        let long = "é".repeat(40);
        let name = pool_session_name(Some(&long), "consumer:orders");
        assert!(name.len() <= APPLICATION_NAME_BYTES, "{name}");
        assert!(name.ends_with("é/consumer:orders"), "{name}");
    }
}
