//! The dead-letter policy worker, built for a host: on the maintenance pool, led as its
//! builder call says (an advisory lock by default, LDR-5).

use relayer_dead_letters::{DeadLetterWorker, LEASE_JOB};
use relayer_postgres::PgSource;

use crate::fingerprints::WorkerSettings;
use crate::workers::context::WorkerContext;
use crate::workers::hosted::HostedWorkers;

/// Adds the policy worker, when the host runs one.
pub(crate) fn build(context: &WorkerContext<'_>, hosted: &mut HostedWorkers) {
    let setup = context.setup;
    let Some((policies, led)) = &setup.dead_letters else {
        return;
    };
    let options = led.options();
    // A lease covers the wait between passes (LDR-2): taken for interval + lease_duration.
    let leadership = context.electorate.leadership(led.election().clone(), LEASE_JOB, options.lease_hold());
    let store = PgSource::new(context.connected.maintenance.clone(), &setup.namespace);
    let worker =
        DeadLetterWorker::new(store, setup.namespace.clone(), policies.clone(), options.clone(), leadership);
    #[cfg(feature = "metrics")]
    crate::metrics::observe(relayer_worker::WorkerKind::DeadLetter, worker.subscribe());
    // The policies are part of the worker's settings: replicas must agree on them too.
    let policies = policies.fingerprint();
    let canonical = format!("{};policies={policies}", options.canonical_settings());
    let settings =
        WorkerSettings::new("dead_letter", format!("{}/{policies}", options.fingerprint()), &canonical);
    hosted.add(worker, Some(settings));
}
