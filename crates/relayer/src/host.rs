//! The running host: its hosted workers as tokio tasks, started and stopped alike (LIF-1).

use std::sync::Arc;
use std::time::Duration;

use relayer_core::{Namespace, TransportRegistry, error_chain};
use relayer_postgres::OutboxWriter;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fingerprints::SettingsDisagreement;
use crate::options::RelayerOptions;
use crate::settings_record::SettingsRecord;
use crate::workers::HostedWorkers;

const TARGET: &str = "relayer::host";

/// A started relayer: its workers run as tokio tasks until [`shutdown`](Self::shutdown).
///
/// **Shut the host down before dropping it** (and before the runtime stops): `shutdown`
/// waits for passes in flight and releases leases and locks, so another instance takes
/// over at once. Dropping a running host only cancels its workers, without waiting; their
/// leases then expire on the database clock (LIF-3).
pub struct RelayerHost {
    namespace: Namespace,
    instance_id: String,
    lease_owner: String,
    options: RelayerOptions,
    transports: Arc<TransportRegistry>,
    #[cfg(feature = "dispatcher")]
    dispatcher: Option<relayer_dispatcher::Dispatcher<relayer_postgres::PgSource>>,
    #[cfg(feature = "consumer")]
    consumer_stats: Vec<(String, Arc<relayer_consumer::ConsumerStats>)>,
    record: SettingsRecord,
    shutdown: CancellationToken,
    /// [`shutdown`](RelayerHost::shutdown)'s bound, derived from the workers' own waits.
    shutdown_bound: Duration,
    /// Held for the whole of a shutdown, so a second call waits for the first to finish.
    running: tokio::sync::Mutex<Running>,
}

/// What a shutdown has left to stop and clean.
struct Running {
    /// Each worker's task, and last the fingerprint refresh's, by name, in start order.
    tasks: Vec<(String, JoinHandle<()>)>,
    /// Whether this instance's fingerprint rows are still recorded.
    recorded: bool,
}

impl std::fmt::Debug for RelayerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayerHost")
            .field("namespace", &self.namespace)
            .field("instance_id", &self.instance_id)
            .field("options", &self.options)
            .field("transports", &self.transports)
            .finish_non_exhaustive()
    }
}

/// What a host is started with, once its workers are built and its settings recorded.
pub(crate) struct Started {
    /// Where and how the host connects (`Connector::target`: never the password).
    pub(crate) database: String,
    pub(crate) namespace: Namespace,
    pub(crate) instance_id: String,
    /// The owner this start's leases are held as.
    pub(crate) lease_owner: String,
    pub(crate) options: RelayerOptions,
    pub(crate) transports: Arc<TransportRegistry>,
    pub(crate) hosted: HostedWorkers,
    pub(crate) record: SettingsRecord,
    /// The token every worker's token is a child of (advisory locks follow it too).
    pub(crate) shutdown: CancellationToken,
    /// The default shutdown bound ([`shutdown_bound`]).
    pub(crate) shutdown_bound: Duration,
}

