//! The first step of a start: every check of the whole setup that needs no database
//! (OPT-5). Pure: it connects to nothing, so a refused setup has started and written
//! nothing. Each error names the setting, worker or transport at fault.

use std::sync::Arc;

use relayer_core::{
    CleanupOptions, DispatcherOptions, DuplicateTransport, Namespace, SweeperOptions, TransportRegistry,
};
use relayer_postgres::{PgPool, StatementMode};

use crate::builder::RelayerBuilder;
use crate::error::StartError;
use crate::leader_election::Led;
use crate::options::RelayerOptions;
use crate::pool_sizes::{PoolDemand, PoolPlan};

/// A host's setup that passed every check needing no database: what connecting and
/// building the workers read.
pub(crate) struct Setup {
    /// Where and how every connection of the host is made.
    pub(crate) database: relayer_postgres::Connector,
    pub(crate) namespace: Namespace,
    pub(crate) instance_id: String,
    pub(crate) statements: StatementMode,
    pub(crate) dispatcher: Option<DispatcherOptions>,
    pub(crate) sweeper: Option<Led<SweeperOptions>>,
    pub(crate) cleanup: Option<Led<CleanupOptions>>,
    #[cfg(feature = "dead-letters")]
    pub(crate) dead_letters: Option<(relayer_core::DeadLetterPolicies, Led<relayer_core::DeadLetterOptions>)>,
    /// The application's transports; relayer's queue transport joins them once its pool is
    /// open.
    pub(crate) transports: TransportRegistry,
    #[cfg(feature = "consumer")]
    pub(crate) consumers: Vec<crate::consumers::ConsumerSpec>,
    /// The size of each pool the host opens.
    pub(crate) pools: PoolPlan,
    /// The application's pool, lent for the maintenance work.
    pub(crate) lent_pool: Option<PgPool>,
    /// The most connections the maintenance work holds at once: one per led worker
    /// (sweeper, cleanup, dead-letter policies) and one for the bookkeeping.
    pub(crate) maintenance_connections: u32,
}

/// Checks `builder`'s whole setup for the instance `instance_id` (the builder's, or the
/// default, made by the caller since it reads the host name), in order: the instance id;
/// transport names are unique;
/// a worker that sends has a transport; options that must fit together do (TRN-5); one
/// subscription per queue; dead-letter policies fit the subscriptions and transports
/// (DLP-6); every pool size set fits a pool the host opens.
pub(crate) fn validate(builder: RelayerBuilder, instance_id: String) -> Result<Setup, StartError> {
    let RelayerBuilder {
        database,
        namespace,
        transports,
        #[cfg(feature = "queue")]
        queue_transport,
        dispatcher,
        sweeper,
        cleanup,
        #[cfg(feature = "dead-letters")]
        dead_letters,
        // Resolved by the caller.
        instance_id: _,
        pool_sizes,
        statements,
        #[cfg(feature = "consumer")]
        consumers,
        pool,
        tls_conflict,
    } = builder;
    #[cfg(not(feature = "queue"))]
    let queue_transport = false;

    if instance_id.trim().is_empty() {
        return Err(StartError::EmptyInstanceId);
    }
    if tls_conflict {
        return Err(StartError::Setting {
            setting: "tls",
            reason: "the config's sslmode=disable forbids TLS, but .tls(…) gives a TLS connector: drop \
                     sslmode=disable (TLS is then required on every connection) or drop .tls(…)"
                .to_owned(),
        });
    }

    let transports = registry(transports, queue_transport)?;
    check_senders(&transports, queue_transport, dispatcher.as_ref(), sweeper.as_ref().map(Led::options))?;

    #[cfg(feature = "consumer")]
    crate::consumers::check(&consumers)?;

    #[cfg(feature = "dead-letters")]
    if let Some((policies, _)) = &dead_letters {
        #[cfg(feature = "consumer")]
        let subscriptions = crate::consumers::queues(&consumers);
        #[cfg(not(feature = "consumer"))]
        let subscriptions = Vec::new();
        let mut names: Vec<&str> = transports.names().collect();
        if queue_transport {
            names.push(crate::writer::QUEUE_TRANSPORT);
        }
        crate::dead_letters_setup::check_dead_letter_setup(policies, &subscriptions, &names)?;
    }

    #[cfg(feature = "dead-letters")]
    let dead_letter_policies = dead_letters.is_some();
    #[cfg(not(feature = "dead-letters"))]
    let dead_letter_policies = false;
    let demand = PoolDemand {
        dispatcher_concurrency: dispatcher.as_ref().map(DispatcherOptions::concurrency),
        sweeper: sweeper.is_some(),
        led_workers: [sweeper.is_some(), cleanup.is_some(), dead_letter_policies]
            .into_iter()
            .map(u32::from)
            .sum(),
        queue_transport,
        lent_maintenance: pool.is_some(),
        #[cfg(feature = "consumer")]
        consumers: crate::consumers::demand(&consumers),
        #[cfg(not(feature = "consumer"))]
        consumers: Vec::new(),
    };
    let pools = PoolPlan::new(&demand, pool_sizes)?;

    Ok(Setup {
        database,
        namespace,
        instance_id,
        statements,
        dispatcher,
        sweeper,
        cleanup,
        #[cfg(feature = "dead-letters")]
        dead_letters,
        transports,
        #[cfg(feature = "consumer")]
        consumers,
        pools,
        lent_pool: pool,
        maintenance_connections: demand.led_workers.saturating_add(1),
    })
}

