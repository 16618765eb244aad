//! The dispatcher, built for a host: relayer's PostgreSQL source on its own pool
//! (asynchronous commit) and its own LISTEN session on the builder's config; every
//! instance runs it.

use std::sync::Arc;

use relayer_dispatcher::Dispatcher;
use relayer_postgres::{PgNotifications, PgSource};

use crate::error::StartError;
use crate::fingerprints::WorkerSettings;
use crate::workers::context::WorkerContext;
use crate::workers::hosted::HostedWorkers;

/// Adds the dispatcher, when the host runs one.
pub(crate) fn build(context: &WorkerContext<'_>, hosted: &mut HostedWorkers) -> Result<(), StartError> {
    let (Some(options), Some(pool)) = (&context.setup.dispatcher, &context.connected.dispatcher) else {
        return Ok(());
    };
    let setup = context.setup;
    let transports = Arc::clone(&context.connected.transports);
    // Claims read only rows of this host's transports; others wait for a host that has
    // theirs (TRN-6).
    let source = PgSource::new(pool.clone(), &setup.namespace).with_transports(transports.names());
    let dispatcher = Dispatcher::new(source, setup.namespace.clone(), options.clone(), transports)
        .map_err(StartError::Dispatcher)?
        .listening(PgNotifications::outbox(setup.database.clone(), &setup.namespace));
    #[cfg(feature = "metrics")]
    crate::metrics::observe(relayer_worker::WorkerKind::Dispatcher, dispatcher.subscribe());
    hosted.dispatcher = Some(dispatcher.clone());
    let settings = WorkerSettings::new("dispatcher", options.fingerprint(), &options.canonical_settings())
        .sending_through(context.connected.transports.names());
    hosted.add(dispatcher, Some(settings));
    Ok(())
}
