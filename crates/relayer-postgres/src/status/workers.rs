//! Leases, instances, settings disagreements (OPT-4) and each worker's last successful pass.
//!
//! The database holds no pass log, so the last successful pass is *derived*, and the
//! snapshot says from what ([`LastPassSource`]):
//!
//! - a worker led by a **lease** (the sweeper and cleanup by default, `leases.job`)
//!   renews its lease in the transaction of every pass it leads, idle or not, so
//!   `leases.renewed_at` is the end of its last successful led pass;
//! - any other worker (the dispatcher, which runs everywhere; dead-letter policies led by an
//!   advisory lock) only shows its *instance heartbeat*: the host refreshes
//!   `instances.seen_at` every minute while it runs. That proves the process is alive, not
//!   that its passes succeed — its logs and metrics (`relayer_worker_seconds_since_last_success`)
//!   say that.
//!
//! A worker is flagged *stalled* when that evidence is older than [`stalled_after`] its
//! pass interval (read from the settings its live instances recorded), or, without a known
//! interval, older than three heartbeats.

use std::collections::BTreeMap;
use std::time::Duration;

use relayer_core::Namespace;
use relayer_core::duration::parse_duration;
use tokio_postgres::GenericClient;

use super::elapsed::{duration_from_micros, micros_since};
use crate::error::{StorageError, column};

/// Instances seen within this window count as running (as the host's own comparison).
const LIVE_WINDOW: &str = "10 minutes";
/// How often a running host refreshes `instances.seen_at`.
const HEARTBEAT: Duration = Duration::from_secs(60);

/// One lease row.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStatus {
    /// The job (`sweeper`, `cleanup`, `dead_letters`).
    pub job: String,
    /// The holder: an instance id.
    pub owner: String,
    /// The term, growing with each new holder (LDR-6).
    pub term: i64,
    /// Since the holder took it.
    pub held_for: Duration,
    /// Since its last renewal: the end of the holder's last led pass.
    pub since_renewal: Duration,
    /// Microseconds until it expires; negative once expired.
    pub expires_in_micros: i64,
}

impl LeaseStatus {
    /// Whether the lease is still live.
    pub fn live(&self) -> bool {
        self.expires_in_micros > 0
    }
}

/// One live instance's record for one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceStatus {
    /// The worker.
    pub worker: String,
    /// The instance id.
    pub instance: String,
    /// The fingerprint of its settings.
    pub fingerprint: String,
    /// Its settings, name → value.
    pub settings: BTreeMap<String, String>,
    /// Since its last heartbeat.
    pub since_seen: Duration,
    /// Since it started.
    pub running_for: Duration,
    /// The transports it registers for this worker (TRN-6; empty for a worker that sends
    /// nothing, or an instance of a relayer before schema version 3).
    pub transports: Vec<String>,
}

/// A worker whose live instances recorded different settings (OPT-4).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Disagreement {
    /// The worker.
    pub worker: String,
    /// The settings whose values differ between its instances.
    pub settings: Vec<String>,
    /// Instances per fingerprint.
    pub groups: Vec<(String, Vec<String>)>,
}

/// What a worker's last successful pass is derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastPassSource {
    /// `leases.renewed_at`: renewed by every led pass.
    Lease,
    /// `instances.seen_at`: the host's heartbeat, not a pass.
    InstanceHeartbeat,
}

impl LastPassSource {
    /// `lease` or `heartbeat`.
    pub fn name(self) -> &'static str {
        match self {
            LastPassSource::Lease => "lease",
            LastPassSource::InstanceHeartbeat => "heartbeat",
        }
    }
}

/// A worker's last successful pass, as the database shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerPass {
    /// The worker (`sweeper`, `cleanup`, `dead_letter`, `dispatcher`).
    pub worker: String,
    /// Where [`since`](Self::since) comes from.
    pub source: LastPassSource,
    /// Since the last successful pass (or heartbeat).
    pub since: Duration,
    /// The pass interval its live instances recorded, if known.
    pub interval: Option<Duration>,
    /// Whether it is older than the stall threshold.
    pub stalled: bool,
    /// Instances running it.
    pub instances: usize,
}

