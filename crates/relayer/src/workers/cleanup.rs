//! Retention cleanup, built for a host: on the maintenance pool, led as its builder call
//! says.

use relayer_cleanup::{Cleanup, LEASE_JOB};
use relayer_postgres::PgSource;

use crate::fingerprints::WorkerSettings;
use crate::workers::context::WorkerContext;
use crate::workers::hosted::HostedWorkers;

/// Adds cleanup, when the host runs it.
pub(crate) fn build(context: &WorkerContext<'_>, hosted: &mut HostedWorkers) {
    let setup = context.setup;
    let Some(led) = &setup.cleanup else {
        return;
    };
    let options = led.options();
    let leadership =
        context.electorate.leadership(led.election().clone(), LEASE_JOB, options.lease_duration());
    let cleanup = Cleanup::new(
        PgSource::new(context.connected.maintenance.clone(), &setup.namespace),
        setup.namespace.clone(),
        options.clone(),
        leadership,
    );
    #[cfg(feature = "metrics")]
    crate::metrics::observe(relayer_worker::WorkerKind::Cleanup, cleanup.subscribe());
    let settings = WorkerSettings::new("cleanup", options.fingerprint(), &options.canonical_settings());
    hosted.add(cleanup, Some(settings));
}
