//! The dispatcher, built for a host: its own pool (asynchronous commit) and its own LISTEN
//! session on the builder's config; every instance runs it.

use std::sync::Arc;

use relayer_dispatcher::Dispatcher;

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
    let dispatcher = Dispatcher::new(
        pool.clone(),
        setup.namespace.clone(),
        options.clone(),
        Arc::clone(&context.connected.transports),
    )
    .map_err(StartError::Dispatcher)?
    .listening(setup.database.clone());
    #[cfg(feature = "metrics")]
    crate::metrics::observe(relayer_worker::WorkerKind::Dispatcher, dispatcher.subscribe());
    hosted.dispatcher = Some(dispatcher.clone());
    let settings = WorkerSettings::new("dispatcher", options.fingerprint(), &options.canonical_settings());
    hosted.add(dispatcher, Some(settings));
    Ok(())
}