/// The age past which a worker with pass `interval` counts as stalled: three missed passes,
/// and never less than three heartbeats (an idle leader renews only on its next pass).
pub fn stalled_after(interval: Option<Duration>) -> Duration {
    let floor = 3 * HEARTBEAT;
    interval.map_or(floor, |interval| (3 * interval).max(floor))
}

/// The lease job of each led worker, and the setting naming its pass interval.
fn worker_of_job(job: &str) -> &str {
    match job {
        "dead_letters" => "dead_letter",
        other => other,
    }
}

fn interval_setting(worker: &str) -> Option<&'static str> {
    match worker {
        "sweeper" => Some("sweep_interval"),
        "cleanup" => Some("cleanup_interval"),
        "dead_letter" => Some("interval"),
        "dispatcher" => Some("poll_interval"),
        _ => None,
    }
}

pub(super) async fn leases(
    client: &impl GenericClient,
    namespace: &Namespace,
) -> Result<Vec<LeaseStatus>, StorageError> {
    let sql = format!(
        "SELECT job, owner, term, {held}, {renewed}, (extract(epoch FROM expires_at - now()) * 1e6)::int8 \
         FROM {} ORDER BY job",
        namespace.table("leases"),
        held = micros_since("acquired_at"),
        renewed = micros_since("renewed_at"),
    );
    let rows = client
        .query(&sql, &[])
        .await
        .map_err(|e| StorageError::database(format!("reading the leases of {namespace}"), e))?;
    rows.iter()
        .map(|r| {
            Ok(LeaseStatus {
                job: column(r, 0, "the leases")?,
                owner: column(r, 1, "the leases")?,
                term: column(r, 2, "the leases")?,
                held_for: duration_from_micros(column(r, 3, "the leases")?),
                since_renewal: duration_from_micros(column(r, 4, "the leases")?),
                expires_in_micros: column(r, 5, "the leases")?,
            })
        })
        .collect()
}

