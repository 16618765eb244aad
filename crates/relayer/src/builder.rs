//! Describing a host: [`Relayer::builder`] → transports, workers (each led worker with its
//! election), pools → [`start`](RelayerBuilder::start), which is in `start.rs`.

use std::sync::Arc;

use relayer_core::{CleanupOptions, DispatcherOptions, Namespace, SweeperOptions, Transport};

use crate::leader_election::Led;
use crate::pool_sizes::PoolSizes;

/// The entry point: `Relayer::builder(database, namespace)`.
#[derive(Clone, Copy, Debug)]
pub struct Relayer;

impl Relayer {
    /// Describes a host on `database` for `namespace`: a `tokio_postgres::Config` (plain
    /// connections unless [`tls`](RelayerBuilder::tls) is set) or a
    /// [`Connector`](crate::postgres::Connector). It runs no worker until one is added: add
    /// transports and workers, then [`start`](RelayerBuilder::start).
    pub fn builder(database: impl Into<relayer_postgres::Connector>, namespace: Namespace) -> RelayerBuilder {
        RelayerBuilder {
            database: database.into(),
            namespace,
            transports: Vec::new(),
            #[cfg(feature = "queue")]
            queue_transport: false,
            dispatcher: None,
            sweeper: None,
            cleanup: None,
            #[cfg(feature = "dead-letters")]
            dead_letters: None,
            instance_id: None,
            pool_sizes: PoolSizes::default(),
            statements: relayer_postgres::StatementMode::Prepared,
            #[cfg(feature = "consumer")]
            consumers: Vec::new(),
            pool: None,
            tls_conflict: false,
        }
    }
}

/// Describes a host; [`start`](Self::start) checks the whole setup and starts it.
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct RelayerBuilder {
    /// Where and how every connection of the host is made.
    pub(crate) database: relayer_postgres::Connector,
    pub(crate) namespace: Namespace,
    pub(crate) transports: Vec<Arc<dyn Transport>>,
    #[cfg(feature = "queue")]
    pub(crate) queue_transport: bool,
    pub(crate) dispatcher: Option<DispatcherOptions>,
    pub(crate) sweeper: Option<Led<SweeperOptions>>,
    pub(crate) cleanup: Option<Led<CleanupOptions>>,
    #[cfg(feature = "dead-letters")]
    pub(crate) dead_letters: Option<(relayer_core::DeadLetterPolicies, Led<relayer_core::DeadLetterOptions>)>,
    pub(crate) instance_id: Option<String>,
    pub(crate) pool_sizes: PoolSizes,
    pub(crate) statements: relayer_postgres::StatementMode,
    #[cfg(feature = "consumer")]
    pub(crate) consumers: Vec<crate::consumers::ConsumerSpec>,
    /// The application's pool, when it lends one (see [`RelayerBuilder::pool`]).
    pub(crate) pool: Option<relayer_postgres::PgPool>,
    /// `.tls(…)` on a config with `sslmode=disable`: `start` refuses it.
    pub(crate) tls_conflict: bool,
}

impl std::fmt::Debug for RelayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("RelayerBuilder");
        debug
            .field("namespace", &self.namespace)
            .field("transports", &self.transports.iter().map(|t| t.name().to_owned()).collect::<Vec<_>>())
            .field("dispatcher", &self.dispatcher)
            .field("sweeper", &self.sweeper)
            .field("cleanup", &self.cleanup);
        #[cfg(feature = "dead-letters")]
        debug.field("dead_letters", &self.dead_letters);
        debug
            .field("instance_id", &self.instance_id)
            .field("pool_sizes", &self.pool_sizes)
            .finish_non_exhaustive()
    }
}

