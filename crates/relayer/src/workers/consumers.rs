//! The queue consumers, built for a host: one pump per subscription, each on its own pool
//! and its own LISTEN session; every instance runs them.

use relayer_consumer::Consumer;
use relayer_postgres::{PgNotifications, PgSource};

use crate::workers::context::WorkerContext;
use crate::workers::hosted::HostedWorkers;

/// Adds a pump per subscription.
pub(crate) fn build(context: &WorkerContext<'_>, hosted: &mut HostedWorkers) {
    let setup = context.setup;
    // The connect step opened one pool per subscription, in the same order.
    for (spec, (_, pool)) in setup.consumers.iter().zip(&context.connected.consumers) {
        let consumer = Consumer::new(
            PgNotifications::queue(setup.database.clone(), &setup.namespace),
            PgSource::new(pool.clone(), &setup.namespace),
            setup.namespace.clone(),
            spec.subscription.clone(),
            spec.handling.clone(),
        );
        #[cfg(feature = "metrics")]
        crate::metrics::consumer::observe(&consumer);
        hosted.consumer_stats.push((spec.subscription.queue().to_owned(), consumer.stats()));
        // Pumps record no fingerprint: each subscription's options are its own.
        hosted.add(consumer, None);
    }
}