impl RelayerHost {
    /// Spawns each hosted worker on a task of its own, in order, then the fingerprint
    /// refresh when this instance records any.
    pub(crate) fn run(started: Started) -> RelayerHost {
        let Started {
            database,
            namespace,
            instance_id,
            lease_owner,
            options,
            transports,
            hosted,
            record,
            shutdown,
            shutdown_bound,
        } = started;
        let HostedWorkers {
            workers,
            settings: _,
            #[cfg(feature = "dispatcher")]
            dispatcher,
            #[cfg(feature = "consumer")]
            consumer_stats,
        } = hosted;
        let mut tasks: Vec<(String, JoinHandle<()>)> = Vec::with_capacity(workers.len() + 1);
        for worker in workers {
            let name = worker.describe();
            let token = shutdown.child_token();
            let described = name.clone();
            // A worker's run ends before shutdown only when it cannot start at all; failed
            // passes are retried inside it (RES-1).
            let task = tokio::spawn(async move {
                if let Err(error) = worker.run_hosted(token).await {
                    tracing::error!(target: TARGET, worker = %described, error = %error_chain(&error),
                        "a worker stopped");
                }
            });
            tasks.push((name, task));
        }
        let recorded = record.is_recorded();
        // The database with how its connections are secured (`TLS, chain and host name
        // verified against …`, `plaintext`), so an operator sees it in the first line; each
        // transport with what it declares (TRN-1), so whether a resend after a crash or a
        // late acceptance can reach consumers twice (DSP-7) is read there too.
        let declared: Vec<String> = transports
            .names()
            .filter_map(|name| transports.get(name))
            .map(|transport| {
                // User code: a panic there must not end the start (TRN-2); declare none.
                let declared =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| transport.capabilities()))
                        .unwrap_or(relayer_core::Capabilities::NONE);
                format!("{} ({declared})", transport.name())
            })
            .collect();
        tracing::info!(target: TARGET, %namespace, instance = %instance_id, %lease_owner, %database, transports = ?declared,
            workers = ?tasks.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), "relayer host started");
        if recorded {
            tasks.push((
                "fingerprints".to_owned(),
                tokio::spawn(record.clone().refresh(shutdown.child_token())),
            ));
        }
        RelayerHost {
            namespace,
            instance_id,
            lease_owner,
            options,
            transports,
            #[cfg(feature = "dispatcher")]
            dispatcher,
            #[cfg(feature = "consumer")]
            consumer_stats,
            record,
            shutdown,
            shutdown_bound,
            running: tokio::sync::Mutex::new(Running { tasks, recorded }),
        }
    }

    /// The owner this host's leases are held as in the namespace's `leases` table: the
    /// instance id, `#`, and a nonce drawn at start. Two hosts given the same instance id
    /// are still two owners, so they never both lead (LDR-2).
    pub fn lease_owner(&self) -> &str {
        &self.lease_owner
    }

    /// The options of the workers this host runs: fixed while it runs; a change means a
    /// restart (OPT-4).
    pub fn options(&self) -> &RelayerOptions {
        &self.options
    }

    /// This instance's identity (lease owner, fingerprint row key).
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The namespace this host serves.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// A writer for this namespace accepting exactly this host's transports (and, with a
    /// dispatcher, its `max_body_bytes`). Enqueue inside your own transaction (OUT-1).
    pub fn writer(&self) -> OutboxWriter {
        let writer = OutboxWriter::for_registry(&self.namespace, &self.transports);
        match self.options.dispatcher() {
            Some(dispatcher) => writer.with_max_body_bytes(dispatcher.max_body_bytes()),
            None => writer,
        }
    }

    /// A writer straight into this namespace's queue table, inside your own transaction
    /// (QUE-4): for messages to relayer's own queue in this database, without the outbox
    /// hop. Clones share the NOTIFY throttle; keep one and clone it.
    pub fn queue_writer(&self) -> relayer_postgres::QueueWriter {
        relayer_postgres::QueueWriter::new(&self.namespace, crate::writer::QUEUE_TRANSPORT)
    }

    /// The counters of the pump consuming `queue`, when this host runs one.
    #[cfg(feature = "consumer")]
    pub fn consumer_stats(&self, queue: &str) -> Option<Arc<relayer_consumer::ConsumerStats>> {
        self.consumer_stats.iter().find(|(name, _)| name == queue).map(|(_, stats)| Arc::clone(stats))
    }

    /// The dispatcher, when this host runs one: for
    /// [`dispatch_now`](relayer_dispatcher::Dispatcher::dispatch_now) after a commit, and
    /// for lane operations.
    #[cfg(feature = "dispatcher")]
    pub fn dispatcher(&self) -> Option<&relayer_dispatcher::Dispatcher<relayer_postgres::PgSource>> {
        self.dispatcher.as_ref()
    }

    /// The dead-letter API of this host's namespace (DLP-7): list, show, redrive and purge
    /// dead letters on a connection of yours, each action audited.
    pub fn dead_letter_api(&self) -> relayer_postgres::DeadLetterApi {
        relayer_postgres::DeadLetterApi::new(&self.namespace)
    }

    /// The other live instances whose settings differ from this one's, per worker, as last
    /// compared (at start, then every minute). Each is also logged at WARN when first seen.
    pub fn disagreements(&self) -> Vec<SettingsDisagreement> {
        self.record.disagreements()
    }

    /// Stops the host within [`shutdown_bound`](Self::shutdown_bound): see
    /// [`shutdown_within`](Self::shutdown_within).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(self.shutdown_bound).await
    }

    /// The bound of [`shutdown`](Self::shutdown): the longest a worker may legitimately take
    /// to stop — a consumer's `shutdown_grace` for its handlers in flight, a pass within its
    /// lease, a dispatched batch within its claim — plus [`SHUTDOWN_MARGIN`] to write the
    /// last settlements and release leases and locks; at least
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`]. A shorter bound would abandon a handler or pass that
    /// was going to finish.
    pub fn shutdown_bound(&self) -> Duration {
        self.shutdown_bound
    }

    /// Stops the host, returning within about `bound` whatever the network does (RES-5):
    /// cancels the workers, waits for each in start order to finish its passes in flight
    /// and release its lease or lock, removes this instance's fingerprint rows, and returns.
    /// A worker still running when `bound` has passed (its database silent, say) is
    /// abandoned — its task ends at once; its lease then expires on the database clock, its
    /// lock goes with its session — and named in the report and at WARN. Calling it again,
    /// or concurrently, is harmless: later calls wait for the first and do nothing. A pool
    /// the application lent stays open.
    pub async fn shutdown_within(&self, bound: Duration) -> ShutdownReport {
        let mut running = self.running.lock().await;
        self.shutdown.cancel();
        let deadline = Instant::now() + bound;
        let mut report = ShutdownReport::default();
        for (worker, mut task) in running.tasks.drain(..) {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::error!(target: TARGET, %worker, %error, "a worker task ended abnormally");
                }
                Err(_) => {
                    task.abort();
                    tracing::warn!(target: TARGET, %worker, ?bound,
                        "a worker did not stop within the shutdown bound: abandoned (its lease expires, \
                         its lock goes with its session)");
                    report.abandoned.push(worker);
                }
            }
        }
        if running.recorded {
            running.recorded = false;
            // Rows left behind stop counting as live after ten minutes anyway.
            let left = deadline.saturating_duration_since(Instant::now()).max(FORGET_AT_LEAST);
            if tokio::time::timeout(left, self.record.forget()).await.is_err() {
                tracing::warn!(target: TARGET, instance = %self.instance_id,
                    "could not remove this instance's fingerprint rows within the shutdown bound");
                report.abandoned.push("fingerprints".to_owned());
            }
            tracing::info!(target: TARGET, namespace = %self.namespace, instance = %self.instance_id,
                abandoned = ?report.abandoned, "relayer host stopped");
        }
        report
    }
}

/// The least time [`RelayerHost::shutdown`] waits for the workers before it abandons them
/// (RES-5); longer when a worker's own waits need it ([`RelayerHost::shutdown_bound`]).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// What [`RelayerHost::shutdown`] gives beyond the longest wait of a worker: writing a
/// consumer's last settlements, releasing leases and locks (each a bounded statement).
pub const SHUTDOWN_MARGIN: Duration = Duration::from_secs(5);

/// The default shutdown bound for workers whose longest waits at shutdown are `waits`
/// (see [`RelayerHost::shutdown_bound`]).
pub(crate) fn shutdown_bound(waits: impl IntoIterator<Item = Duration>) -> Duration {
    waits.into_iter().max().map_or(DEFAULT_SHUTDOWN_TIMEOUT, |longest| {
        longest.saturating_add(SHUTDOWN_MARGIN).max(DEFAULT_SHUTDOWN_TIMEOUT)
    })
}

/// The least time given to removing the fingerprint rows, even past the shutdown bound.
const FORGET_AT_LEAST: Duration = Duration::from_secs(1);

/// What a [`RelayerHost::shutdown`] could not finish in its bound.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// The workers (as the host's logs name them: `dispatcher`, `consumer:orders` …) that
    /// were still running at the bound and were abandoned, in start order; `fingerprints`
    /// when this instance's rows could not be removed in time. Empty: a clean stop.
    pub abandoned: Vec<String>,
}

impl ShutdownReport {
    /// Whether every worker stopped gracefully in time.
    pub fn is_clean(&self) -> bool {
        self.abandoned.is_empty()
    }
}

impl Drop for RelayerHost {
    fn drop(&mut self) {
        // Not awaited: shutdown() is the graceful path. This only stops the tasks.
        self.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shutdown_bound_covers_the_longest_wait_of_a_worker_plus_a_margin_res_5() {
        let secs = Duration::from_secs;
        // Defaults: a consumer's 30 s grace and a 30 s lease outlast the old fixed 20 s.
        assert_eq!(shutdown_bound([secs(30), secs(30)]), secs(35));
        assert_eq!(shutdown_bound([secs(30), secs(120)]), secs(125));
        // Short waits keep the floor; no worker at all too.
        assert_eq!(shutdown_bound([secs(2)]), DEFAULT_SHUTDOWN_TIMEOUT);
        assert_eq!(shutdown_bound([]), DEFAULT_SHUTDOWN_TIMEOUT);
    }
}
