//! What building the workers yields: the list the host starts and stops, and what it
//! records and keeps of them.

use relayer_worker::HostedWorker;

use crate::fingerprints::WorkerSettings;

/// The workers a host runs, in the order it starts them and awaits them at shutdown, with
/// the settings it records for them (OPT-4) and the handles its API hands out.
#[derive(Default)]
pub(crate) struct HostedWorkers {
    pub(crate) workers: Vec<Box<dyn HostedWorker>>,
    pub(crate) settings: Vec<WorkerSettings>,
    /// The dispatcher, for [`RelayerHost::dispatcher`](crate::RelayerHost::dispatcher).
    #[cfg(feature = "dispatcher")]
    pub(crate) dispatcher: Option<relayer_dispatcher::Dispatcher<relayer_postgres::PgSource>>,
    /// Each pump's counters, by queue.
    #[cfg(feature = "consumer")]
    pub(crate) consumer_stats: Vec<(String, std::sync::Arc<relayer_consumer::ConsumerStats>)>,
}

impl HostedWorkers {
    /// Adds `worker`, recording `settings` for it when its replicas must agree on them.
    #[cfg_attr(
        not(any(
            feature = "dispatcher",
            feature = "sweeper",
            feature = "cleanup",
            feature = "consumer",
            feature = "dead-letters"
        )),
        allow(dead_code)
    )]
    pub(crate) fn add(&mut self, worker: impl HostedWorker, settings: Option<WorkerSettings>) {
        self.workers.push(Box::new(worker));
        self.settings.extend(settings);
    }
}
