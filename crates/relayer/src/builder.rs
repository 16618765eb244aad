//! Describing a host: [`Relayer::builder`] → transports, workers, leadership → `start`.

use std::collections::HashMap;
use std::sync::Arc;

use relayer_core::{CleanupOptions, DispatcherOptions, Namespace, SweeperOptions, Transport};
use relayer_worker::{Leadership, WorkerKind};

use crate::error::StartError;
use crate::host::RelayerHost;

/// The entry point: `Relayer::builder(config, namespace)`.
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
            options: RelayerOptions::default(),
            #[cfg(feature = "dead-letters")]
            dead_letter_policies: None,
            leadership: HashMap::new(),
            instance_id: None,
            pool_size: DEFAULT_POOL_SIZE,
            statements: relayer_postgres::StatementMode::Prepared,
            #[cfg(feature = "consumer")]
            consumers: Vec::new(),
            pool: None,
        }
    }
}

/// Connections per pool when not set: one for a pass, one spare for `dispatch_now` or the
/// other worker sharing it. A pass never needs two (LIF-2), so 1 also works.
const DEFAULT_POOL_SIZE: u32 = 2;

/// How replicas of a led worker (the sweeper, cleanup) choose the one that runs each pass
/// (LDR-5).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum LeaderElection {
    /// A row in the namespace's lease table for the worker's job, held as this instance,
    /// lasting the worker's `lease_duration` (LDR-2). The default.
    #[default]
    Lease,
    /// A PostgreSQL session advisory lock on `{worker}:{schema}.{prefix}`, held on a
    /// dedicated connection; refused once the host shuts down (LDR-3, LDR-4).
    #[cfg(feature = "advisory-lock")]
    AdvisoryLock,
    /// Any other leadership, e.g. over your own [`DistributedLock`](relayer_core::DistributedLock).
    Custom(Leadership),
}

/// The options of the workers a host runs, fixed once it starts (OPT-4). `None`: the host
/// does not run that worker (LIF-4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayerOptions {
    dispatcher: Option<DispatcherOptions>,
    sweeper: Option<SweeperOptions>,
    cleanup: Option<CleanupOptions>,
    #[cfg(feature = "dead-letters")]
    pub(crate) dead_letter: Option<relayer_core::DeadLetterOptions>,
}

impl RelayerOptions {
    /// The dispatcher's options, when the host runs one.
    pub fn dispatcher(&self) -> Option<&DispatcherOptions> {
        self.dispatcher.as_ref()
    }

    /// The recovery sweeper's options, when the host runs one.
    pub fn sweeper(&self) -> Option<&SweeperOptions> {
        self.sweeper.as_ref()
    }

    /// Retention cleanup's options, when the host runs it.
    pub fn cleanup(&self) -> Option<&CleanupOptions> {
        self.cleanup.as_ref()
    }

    /// The dead-letter policy worker's options, when the host runs it.
    #[cfg(feature = "dead-letters")]
    pub fn dead_letter(&self) -> Option<&relayer_core::DeadLetterOptions> {
        self.dead_letter.as_ref()
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
    pub(crate) options: RelayerOptions,
    #[cfg(feature = "dead-letters")]
    pub(crate) dead_letter_policies: Option<relayer_core::DeadLetterPolicies>,
    pub(crate) leadership: HashMap<WorkerKind, LeaderElection>,
    pub(crate) instance_id: Option<String>,
    pub(crate) pool_size: u32,
    pub(crate) statements: relayer_postgres::StatementMode,
    #[cfg(feature = "consumer")]
    pub(crate) consumers: Vec<crate::consumers::ConsumerSpec>,
    /// The application's pool, when it lends one (see [`RelayerBuilder::pool`]).
    pub(crate) pool: Option<relayer_postgres::PgPool>,
}

impl std::fmt::Debug for RelayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayerBuilder")
            .field("namespace", &self.namespace)
            .field("transports", &self.transports.iter().map(|t| t.name().to_owned()).collect::<Vec<_>>())
            .field("options", &self.options)
            .field("leadership", &self.leadership)
            .field("instance_id", &self.instance_id)
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
    /// namespace's queue table on this database through the host's pool.
    #[cfg(feature = "queue")]
    pub fn queue_transport(mut self) -> Self {
        self.queue_transport = true;
        self
    }

    /// Runs a dispatcher with `options` (§4, §5). Without it, this host never sends
    /// messages itself: a host that must not dispatch leaves it out (LIF-4). The sweeper
    /// also judges retries and poison by these options (the defaults when absent).
    #[cfg(feature = "dispatcher")]
    pub fn dispatcher(mut self, options: DispatcherOptions) -> Self {
        self.options.dispatcher = Some(options);
        self
    }

    /// Runs the recovery sweeper with `options` (§6), led by a lease unless
    /// [`leadership`](Self::leadership) says otherwise.
    #[cfg(feature = "sweeper")]
    pub fn sweeper(mut self, options: SweeperOptions) -> Self {
        self.options.sweeper = Some(options);
        self
    }

