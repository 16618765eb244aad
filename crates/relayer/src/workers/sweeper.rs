//! The recovery sweeper, built for a host: on the maintenance pool, led as its builder
//! call says, sending as this host's dispatcher would.

use std::sync::Arc;

use relayer_delivery::SendPath;
use relayer_postgres::PgSource;
use relayer_sweeper::{LEASE_JOB, Sweeper};

use crate::fingerprints::WorkerSettings;
use crate::workers::context::WorkerContext;
use crate::workers::hosted::HostedWorkers;

/// Adds the sweeper, when the host runs one.
pub(crate) fn build(context: &WorkerContext<'_>, hosted: &mut HostedWorkers) {
    let setup = context.setup;
    let Some(led) = &setup.sweeper else {
        return;
    };
    let options = led.options();
    let leadership =
        context.electorate.leadership(led.election().clone(), LEASE_JOB, options.lease_duration());
    // The sweeper judges retries, poison and send deadlines as this host's dispatcher does.
    let send = SendPath::new(
        Arc::clone(&context.connected.transports),
        setup.dispatcher.clone().unwrap_or_default(),
    );
    let store = PgSource::new(context.connected.maintenance.clone(), &setup.namespace)
        .with_transports(context.connected.transports.names());
    let sweeper = Sweeper::new(store, setup.namespace.clone(), options.clone(), send, leadership);
    #[cfg(feature = "metrics")]
    crate::metrics::observe(relayer_worker::WorkerKind::Sweeper, sweeper.subscribe());
    let settings = WorkerSettings::new("sweeper", options.fingerprint(), &options.canonical_settings())
        .sending_through(context.connected.transports.names());
    hosted.add(sweeper, Some(settings));
}