impl RelayerBuilder {
    /// Registers `transport` under its own name. Names must be unique; a duplicate is
    /// reported by [`start`](Self::start).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transports.push(transport);
        self
    }

    /// Registers relayer's PostgreSQL queue transport as `"queue"`, writing to this
    /// namespace's queue table on this database through a pool of its own.
    #[cfg(feature = "queue")]
    pub fn queue_transport(mut self) -> Self {
        self.queue_transport = true;
        self
    }

    /// Runs a dispatcher with `options` (§4, §5), on every instance (it takes no
    /// leadership: replicas are kept apart row by row). Without it, this host never sends
    /// messages itself: a host that must not dispatch leaves it out (LIF-4). The sweeper
    /// also judges retries and poison by these options (the defaults when absent).
    #[cfg(feature = "dispatcher")]
    pub fn dispatcher(mut self, options: DispatcherOptions) -> Self {
        self.dispatcher = Some(options);
        self
    }

    /// Runs the recovery sweeper (§6), on one instance at a time: `options` alone lead it by
    /// a lease, [`Led::new`]`(options, election)` by another [`LeaderElection`](crate::LeaderElection).
    #[cfg(feature = "sweeper")]
    pub fn sweeper(mut self, options: impl Into<Led<SweeperOptions>>) -> Self {
        self.sweeper = Some(options.into());
        self
    }

    /// Runs retention cleanup (§8), on one instance at a time: `options` alone lead it by a
    /// lease, [`Led::new`]`(options, election)` by another [`LeaderElection`](crate::LeaderElection).
    #[cfg(feature = "cleanup")]
    pub fn cleanup(mut self, options: impl Into<Led<CleanupOptions>>) -> Self {
        self.cleanup = Some(options.into());
        self
    }

    /// Runs a pump of `subscription` with `handler` (§10): a plain
    /// [`Handler`](relayer_consumer::Handler) (`Arc::new(MyHandler)`) or an inbox-wrapped one
    /// (`Handling::Inbox(Arc::new(MyInboxHandler))`, QUE-3). One subscription per queue per
    /// host; every instance runs its pumps (replicas share the queue through `SKIP LOCKED`).
    #[cfg(feature = "consumer")]
    pub fn consumer(
        mut self,
        subscription: relayer_consumer::Subscription,
        handler: impl Into<relayer_consumer::Handling<relayer_postgres::PgSession>>,
    ) -> Self {
        self.consumers.push(crate::consumers::ConsumerSpec { subscription, handling: handler.into() });
        self
    }

    /// Runs the dead-letter policy worker applying `policies` (§11) with `options` (one pass
    /// every 15 minutes by default), on one instance at a time: `options` alone lead it by
    /// an advisory lock (LDR-5), [`Led::new`]`(options, election)` by another
    /// [`LeaderElection`](crate::LeaderElection). The policies were validated when built
    /// (DLP-1, DLP-2); [`start`](Self::start) checks them against this host's consumer
    /// subscriptions, if it has any (DLP-6), and an outbox policy's transport against its
    /// transports (OPT-5).
    #[cfg(feature = "dead-letters")]
    pub fn dead_letters(
        mut self,
        policies: relayer_core::DeadLetterPolicies,
        options: impl Into<Led<relayer_core::DeadLetterOptions>>,
    ) -> Self {
        self.dead_letters = Some((policies, options.into()));
        self
    }

    /// This instance's identity: fingerprint row key and the start of its lease owner
    /// (`{instance_id}#{nonce}`, a nonce drawn per start, so two processes given the same id
    /// never both lead; see [`RelayerHost::lease_owner`](crate::RelayerHost::lease_owner)).
    /// Default: `{host}/{pid}/{random}`.
    pub fn instance_id(mut self, instance_id: impl Into<String>) -> Self {
        self.instance_id = Some(instance_id.into());
        self
    }

    /// Connections in the dispatcher's pool. Default: its `concurrency` + 2 — one per pass
    /// loop (the unordered loops and the lane loop) and one for `dispatch_now` and lane
    /// operations. Fewer works (LIF-2): the loops then take turns.
    #[cfg(feature = "dispatcher")]
    pub fn dispatcher_pool_size(mut self, connections: u32) -> Self {
        self.pool_sizes.dispatcher = Some(connections);
        self
    }

    /// Connections in the maintenance pool — the sweeper's, cleanup's and the dead-letter
    /// policies' passes, and the host's bookkeeping (schema check, settings fingerprints).
    /// Default: one per led worker the host runs, plus one. 1 works (LIF-2): the passes
    /// then take turns. Not with [`pool`](Self::pool), whose size is the application's.
    pub fn maintenance_pool_size(mut self, connections: u32) -> Self {
        self.pool_sizes.maintenance = Some(connections);
        self
    }

    /// Connections in the queue transport's pool. Default: one per pass that may send at
    /// once (each dispatcher connection's, and the sweeper's).
    #[cfg(feature = "queue")]
    pub fn queue_pool_size(mut self, connections: u32) -> Self {
        self.pool_sizes.queue_transport = Some(connections);
        self
    }

    /// Whether the host's pools prepare their statements (default
    /// [`StatementMode::Prepared`](crate::postgres::StatementMode::Prepared)). Choose
    /// [`StatementMode::Unnamed`](crate::postgres::StatementMode::Unnamed) behind a
    /// transaction-mode pooler that does not track prepared statements (PgBouncer before
    /// 1.21, or without `max_prepared_statements`).
    pub fn statement_mode(mut self, statements: relayer_postgres::StatementMode) -> Self {
        self.statements = statements;
        self
    }

    /// Runs the maintenance work — the sweeper, cleanup, the dead-letter policies and the
    /// host's bookkeeping (schema check, settings fingerprints) — on `pool`, a pool the
    /// application already has, instead of opening a maintenance pool.
    ///
    /// The host only borrows connections from it: shutting the host down leaves the pool
    /// open for the application. It holds at most one connection per led worker (sweeper,
    /// cleanup, dead-letter policies) plus one for its bookkeeping at once, e.g. 3 for the
    /// sweeper and cleanup; a pool whose `max_size` is smaller is logged at WARN once, at
    /// start (the passes then wait for each other and for the application). Size it for
    /// that plus what the application holds. Its connections keep the [`StatementMode`] the
    /// pool was built with, which must be the builder's
    /// [`statement_mode`](Self::statement_mode): [`start`](Self::start) refuses a
    /// contradiction. The dispatcher (its passes and its LISTEN session), the queue
    /// transport, the consumers and advisory-lock sessions still connect with the builder's
    /// database: they need connections of their own (docs/connections.md says what each
    /// worker needs).
    ///
    /// [`StatementMode`]: crate::postgres::StatementMode
    pub fn pool(mut self, pool: relayer_postgres::PgPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Connects through `tls`, any tokio-postgres TLS connector, everywhere the host
    /// connects: its pools, the dispatcher's LISTEN session, queue consumers and
    /// advisory-lock sessions. TLS given here is required on every connection: the config's
    /// `sslmode=prefer` (the default, which would go on in plaintext when the server, or a
    /// man in the middle, declines TLS) is raised to `require`, and `sslmode=disable` makes
    /// [`start`](Self::start) refuse the setup, naming both. With the `tls-rustls` feature,
    /// `postgres::rustls_tls` builds one, and `postgres::connector_from_url` reads a libpq
    /// URL (`sslmode=verify-full`, `sslrootcert`) into a connector to give to
    /// [`Relayer::builder`] instead.
    pub fn tls<T>(mut self, tls: T) -> Self
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send + 'static,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send + 'static,
    {
        match relayer_postgres::Connector::with_tls(self.database.config().clone(), tls) {
            Ok(database) => {
                self.database = database;
                self.tls_conflict = false;
            }
            Err(_conflict) => self.tls_conflict = true,
        }
        self
    }
}