    /// Runs retention cleanup with `options` (§8), led by a lease unless
    /// [`leadership`](Self::leadership) says otherwise.
    #[cfg(feature = "cleanup")]
    pub fn cleanup(mut self, options: CleanupOptions) -> Self {
        self.options.cleanup = Some(options);
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
        handler: impl Into<relayer_consumer::Handling>,
    ) -> Self {
        self.consumers.push(crate::consumers::ConsumerSpec { subscription, handling: handler.into() });
        self
    }

    /// Runs the dead-letter policy worker applying `policies` (§11), one pass every 15
    /// minutes by default ([`dead_letter_options`](Self::dead_letter_options)), led by an
    /// advisory lock unless [`leadership`](Self::leadership) says otherwise (LDR-5). The
    /// policies were validated when built (DLP-1, DLP-2); [`start`](Self::start) checks them
    /// against this host's consumer subscriptions, if it has any (DLP-6), and an outbox
    /// policy's transport against its transports (OPT-5).
    #[cfg(feature = "dead-letters")]
    pub fn dead_letters(mut self, policies: relayer_core::DeadLetterPolicies) -> Self {
        self.dead_letter_policies = Some(policies);
        if self.options.dead_letter.is_none() {
            self.options.dead_letter = Some(relayer_core::DeadLetterOptions::default());
        }
        self
    }

    /// The dead-letter policy worker's options (default [`DeadLetterOptions::default`](relayer_core::DeadLetterOptions)).
    /// Only used with [`dead_letters`](Self::dead_letters).
    #[cfg(feature = "dead-letters")]
    pub fn dead_letter_options(mut self, options: relayer_core::DeadLetterOptions) -> Self {
        self.options.dead_letter = Some(options);
        self
    }

    /// Chooses how `worker` (the sweeper, cleanup or the dead-letter policies) is led; the
    /// default is a lease, and an advisory lock for the dead-letter policies. The
    /// dispatcher runs on every instance and takes no leadership.
    pub fn leadership(mut self, worker: WorkerKind, election: LeaderElection) -> Self {
        self.leadership.insert(worker, election);
        self
    }

    /// This instance's identity: lease owner and fingerprint row key, unique per running
    /// instance. Default: `{host}/{pid}/{random}`.
    pub fn instance_id(mut self, instance_id: impl Into<String>) -> Self {
        self.instance_id = Some(instance_id.into());
        self
    }

    /// Connections in each of the host's pools (the dispatcher's, and the one the sweeper,
    /// cleanup and the queue transport share). Default 2; a pass never needs more than one.
    pub fn pool_size(mut self, connections: u32) -> Self {
        self.pool_size = connections.max(1);
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

    /// Runs the sweeper, cleanup and the host's own bookkeeping (schema check, settings
    /// fingerprints) on `pool`, a pool the application already has, instead of opening one.
    ///
    /// The host only borrows connections from it: shutting the host down leaves the pool
    /// open for the application. Its connections keep the [`StatementMode`] the pool was
    /// built with. The dispatcher (its passes and its LISTEN session), the queue transport
    /// and advisory-lock sessions still connect with the builder's database: they need
    /// connections of their own (docs/connections.md says what each worker needs).
    ///
    /// [`StatementMode`]: crate::postgres::StatementMode
    pub fn pool(mut self, pool: relayer_postgres::PgPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Connects through `tls`, any tokio-postgres TLS connector, everywhere the host
    /// connects: its pools, the dispatcher's LISTEN session, queue consumers and
    /// advisory-lock sessions. The config's `sslmode` decides when TLS is used (`prefer`,
    /// the default: when the server offers it; `require`: always). With the `tls-rustls`
    /// feature, `postgres::rustls_tls` builds one, and
    /// `postgres::connector_from_url` reads a libpq
    /// URL (`sslmode=verify-full`, `sslrootcert`) into a connector to give to
    /// [`Relayer::builder`] instead.
    pub fn tls<T>(mut self, tls: T) -> Self
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send + 'static,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send + 'static,
    {
        self.database = relayer_postgres::Connector::with_tls(self.database.config().clone(), tls);
        self
    }

    /// Checks the whole setup, then starts the configured workers as tokio tasks.
    ///
    /// Checked first, in order: transport names are unique; a dispatcher or sweeper has a
    /// transport; leadership is only set for a led worker this host runs; the database
    /// answers; the namespace's schema is present and current. On any failure nothing was
    /// started and nothing was written. Then this instance records its settings
    /// fingerprints, compares them with the other live instances' (OPT-4), and starts the
    /// workers.
    pub async fn start(self) -> Result<RelayerHost, StartError> {
        RelayerHost::start(self).await
    }
}

/// A default instance id: `{host}/{pid}/{8 random hex digits}`, unique per start.
pub(crate) fn default_instance_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|name| name.trim().to_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}/{}/{}", std::process::id(), &random[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_instance_ids_are_unique_per_start_and_name_the_process() {
        let (a, b) = (default_instance_id(), default_instance_id());
        assert_ne!(a, b);
        let pid = format!("/{}/", std::process::id());
        assert!(a.contains(&pid), "{a}");
    }
}
