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
    let limits = Limits::of(setup);
    let open = move |pool: String, size: u32, database: Connector, statement_timeout: Duration| {
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
            // The server ends a transaction whose client went silent, freeing its locks
            // (RES-5), but only past what a healthy one idles for: a sweep pass waits on
            // its sends, up to half its lease (TRN-5), with its page's row locks held.
            let database = setup.database.clone().with_transaction_idle_timeout(limits.maintenance_idle());
            open("maintenance".to_owned(), size, database, limits.maintenance_statement())
                .await
                .map_err(StartError::Connect)?
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
        let pool = open("queue-transport".to_owned(), size, setup.database.clone(), limits.queue_transport())
            .await
            .map_err(StartError::Connect)?;
        let queue = relayer_queue::PgQueueTransport::new(pool, &setup.namespace);
        transports.register(Arc::new(queue)).map_err(StartError::DuplicateTransport)?;
    }

    let dispatcher = match setup.pools.dispatcher {
        Some(size) => {
            let database = dispatcher_session(&setup.database);
            Some(
                open("dispatcher".to_owned(), size, database, limits.dispatcher())
                    .await
                    .map_err(StartError::Connect)?,
            )
        }
        None => None,
    };

    let mut consumers = Vec::with_capacity(setup.pools.consumers.len());
    for (queue, size) in &setup.pools.consumers {
        let pool = open(format!("consumer:{queue}"), *size, setup.database.clone(), limits.consumer(queue))
            .await
            .map_err(StartError::Connect)?;
        consumers.push((queue.clone(), pool));
    }

    Ok(Connected { maintenance, dispatcher, consumers, transports: Arc::new(transports) })
}

/// The leases, claims and visibility timeouts each pool's statements run under. Each pool's
/// bounds come from the workers using it only: a consumer's short visibility timeout must not
/// cut the maintenance pool's statements, nor its idle transactions (RES-5).
#[derive(Debug, Default)]
struct Limits {
    /// The dispatcher's claim (dispatcher and queue-transport pools).
    claim: Option<Duration>,
    /// The sweeper's lease: its passes send through the queue transport too.
    sweeper_lease: Option<Duration>,
    /// The leases of the maintenance pool's workers (sweeper, cleanup, dead letters).
    maintenance_leases: Vec<Duration>,
    /// Each consumer's visibility timeout, by queue.
    visibility: Vec<(String, Duration)>,
}

impl Limits {
    fn of(setup: &Setup) -> Self {
        let mut limits = Self {
            claim: setup.dispatcher.as_ref().map(|d| d.claim_duration()),
            sweeper_lease: setup.sweeper.as_ref().map(|s| s.options().lease_duration()),
            ..Self::default()
        };
        limits.maintenance_leases.extend(limits.sweeper_lease);
        limits.maintenance_leases.extend(setup.cleanup.as_ref().map(|c| c.options().lease_duration()));
        #[cfg(feature = "dead-letters")]
        limits
            .maintenance_leases
            .extend(setup.dead_letters.as_ref().map(|(_, led)| led.options().lease_duration()));
        #[cfg(feature = "consumer")]
        for spec in &setup.consumers {
            let queue = spec.subscription.queue().to_owned();
            limits.visibility.push((queue, spec.subscription.options().visibility_timeout()));
        }
        limits
    }

    /// The maintenance pool's statement bound: within half of each of its workers' leases.
    fn maintenance_statement(&self) -> Duration {
        statement_timeout(self.maintenance_leases.iter().copied())
    }

    /// How long a maintenance transaction may idle: the longest lease among the pool's
    /// workers, which covers a sweep pass's sends (at most half its lease) plus one statement
    /// (at most the other half); a transaction never outlives its lease anyway. At least
    /// twice the statement bound, for the host's bookkeeping when no worker is led.
    fn maintenance_idle(&self) -> Duration {
        let longest = self.maintenance_leases.iter().copied().max().unwrap_or_default();
        longest.max(self.maintenance_statement() * 2)
    }

    fn dispatcher(&self) -> Duration {
        statement_timeout(self.claim)
    }

    /// Sends of the dispatcher (under its claim) and of the sweeper (under its lease).
    #[cfg_attr(not(feature = "queue"), allow(dead_code))]
    fn queue_transport(&self) -> Duration {
        statement_timeout(self.claim.into_iter().chain(self.sweeper_lease))
    }

    fn consumer(&self, queue: &str) -> Duration {
        statement_timeout(self.visibility.iter().filter(|(q, _)| q == queue).map(|(_, v)| *v))
    }
}

/// The longest one statement waits for its answer (RES-5): the default bound, lowered to half
/// the shortest of `limits` (the leases or claims the pool's statements run under), so a
/// black-holed connection is given up well before another instance may take over its work
/// (at least 1 s).
fn statement_timeout(limits: impl IntoIterator<Item = Duration>) -> Duration {
    let bound = limits
        .into_iter()
        .map(|limit| limit / 2)
        .fold(relayer_postgres::DEFAULT_STATEMENT_TIMEOUT, Duration::min);
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
    fn each_pool_is_bounded_by_its_own_workers_and_a_sweep_may_idle_through_its_sends_res_5() {
        let secs = Duration::from_secs;
        let limits = Limits {
            claim: Some(secs(30)),
            sweeper_lease: Some(secs(30)),
            maintenance_leases: vec![secs(30), secs(60)],
            visibility: vec![("invoices".to_owned(), secs(5)), ("orders".to_owned(), secs(120))],
        };
        // A consumer's 5 s visibility bounds its own pool only.
        assert_eq!(limits.consumer("invoices"), Duration::from_millis(2500));
        assert_eq!(limits.consumer("orders"), secs(30));
        assert_eq!(limits.maintenance_statement(), secs(15));
        assert_eq!(limits.dispatcher(), secs(15));
        assert_eq!(limits.queue_transport(), secs(15));
        // A pass idles while it sends, up to half the sweeper's lease (15 s), then runs a
        // statement (15 s): the idle bound covers both, which 2 × 2.5 s once did not.
        assert_eq!(limits.maintenance_idle(), secs(60));
        assert!(limits.maintenance_idle() >= secs(30) / 2 + limits.maintenance_statement());

        let short = Limits { maintenance_leases: vec![secs(2)], ..Limits::default() };
        assert_eq!(short.maintenance_statement(), secs(1));
        assert_eq!(short.maintenance_idle(), secs(2));
        let none = Limits::default();
        assert_eq!(none.maintenance_idle(), relayer_postgres::DEFAULT_STATEMENT_TIMEOUT * 2);
    }

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