pub(super) async fn instances(
    client: &impl GenericClient,
    namespace: &Namespace,
    schema_version: i32,
) -> Result<Vec<InstanceStatus>, StorageError> {
    // The column arrived with schema version 3 (TRN-6).
    let transports = if schema_version >= 3 { "transports" } else { "'{}'::text[]" };
    // Index: instances_pkey; the table holds a handful of rows per running instance.
    let sql = format!(
        "SELECT worker, instance, fingerprint, settings, {seen}, {started}, {transports} FROM {} \
         WHERE seen_at > now() - interval '{LIVE_WINDOW}' ORDER BY worker, instance",
        namespace.table("instances"),
        seen = micros_since("seen_at"),
        started = micros_since("started_at"),
    );
    let rows = client
        .query(&sql, &[])
        .await
        .map_err(|e| StorageError::database(format!("reading the instances of {namespace}"), e))?;
    rows.iter()
        .map(|r| {
            let settings: serde_json::Value = column(r, 3, "the instances")?;
            let settings = settings
                .as_object()
                .map(|object| {
                    object
                        .iter()
                        .map(|(name, value)| {
                            let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                            (name.clone(), value)
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(InstanceStatus {
                worker: column(r, 0, "the instances")?,
                instance: column(r, 1, "the instances")?,
                fingerprint: column(r, 2, "the instances")?,
                settings,
                since_seen: duration_from_micros(column(r, 4, "the instances")?),
                running_for: duration_from_micros(column(r, 5, "the instances")?),
                transports: column(r, 6, "the instances")?,
            })
        })
        .collect()
}

/// Workers whose live instances recorded more than one fingerprint, naming the settings
/// that differ.
pub(crate) fn disagreements(instances: &[InstanceStatus]) -> Vec<Disagreement> {
    let mut by_worker: BTreeMap<&str, Vec<&InstanceStatus>> = BTreeMap::new();
    for instance in instances {
        by_worker.entry(&instance.worker).or_default().push(instance);
    }
    let mut found = Vec::new();
    for (worker, rows) in by_worker {
        let mut groups: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for row in &rows {
            groups.entry(&row.fingerprint).or_default().push(row.instance.clone());
        }
        if groups.len() < 2 {
            continue;
        }
        let mut settings: Vec<String> = rows
            .iter()
            .flat_map(|row| row.settings.keys())
            .filter(|name| {
                let first = rows[0].settings.get(*name);
                rows.iter().any(|row| row.settings.get(*name) != first)
            })
            .cloned()
            .collect();
        settings.sort();
        settings.dedup();
        found.push(Disagreement {
            worker: worker.to_owned(),
            settings,
            groups: groups.into_iter().map(|(print, names)| (print.to_owned(), names)).collect(),
        });
    }
    found
}

/// Each worker's last successful pass: from its lease when it has one, else from the
/// heartbeat of its live instances.
pub(super) fn last_passes(leases: &[LeaseStatus], instances: &[InstanceStatus]) -> Vec<WorkerPass> {
    let interval_of = |worker: &str| {
        let setting = interval_setting(worker)?;
        instances
            .iter()
            .filter(|i| i.worker == worker)
            .filter_map(|i| i.settings.get(setting).and_then(|v| parse_duration(v).ok()))
            .min()
    };
    let running = |worker: &str| instances.iter().filter(|i| i.worker == worker).count();
    let mut passes: Vec<WorkerPass> = leases
        .iter()
        .map(|lease| {
            let worker = worker_of_job(&lease.job);
            let interval = interval_of(worker);
            WorkerPass {
                worker: worker.to_owned(),
                source: LastPassSource::Lease,
                since: lease.since_renewal,
                interval,
                stalled: lease.since_renewal > stalled_after(interval),
                instances: running(worker),
            }
        })
        .collect();
    let mut heartbeats: BTreeMap<&str, Duration> = BTreeMap::new();
    for instance in instances {
        let since = heartbeats.entry(&instance.worker).or_insert(instance.since_seen);
        *since = (*since).min(instance.since_seen);
    }
    for (worker, since) in heartbeats {
        if passes.iter().any(|p| p.worker == worker) {
            continue;
        }
        passes.push(WorkerPass {
            worker: worker.to_owned(),
            source: LastPassSource::InstanceHeartbeat,
            since,
            interval: interval_of(worker),
            stalled: since > stalled_after(None),
            instances: running(worker),
        });
    }
    passes.sort_by(|a, b| a.worker.cmp(&b.worker));
    passes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(worker: &str, name: &str, interval: &str, since_seen: u64) -> InstanceStatus {
        InstanceStatus {
            worker: worker.to_owned(),
            instance: name.to_owned(),
            fingerprint: format!("fp-{interval}"),
            settings: [("sweep_interval".to_owned(), interval.to_owned())].into_iter().collect(),
            since_seen: Duration::from_secs(since_seen),
            running_for: Duration::from_secs(600),
            transports: Vec::new(),
        }
    }

    fn lease(job: &str, since_renewal: u64) -> LeaseStatus {
        LeaseStatus {
            job: job.to_owned(),
            owner: "a".to_owned(),
            term: 1,
            held_for: Duration::from_secs(600),
            since_renewal: Duration::from_secs(since_renewal),
            expires_in_micros: 0,
        }
    }

    #[test]
    fn a_lease_renewed_within_three_intervals_is_not_stalled_obs_2() {
        let instances = [instance("sweeper", "a", "2m", 5)];
        let fresh = last_passes(&[lease("sweeper", 300)], &instances);
        assert_eq!(fresh[0].source, LastPassSource::Lease);
        assert_eq!(fresh[0].interval, Some(Duration::from_secs(120)));
        assert!(!fresh[0].stalled);
        let stale = last_passes(&[lease("sweeper", 361)], &instances);
        assert!(stale[0].stalled, "{stale:?}");
    }

    #[test]
    fn workers_without_a_lease_are_judged_by_their_heartbeat_obs_2() {
        let instances = [instance("dispatcher", "a", "1s", 30), instance("dispatcher", "b", "1s", 200)];
        let passes = last_passes(&[], &instances);
        assert_eq!(passes.len(), 1);
        assert_eq!(passes[0].source, LastPassSource::InstanceHeartbeat);
        assert_eq!(passes[0].since, Duration::from_secs(30));
        assert!(!passes[0].stalled);
        assert_eq!(passes[0].instances, 2);
    }

    #[test]
    fn differing_fingerprints_name_the_differing_settings_opt_4() {
        let instances = [instance("sweeper", "a", "5s", 1), instance("sweeper", "b", "10s", 1)];
        let found = disagreements(&instances);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].settings, ["sweep_interval"]);
        assert_eq!(found[0].groups.len(), 2);
        assert!(disagreements(&instances[..1]).is_empty());
    }
}
