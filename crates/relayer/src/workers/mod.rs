//! The third step of a start: building the hosted workers, each in its own file, into the
//! list the host starts and stops alike. Every worker is built before any starts, so a
//! refusal starts nothing.

mod context;
mod hosted;

#[cfg(feature = "cleanup")]
mod cleanup;
#[cfg(feature = "consumer")]
mod consumers;
#[cfg(feature = "dead-letters")]
mod dead_letters;
#[cfg(feature = "dispatcher")]
mod dispatcher;
#[cfg(feature = "sweeper")]
mod sweeper;

pub(crate) use context::WorkerContext;
pub(crate) use hosted::HostedWorkers;

use crate::error::StartError;

/// The host's workers, in the order they start (and are awaited at shutdown).
#[cfg_attr(not(feature = "dispatcher"), allow(clippy::unnecessary_wraps))]
#[cfg_attr(
    not(any(
        feature = "dispatcher",
        feature = "sweeper",
        feature = "cleanup",
        feature = "consumer",
        feature = "dead-letters"
    )),
    allow(unused_variables)
)]
pub(crate) fn build(context: &WorkerContext<'_>) -> Result<HostedWorkers, StartError> {
    #[cfg_attr(
        not(any(
            feature = "dispatcher",
            feature = "sweeper",
            feature = "cleanup",
            feature = "consumer",
            feature = "dead-letters"
        )),
        allow(unused_mut)
    )]
    let mut hosted = HostedWorkers::default();
    #[cfg(feature = "dispatcher")]
    dispatcher::build(context, &mut hosted)?;
    #[cfg(feature = "sweeper")]
    sweeper::build(context, &mut hosted);
    #[cfg(feature = "cleanup")]
    cleanup::build(context, &mut hosted);
    #[cfg(feature = "consumer")]
    consumers::build(context, &mut hosted);
    #[cfg(feature = "dead-letters")]
    dead_letters::build(context, &mut hosted);
    Ok(hosted)
}