impl Setup {
    /// The options of the workers the host runs, as
    /// [`RelayerHost::options`](crate::RelayerHost::options) reports them.
    pub(crate) fn options(&self) -> RelayerOptions {
        RelayerOptions {
            dispatcher: self.dispatcher.clone(),
            sweeper: self.sweeper.as_ref().map(|led| led.options().clone()),
            cleanup: self.cleanup.as_ref().map(|led| led.options().clone()),
            #[cfg(feature = "dead-letters")]
            dead_letter: self.dead_letters.as_ref().map(|(_, led)| led.options().clone()),
        }
    }
}

/// The application's transports under unique names, none named as relayer's queue
/// transport when that is registered too.
fn registry(
    transports: Vec<Arc<dyn relayer_core::Transport>>,
    queue_transport: bool,
) -> Result<TransportRegistry, StartError> {
    let mut registry = TransportRegistry::new();
    for transport in transports {
        registry.register(transport).map_err(StartError::DuplicateTransport)?;
    }
    if queue_transport && registry.contains(crate::writer::QUEUE_TRANSPORT) {
        let name = crate::writer::QUEUE_TRANSPORT.to_owned();
        return Err(StartError::DuplicateTransport(DuplicateTransport(name)));
    }
    Ok(registry)
}

/// A worker that sends needs a transport; the sweeper sends with the dispatcher's options,
/// whose send deadline must fit inside its lease (TRN-5).
fn check_senders(
    transports: &TransportRegistry,
    queue_transport: bool,
    dispatcher: Option<&DispatcherOptions>,
    sweeper: Option<&SweeperOptions>,
) -> Result<(), StartError> {
    if transports.is_empty() && !queue_transport {
        let senders: Vec<&str> = [dispatcher.map(|_| "dispatcher"), sweeper.map(|_| "recovery sweeper")]
            .into_iter()
            .flatten()
            .collect();
        if !senders.is_empty() {
            return Err(StartError::NoTransport { workers: senders.join(" and ") });
        }
    }
    if let Some(sweeper) = sweeper {
        let sends = dispatcher.cloned().unwrap_or_default();
        sends.check_fits_sweeper(sweeper).map_err(StartError::Options)?;
    }
    Ok(())
}
