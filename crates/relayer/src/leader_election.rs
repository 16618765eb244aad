//! How each led worker — the recovery sweeper, retention cleanup, the dead-letter policies —
//! elects the replica that runs its passes (LDR-5), given with the worker itself.
//!
//! A led worker's builder method takes a [`Led`] of its own options type, so a leadership
//! can only be given to a worker that is led, and only together with it: there is no
//! separate per-kind setting that could name a worker the host does not run, or one that
//! runs on every instance (the dispatcher, the consumers).
// With no led worker compiled in, no election is ever turned into a leadership.
#![cfg_attr(not(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters")), allow(dead_code))]

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use relayer_core::{CleanupOptions, DistributedLock, Namespace, SweeperOptions};
use relayer_worker::Leadership;
use tokio_util::sync::CancellationToken;

/// How replicas of a led worker choose the one that runs each pass (LDR-5).
#[derive(Clone)]
#[non_exhaustive]
pub enum LeaderElection {
    /// A row in the namespace's lease table for the worker's job, held as this instance,
    /// lasting the worker's `lease_duration` (LDR-2). The default of the sweeper and cleanup.
    Lease,
    /// A PostgreSQL session advisory lock on `{job}:{schema}.{prefix}`, held on a
    /// dedicated connection; refused once the host shuts down (LDR-3, LDR-4). The default of
    /// the dead-letter policies.
    #[cfg(feature = "advisory-lock")]
    AdvisoryLock,
    /// Your own [`DistributedLock`] (a lock service, a lease in another store), taken on the
    /// same resource, `{job}:{schema}.{prefix}`.
    Lock(Arc<dyn DistributedLock>),
}

impl fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderElection::Lease => f.write_str("Lease"),
            #[cfg(feature = "advisory-lock")]
            LeaderElection::AdvisoryLock => f.write_str("AdvisoryLock"),
            LeaderElection::Lock(_) => f.write_str("Lock(..)"),
        }
    }
}

/// A led worker's options and how its leader is elected: what
/// [`sweeper`](crate::RelayerBuilder::sweeper), [`cleanup`](crate::RelayerBuilder::cleanup)
/// and [`dead_letters`](crate::RelayerBuilder::dead_letters) take.
///
/// The options alone convert into one with the worker's default election (a lease for the
/// sweeper and cleanup, an advisory lock for the dead-letter policies):
///
/// ```no_run
/// # async fn example(config: relayer::tokio_postgres::Config) -> Result<(), relayer::StartError> {
/// use relayer::{CleanupOptions, LeaderElection, Led, Namespace, Relayer, SweeperOptions};
///
/// let host = Relayer::builder(config, Namespace::default())
///     .queue_transport()
///     .sweeper(SweeperOptions::default()) // led by a lease
///     .cleanup(Led::new(CleanupOptions::default(), LeaderElection::AdvisoryLock))
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
///
/// A worker that runs on every instance takes no election — this does not compile:
///
/// ```compile_fail,E0308
/// # fn example(config: relayer::tokio_postgres::Config) {
/// use relayer::{DispatcherOptions, LeaderElection, Led, Namespace, Relayer};
///
/// let _ = Relayer::builder(config, Namespace::default())
///     .dispatcher(Led::new(DispatcherOptions::default(), LeaderElection::AdvisoryLock));
/// # }
/// ```
///
/// nor does one worker's election given to another:
///
/// ```compile_fail,E0277
/// # fn example(config: relayer::tokio_postgres::Config) {
/// use relayer::{LeaderElection, Led, Namespace, Relayer, SweeperOptions};
///
/// let _ = Relayer::builder(config, Namespace::default())
///     .cleanup(Led::new(SweeperOptions::default(), LeaderElection::Lease));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Led<O> {
    options: O,
    election: LeaderElection,
}

impl<O> Led<O> {
    /// `options`, led by `election`.
    pub fn new(options: O, election: LeaderElection) -> Self {
        Led { options, election }
    }

    /// The worker's options.
    pub fn options(&self) -> &O {
        &self.options
    }

    /// How the worker's leader is elected.
    pub fn election(&self) -> &LeaderElection {
        &self.election
    }
}

impl From<SweeperOptions> for Led<SweeperOptions> {
    /// Led by a lease (LDR-5).
    fn from(options: SweeperOptions) -> Self {
        Led::new(options, LeaderElection::Lease)
    }
}

impl From<CleanupOptions> for Led<CleanupOptions> {
    /// Led by a lease (LDR-5).
    fn from(options: CleanupOptions) -> Self {
        Led::new(options, LeaderElection::Lease)
    }
}

#[cfg(feature = "dead-letters")]
impl From<relayer_core::DeadLetterOptions> for Led<relayer_core::DeadLetterOptions> {
    /// Led by an advisory lock (LDR-5).
    fn from(options: relayer_core::DeadLetterOptions) -> Self {
        Led::new(options, LeaderElection::AdvisoryLock)
    }
}

/// Where a led worker runs: what turning an election into its [`Leadership`] needs.
pub(crate) struct Electorate<'a> {
    /// This start's lease owner: the instance id with a per-start nonce (`instance_id::lease_owner`).
    pub(crate) lease_owner: &'a str,
    #[cfg_attr(not(feature = "advisory-lock"), allow(dead_code))]
    pub(crate) database: &'a relayer_postgres::Connector,
    pub(crate) namespace: &'a Namespace,
    /// The host's shutdown: an advisory lock refuses to lock once it is cancelled (LDR-4).
    #[cfg_attr(not(feature = "advisory-lock"), allow(dead_code))]
    pub(crate) shutdown: &'a CancellationToken,
}

impl Electorate<'_> {
    /// The leadership `election` stands for, for the worker leasing `job` for
    /// `lease_duration`.
    pub(crate) fn leadership(
        &self,
        election: LeaderElection,
        job: &str,
        lease_duration: Duration,
    ) -> Leadership {
        let resource = || format!("{job}:{}.{}", self.namespace.schema(), self.namespace.prefix());
        match election {
            LeaderElection::Lease => Leadership::lease(job, self.lease_owner, lease_duration),
            #[cfg(feature = "advisory-lock")]
            LeaderElection::AdvisoryLock => {
                // Lock sessions connect as every other connection of the host: with its TLS.
                let config = self.database.config().clone();
                let lock: Arc<dyn relayer_core::DistributedLock> = match self.database.tls() {
                    None => Arc::new(
                        relayer_advisory_lock::PgAdvisoryLock::new(config)
                            .with_shutdown(self.shutdown.clone()),
                    ),
                    Some(tls) => {
                        // The connector's sslmode is `prefer` with TLS only when the URL
                        // asked for it (`sslmode=prefer`, or libpq's default with no
                        // sslmode and no CA file): its pools may fall back, so may its lock
                        // sessions. Otherwise TLS stays required.
                        let prefer = config.get_ssl_mode() == tokio_postgres::config::SslMode::Prefer;
                        let lock = relayer_advisory_lock::PgAdvisoryLock::with_tls(config, tls.clone());
                        let lock = if prefer { lock.allow_plaintext_fallback() } else { lock };
                        Arc::new(lock.with_shutdown(self.shutdown.clone()))
                    }
                };
                Leadership::Advisory(lock, resource())
            }
            LeaderElection::Lock(lock) => Leadership::Advisory(lock, resource()),
        }
    }
}
