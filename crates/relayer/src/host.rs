//! The running host: starts the configured workers as tokio tasks, and stops them (LIF-1).

use std::sync::{Arc, Mutex, PoisonError};
#[cfg(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters"))]
use std::time::Duration;

use relayer_core::{Namespace, TransportRegistry};
use relayer_postgres::{InstanceStatements, OutboxWriter, PgPool, connect_pool_with, verify_schema};
#[cfg(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters"))]
use relayer_worker::Leadership;
use relayer_worker::WorkerKind;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[cfg(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters"))]
use crate::builder::LeaderElection;
use crate::builder::{RelayerBuilder, RelayerOptions, default_instance_id};
use crate::error::StartError;
use crate::fingerprints::{
    FORGET_AFTER, REFRESH_INTERVAL, SettingsDisagreement, WorkerSettings, record_and_compare,
};

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
    options: RelayerOptions,
    transports: Arc<TransportRegistry>,
    #[cfg(feature = "dispatcher")]
    dispatcher: Option<relayer_dispatcher::Dispatcher>,
    pool: PgPool,
    #[cfg(feature = "consumer")]
    consumer_stats: Vec<(String, Arc<relayer_consumer::ConsumerStats>)>,
    instances: InstanceStatements,
    disagreements: Arc<Mutex<Vec<SettingsDisagreement>>>,
    shutdown: CancellationToken,
    /// Held for the whole of a shutdown, so a second call waits for the first to finish.
    running: tokio::sync::Mutex<Running>,
}

/// What a shutdown has left to stop and clean.
struct Running {
    tasks: Vec<(&'static str, JoinHandle<()>)>,
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

impl RelayerHost {
    pub(crate) async fn start(builder: RelayerBuilder) -> Result<RelayerHost, StartError> {
        let RelayerBuilder {
            database,
            namespace,
            transports,
            #[cfg(feature = "queue")]
            queue_transport,
            #[cfg_attr(not(feature = "dead-letters"), allow(unused_mut))]
            mut options,
            #[cfg(feature = "dead-letters")]
            dead_letter_policies,
            leadership,
            instance_id,
            pool_size,
            statements,
            #[cfg(feature = "consumer")]
            consumers,
            pool,
        } = builder;
        #[cfg(feature = "dead-letters")]
        if dead_letter_policies.is_none() {
            // Options without policies run nothing.
            options.dead_letter = None;
        }

        // Whole-setup checks that need no database come first (OPT-5).
        let instance_id = instance_id.unwrap_or_else(default_instance_id);
        if instance_id.trim().is_empty() {
            return Err(StartError::EmptyInstanceId);
        }
        let mut registry = TransportRegistry::new();
        for transport in transports {
            registry.register(transport).map_err(StartError::DuplicateTransport)?;
        }
        #[cfg(feature = "queue")]
        if queue_transport && registry.contains(relayer_queue::DEFAULT_NAME) {
            let name = relayer_queue::DEFAULT_NAME.to_owned();
            return Err(StartError::DuplicateTransport(relayer_core::DuplicateTransport(name)));
        }
        #[cfg(feature = "queue")]
        let has_transport = !registry.is_empty() || queue_transport;
        #[cfg(not(feature = "queue"))]
        let has_transport = !registry.is_empty();
        if !has_transport {
            let senders: Vec<&str> =
                [options.dispatcher().map(|_| "dispatcher"), options.sweeper().map(|_| "recovery sweeper")]
                    .into_iter()
                    .flatten()
                    .collect();
            if !senders.is_empty() {
                return Err(StartError::NoTransport { workers: senders.join(" and ") });
            }
        }
        if let Some(sweeper) = options.sweeper() {
            // The sweeper sends with the dispatcher's options: their send deadline must fit
            // inside its lease (TRN-5).
            let sends = options.dispatcher().cloned().unwrap_or_default();
            sends.check_fits_sweeper(sweeper).map_err(StartError::Options)?;
        }
        for worker in leadership.keys() {
            let runs = match worker {
                WorkerKind::Sweeper => options.sweeper().is_some(),
                WorkerKind::Cleanup => options.cleanup().is_some(),
                #[cfg(feature = "dead-letters")]
                WorkerKind::DeadLetter => dead_letter_policies.is_some(),
                _ => {
                    return Err(StartError::Leadership {
                        worker: *worker,
                        reason: "which is not led: only the sweeper, cleanup and dead-letter policies take leadership",
                    });
                }
            };
            if !runs {
                return Err(StartError::Leadership {
                    worker: *worker,
                    reason: "which this host does not run",
                });
            }
        }

        #[cfg(feature = "consumer")]
        crate::consumers::check(&consumers)?;

        // Then the database: reachable, schema present and current (NS-3).
        let pool = match pool {
            Some(lent) => lent,
            None => connect_pool_with(database.clone(), pool_size, statements)
                .await
                .map_err(StartError::Connect)?,
        };
        {
            let connection = pool.get().await.map_err(StartError::Pool)?;
            verify_schema(&**connection, &namespace).await.map_err(StartError::Schema)?;
        }
        #[cfg(feature = "queue")]
        if queue_transport {
            // Its own pool: a sweeper pass sends while it holds a connection of the host pool
            // in its transaction, and a pass must never wait for a second connection of the
            // pool it holds one of (LIF-2) — with one shared connection it would wait forever.
            let queue_pool = connect_pool_with(database.clone(), pool_size, statements)
                .await
                .map_err(StartError::Connect)?;
            let queue = relayer_queue::PgQueueTransport::new(queue_pool, &namespace);
            registry.register(Arc::new(queue)).map_err(StartError::DuplicateTransport)?;
        }
        let transports = Arc::new(registry);
        #[cfg(feature = "dead-letters")]
        if let Some(policies) = &dead_letter_policies {
            // DLP-6: the consumer subscriptions of this host, as (queue, dead-letter queue,
            // invalid-message queue). A host without consumers checks the policies alone
            // (their consumers run in other processes).
            #[cfg(feature = "consumer")]
            let subscriptions: Vec<relayer_core::SubscriptionQueues> = consumers
                .iter()
                .map(|spec| {
                    let queues = &spec.subscription;
                    let entry = relayer_core::SubscriptionQueues::new(
                        queues.queue(),
                        Some(queues.dead_letter_queue()),
                    );
                    match queues.invalid_message_queue() {
                        Some(invalid) => entry.with_invalid_message_queue(invalid),
                        None => entry,
                    }
                })
                .collect();
            #[cfg(not(feature = "consumer"))]
            let subscriptions: Vec<relayer_core::SubscriptionQueues> = Vec::new();
            crate::dead_letters_setup::check_dead_letter_setup(policies, &subscriptions, &transports)?;
        }

        // Build every worker before starting any, so a refusal starts nothing.
        let shutdown = CancellationToken::new();
        #[cfg(feature = "dispatcher")]
        let dispatcher = match options.dispatcher() {
            Some(dispatcher_options) => {
                // Its own pool, committing asynchronously (safe for its statements only, see
                // `asynchronous_commit`), and its own LISTEN connection.
                let dispatch_pool = connect_pool_with(
                    database.with_config(relayer_dispatcher::asynchronous_commit(database.config().clone())),
                    pool_size,
                    statements,
                )
                .await
                .map_err(StartError::Connect)?;
                let dispatcher = relayer_dispatcher::Dispatcher::new(
                    dispatch_pool,
                    namespace.clone(),
                    dispatcher_options.clone(),
                    Arc::clone(&transports),
                )
                .map_err(StartError::Dispatcher)?;
                Some(dispatcher.listening(database.clone()))
            }
            None => None,
        };
        #[cfg(feature = "sweeper")]
        let sweeper = options.sweeper().map(|sweeper_options| {
            let election = leadership.get(&WorkerKind::Sweeper).cloned().unwrap_or_default();
            let leadership = led_by(
                election,
                relayer_sweeper::LEASE_JOB,
                &instance_id,
                sweeper_options.lease_duration(),
                &database,
                &namespace,
                &shutdown,
            );
            // The sweeper judges retries, poison and send deadlines as this host's
            // dispatcher does.
            let send = relayer_delivery::SendPath::new(
                Arc::clone(&transports),
                options.dispatcher().cloned().unwrap_or_default(),
            );
            relayer_sweeper::Sweeper::new(
                pool.clone(),
                namespace.clone(),
                sweeper_options.clone(),
                send,
                leadership,
            )
        });
        #[cfg(feature = "cleanup")]
        let cleanup = options.cleanup().map(|cleanup_options| {
            let election = leadership.get(&WorkerKind::Cleanup).cloned().unwrap_or_default();
            let leadership = led_by(
                election,
                relayer_cleanup::LEASE_JOB,
                &instance_id,
                cleanup_options.lease_duration(),
                &database,
                &namespace,
                &shutdown,
            );
            relayer_cleanup::Cleanup::new(
                pool.clone(),
                namespace.clone(),
                cleanup_options.clone(),
                leadership,
            )
        });

        #[cfg(feature = "consumer")]
        let consumers = crate::consumers::build(consumers, &database, &namespace, statements).await?;
        #[cfg(feature = "consumer")]
        let consumer_stats = crate::consumers::stats(&consumers);
        #[cfg(feature = "dead-letters")]
        let dead_letters = match (options.dead_letter(), dead_letter_policies) {
            (Some(dead_letter_options), Some(policies)) => {
                // Advisory lock by default (LDR-5).
                let election =
                    leadership.get(&WorkerKind::DeadLetter).cloned().unwrap_or(LeaderElection::AdvisoryLock);
                let leadership = led_by(
                    election,
                    relayer_dead_letters::LEASE_JOB,
                    &instance_id,
                    dead_letter_options.lease_duration(),
                    &database,
                    &namespace,
                    &shutdown,
                );
                Some(relayer_dead_letters::DeadLetterWorker::new(
                    pool.clone(),
                    namespace.clone(),
                    policies,
                    dead_letter_options.clone(),
                    leadership,
                ))
            }
            _ => None,
        };

        // OPT-4: record this instance's settings and compare with the other live instances'.
        let worker_settings = worker_settings(
            &options,
            #[cfg(feature = "dead-letters")]
            dead_letters.as_ref().map(relayer_dead_letters::DeadLetterWorker::policies),
        );
        let instances = InstanceStatements::new(&namespace);
        let mut disagreements = Vec::new();
        if !worker_settings.is_empty() {
            let connection = pool.get().await.map_err(StartError::Pool)?;
            if let Err(error) = instances.forget_unseen_for(&**connection, FORGET_AFTER).await {
                // Only housekeeping: the comparison below does not depend on it.
                tracing::debug!(target: TARGET, %error, "could not remove long-unseen instances");
            }
            disagreements = record_and_compare(&**connection, &instances, &instance_id, &worker_settings)
                .await
                .map_err(StartError::Fingerprints)?;
            for disagreement in &disagreements {
                warn_disagreement(&namespace, disagreement);
            }
        }
        let disagreements = Arc::new(Mutex::new(disagreements));

        #[cfg(feature = "metrics")]
        observe_workers(
            #[cfg(feature = "dispatcher")]
            dispatcher.as_ref(),
            #[cfg(feature = "sweeper")]
            sweeper.as_ref(),
            #[cfg(feature = "cleanup")]
            cleanup.as_ref(),
            #[cfg(feature = "dead-letters")]
            dead_letters.as_ref(),
        );

        // Everything checked: start the workers.
        let mut tasks: Vec<(&'static str, JoinHandle<()>)> = Vec::new();
        #[cfg(feature = "dispatcher")]
        if let Some(dispatcher) = dispatcher.clone() {
            let token = shutdown.child_token();
            tasks.push((
                "dispatcher",
                tokio::spawn(async move {
                    if let Err(error) = dispatcher.run(token).await {
                        tracing::error!(target: TARGET, error = %relayer_core::error_chain(&error), "the dispatcher stopped");
                    }
                }),
            ));
        }
        #[cfg(feature = "sweeper")]
        if let Some(sweeper) = sweeper {
            let token = shutdown.child_token();
            // It never ends before shutdown: a database that is down or lost its schema
            // fails passes, retried with backoff (RES-1).
            tasks.push(("sweeper", tokio::spawn(sweeper.run(token))));
        }
        #[cfg(feature = "cleanup")]
        if let Some(cleanup) = cleanup {
            let token = shutdown.child_token();
            tasks.push(("cleanup", tokio::spawn(cleanup.run(token))));
        }
        #[cfg(feature = "consumer")]
        for consumer in consumers {
            let token = shutdown.child_token();
            tasks.push((
                "consumer",
                tokio::spawn(async move {
                    let queue = consumer.subscription().queue().to_owned();
                    if let Err(error) = consumer.run(token).await {
                        tracing::error!(target: TARGET, %queue, error = %relayer_core::error_chain(&error), "a queue consumer stopped");
                    }
                }),
            ));
        }
        #[cfg(feature = "dead-letters")]
        if let Some(dead_letters) = dead_letters {
            let token = shutdown.child_token();
            tasks.push((
                "dead_letters",
                tokio::spawn(async move {
                    if let Err(error) = dead_letters.run(token).await {
                        tracing::error!(target: TARGET, error = %relayer_core::error_chain(&error), "the dead-letter policies stopped");
                    }
                }),
            ));
        }
        if !worker_settings.is_empty() {
            let refresh = refresh_fingerprints(
                pool.clone(),
                instances.clone(),
                namespace.clone(),
                instance_id.clone(),
                worker_settings,
                Arc::clone(&disagreements),
                shutdown.child_token(),
            );
            tasks.push(("fingerprints", tokio::spawn(refresh)));
        }
        let recorded = tasks.iter().any(|(name, _)| *name == "fingerprints");
        tracing::info!(target: TARGET, %namespace, instance = %instance_id, transports = ?transports,
            workers = ?tasks.iter().map(|(name, _)| *name).filter(|name| *name != "fingerprints").collect::<Vec<_>>(),
            "relayer host started");

        Ok(RelayerHost {
            namespace,
            instance_id,
            options,
            transports,
            #[cfg(feature = "dispatcher")]
            dispatcher,
            pool,
            #[cfg(feature = "consumer")]
            consumer_stats,
            instances,
            disagreements,
            shutdown,
            running: tokio::sync::Mutex::new(Running { tasks, recorded }),
        })
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
        #[cfg(feature = "dispatcher")]
        if let Some(dispatcher) = &self.dispatcher {
            return dispatcher.writer();
        }
        OutboxWriter::for_registry(&self.namespace, &self.transports)
    }

    /// A writer straight into this namespace's queue table, inside your own transaction
    /// (QUE-4): for messages to relayer's own queue in this database, without the outbox
    /// hop. Clones share the NOTIFY throttle; keep one and clone it.
    pub fn queue_writer(&self) -> relayer_postgres::QueueWriter {
        relayer_postgres::QueueWriter::new(&self.namespace, "queue")
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
    pub fn dispatcher(&self) -> Option<&relayer_dispatcher::Dispatcher> {
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
        self.disagreements.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops the host: cancels the workers, waits for passes in flight to finish, releases
    /// leases and locks, removes this instance's fingerprint rows, and returns. Calling it
    /// again, or concurrently, is harmless: later calls wait for the first and do nothing.
    pub async fn shutdown(&self) {
        let mut running = self.running.lock().await;
        self.shutdown.cancel();
        for (worker, task) in running.tasks.drain(..) {
            if let Err(error) = task.await {
                tracing::error!(target: TARGET, worker, %error, "a worker task ended abnormally");
            }
        }
        if running.recorded {
            running.recorded = false;
            let forgotten = match self.pool.get().await {
                Ok(connection) => self
                    .instances
                    .forget_instance(&**connection, &self.instance_id)
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(error.to_string()),
            };
            if let Err(cause) = forgotten {
                // The rows fade out of comparisons once unseen for a while.
                tracing::warn!(target: TARGET, instance = %self.instance_id, %cause,
                    "could not remove this instance's fingerprint rows");
            }
            tracing::info!(target: TARGET, namespace = %self.namespace, instance = %self.instance_id,
                "relayer host stopped");
        }
    }
}

impl Drop for RelayerHost {
    fn drop(&mut self) {
        // Not awaited: shutdown() is the graceful path. This only stops the tasks.
        self.shutdown.cancel();
    }
}

/// The leadership `election` stands for, for the worker leasing `job`.
#[cfg(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters"))]
fn led_by(
    election: LeaderElection,
    job: &str,
    instance_id: &str,
    lease_duration: Duration,
    #[allow(unused_variables)] database: &relayer_postgres::Connector,
    #[allow(unused_variables)] namespace: &Namespace,
    #[allow(unused_variables)] shutdown: &CancellationToken,
) -> Leadership {
    match election {
        LeaderElection::Lease => Leadership::lease(job, instance_id, lease_duration),
        #[cfg(feature = "advisory-lock")]
        LeaderElection::AdvisoryLock => {
            // Lock sessions connect as every other connection of the host: with its TLS.
            let config = database.config().clone();
            let lock: Arc<dyn relayer_core::DistributedLock> = match database.tls() {
                None => Arc::new(
                    relayer_advisory_lock::PgAdvisoryLock::new(config).with_shutdown(shutdown.clone()),
                ),
                Some(tls) => Arc::new(
                    relayer_advisory_lock::PgAdvisoryLock::with_tls(config, tls.clone())
                        .with_shutdown(shutdown.clone()),
                ),
            };
            Leadership::Advisory(lock, format!("{job}:{}.{}", namespace.schema(), namespace.prefix()))
        }
        LeaderElection::Custom(leadership) => leadership,
    }
}

/// The settings this instance records, per worker it runs.
fn worker_settings(
    options: &RelayerOptions,
    #[cfg(feature = "dead-letters")] dead_letter_policies: Option<&relayer_core::DeadLetterPolicies>,
) -> Vec<WorkerSettings> {
    let mut settings = Vec::new();
    if let Some(o) = options.dispatcher() {
        settings.push(WorkerSettings::new("dispatcher", o.fingerprint(), &o.canonical_settings()));
    }
    if let Some(o) = options.sweeper() {
        settings.push(WorkerSettings::new("sweeper", o.fingerprint(), &o.canonical_settings()));
    }
    if let Some(o) = options.cleanup() {
        settings.push(WorkerSettings::new("cleanup", o.fingerprint(), &o.canonical_settings()));
    }
    #[cfg(feature = "dead-letters")]
    if let (Some(o), Some(policies)) = (options.dead_letter(), dead_letter_policies) {
        // The policies are part of the worker's settings: replicas must agree on them too.
        let policies = policies.fingerprint();
        let canonical = format!("{};policies={policies}", o.canonical_settings());
        settings.push(WorkerSettings::new(
            "dead_letter",
            format!("{}/{policies}", o.fingerprint()),
            &canonical,
        ));
    }
    settings
}

fn warn_disagreement(namespace: &Namespace, disagreement: &SettingsDisagreement) {
    let differing: Vec<&str> = disagreement.differences.iter().map(|d| d.setting.as_str()).collect();
    tracing::warn!(target: TARGET, %namespace, worker = %disagreement.worker,
        instance = %disagreement.this_instance, other_instance = %disagreement.other_instance,
        settings = ?differing, "instances sharing a namespace disagree on settings (OPT-4): {disagreement}");
}

/// Refreshes this instance's rows every [`REFRESH_INTERVAL`] so it keeps counting as live,
/// and compares again, logging disagreements not seen before.
async fn refresh_fingerprints(
    pool: PgPool,
    instances: InstanceStatements,
    namespace: Namespace,
    instance_id: String,
    workers: Vec<WorkerSettings>,
    disagreements: Arc<Mutex<Vec<SettingsDisagreement>>>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(REFRESH_INTERVAL) => {}
        }
        let compared = match pool.get().await {
            Ok(connection) => record_and_compare(&**connection, &instances, &instance_id, &workers)
                .await
                .map_err(|e| relayer_core::error_chain(&e)),
            Err(error) => Err(error.to_string()),
        };
        match compared {
            Ok(current) => {
                let mut known = disagreements.lock().unwrap_or_else(PoisonError::into_inner);
                for disagreement in current.iter().filter(|d| !known.contains(d)) {
                    warn_disagreement(&namespace, disagreement);
                }
                *known = current;
            }
            // The next refresh tries again; rows stay live for ten minutes.
            Err(cause) => tracing::warn!(target: TARGET, instance = %instance_id, %cause,
                "could not refresh this instance's fingerprint rows"),
        }
    }
}

/// Subscribes the metrics recorder to each worker's events before it starts (OBS-2).
#[cfg(feature = "metrics")]
fn observe_workers(
    #[cfg(feature = "dispatcher")] dispatcher: Option<&relayer_dispatcher::Dispatcher>,
    #[cfg(feature = "sweeper")] sweeper: Option<&relayer_sweeper::Sweeper>,
    #[cfg(feature = "cleanup")] cleanup: Option<&relayer_cleanup::Cleanup>,
    #[cfg(feature = "dead-letters")] dead_letters: Option<&relayer_dead_letters::DeadLetterWorker>,
) {
    #[cfg(feature = "dispatcher")]
    if let Some(dispatcher) = dispatcher {
        crate::metrics::observe(WorkerKind::Dispatcher, dispatcher.subscribe());
    }
    #[cfg(feature = "sweeper")]
    if let Some(sweeper) = sweeper {
        crate::metrics::observe(WorkerKind::Sweeper, sweeper.subscribe());
    }
    #[cfg(feature = "cleanup")]
    if let Some(cleanup) = cleanup {
        crate::metrics::observe(WorkerKind::Cleanup, cleanup.subscribe());
    }
    #[cfg(feature = "dead-letters")]
    if let Some(dead_letters) = dead_letters {
        crate::metrics::observe(WorkerKind::DeadLetter, dead_letters.subscribe());
    }
}
