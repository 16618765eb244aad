//! Settings fingerprints across instances (OPT-4): record ours, compare with the others'.
//!
//! Each worker's options condense into a fingerprint (`…Options::fingerprint`) and a
//! canonical `name=value;…` text. The host records both, per worker, in the namespace's
//! `instances` table, reads the rows of the other instances seen within [`LIVE_WINDOW`], and
//! turns every fingerprint that differs from ours into a [`SettingsDisagreement`] naming the
//! settings that differ. The comparison is pure ([`compare`]); the statements live in
//! `relayer_postgres::instances`.

use std::fmt;
use std::time::Duration;

use relayer_postgres::{InstanceSettings, InstanceStatements, StorageError};
use tokio_postgres::GenericClient;

/// Instances whose row was refreshed within this window count as running.
pub(crate) const LIVE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// How often a running host refreshes its rows and compares again: well inside
/// [`LIVE_WINDOW`], so a running instance never looks stopped.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// Rows not refreshed for this long belong to instances that died without a graceful
/// shutdown; they are removed at start so the table stays small.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(86_400);

/// Two instances sharing a namespace run one worker with different settings (OPT-4).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettingsDisagreement {
    /// The worker whose settings differ (`dispatcher`, `sweeper`, `cleanup`).
    pub worker: String,
    /// This instance's id.
    pub this_instance: String,
    /// The other instance's id.
    pub other_instance: String,
    /// The settings that differ, by name.
    pub differences: Vec<SettingDifference>,
}

/// One setting on which two instances differ.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettingDifference {
    /// The setting's name, as configuration writes it (`dead_retention`).
    pub setting: String,
    /// This instance's value (`None`: this instance does not know the setting).
    pub ours: Option<String>,
    /// The other instance's value (`None`: the other instance does not know the setting).
    pub theirs: Option<String>,
}

impl fmt::Display for SettingsDisagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} settings of instance {:?} differ from instance {:?}'s: ",
            self.worker, self.this_instance, self.other_instance
        )?;
        if self.differences.is_empty() {
            // Same values, different fingerprints: another relayer version renders them otherwise.
            return f.write_str("same values, different fingerprints (another relayer version?)");
        }
        for (index, difference) in self.differences.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".to_owned());
            write!(f, "{} {} vs {}", difference.setting, value(&difference.ours), value(&difference.theirs))?;
        }
        Ok(())
    }
}

/// One worker's settings as this instance records them.
#[derive(Clone, Debug)]
pub(crate) struct WorkerSettings {
    pub(crate) worker: &'static str,
    pub(crate) fingerprint: String,
    pub(crate) settings: serde_json::Value,
    /// The transports the worker sends through (TRN-6), recorded so `status` can name rows
    /// no live instance can deliver; empty for workers that send nothing.
    pub(crate) transports: Vec<String>,
}

impl WorkerSettings {
    /// From a worker's options' `fingerprint()` and `canonical_settings()`.
    #[cfg_attr(
        not(any(
            feature = "dispatcher",
            feature = "sweeper",
            feature = "cleanup",
            feature = "dead-letters"
        )),
        allow(dead_code)
    )]
    pub(crate) fn new(worker: &'static str, fingerprint: String, canonical_settings: &str) -> Self {
        WorkerSettings {
            worker,
            fingerprint,
            settings: settings_object(canonical_settings),
            transports: Vec::new(),
        }
    }

    /// The same, recording `transports` as the ones the worker sends through (TRN-6).
    #[cfg_attr(not(any(feature = "dispatcher", feature = "sweeper")), allow(dead_code))]
    pub(crate) fn sending_through<'a>(mut self, transports: impl IntoIterator<Item = &'a str>) -> Self {
        self.transports = transports.into_iter().map(str::to_owned).collect();
        self
    }
}

/// `a=1;b=2s` as the jsonb object `{"a": "1", "b": "2s"}`.
#[cfg_attr(
    not(any(feature = "dispatcher", feature = "sweeper", feature = "cleanup", feature = "dead-letters")),
    allow(dead_code)
)]
pub(crate) fn settings_object(canonical_settings: &str) -> serde_json::Value {
    serde_json::Value::Object(
        canonical_settings
            .split(';')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                (name.to_owned(), serde_json::Value::String(value.to_owned()))
            })
            .collect(),
    )
}

/// The disagreement between our `ours` and another instance's recorded row, if any.
pub(crate) fn compare(
    this_instance: &str,
    ours: &WorkerSettings,
    theirs: &InstanceSettings,
) -> Option<SettingsDisagreement> {
    if ours.fingerprint == theirs.fingerprint {
        return None;
    }
    let value = |settings: &serde_json::Value, name: &str| {
        settings.get(name).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
    };
    let mut names: Vec<&str> = [&ours.settings, &theirs.settings]
        .into_iter()
        .filter_map(serde_json::Value::as_object)
        .flat_map(|map| map.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    let differences = names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (value(&ours.settings, name), value(&theirs.settings, name));
            (a != b).then(|| SettingDifference { setting: name.to_owned(), ours: a, theirs: b })
        })
        .collect();
    Some(SettingsDisagreement {
        worker: ours.worker.to_owned(),
        this_instance: this_instance.to_owned(),
        other_instance: theirs.instance.clone(),
        differences,
    })
}

/// Records `workers` as `instance`'s settings, then compares them with the other live
/// instances'. Disagreements are returned, not logged: the caller logs the new ones.
pub(crate) async fn record_and_compare(
    client: &impl GenericClient,
    statements: &InstanceStatements,
    instance: &str,
    workers: &[WorkerSettings],
) -> Result<Vec<SettingsDisagreement>, StorageError> {
    let mut disagreements = Vec::new();
    for ours in workers {
        let transports: Vec<&str> = ours.transports.iter().map(String::as_str).collect();
        statements
            .record(client, ours.worker, instance, &ours.fingerprint, &ours.settings, &transports)
            .await?;
        for theirs in statements.others_seen_within(client, ours.worker, instance, LIVE_WINDOW).await? {
            disagreements.extend(compare(instance, ours, &theirs));
        }
    }
    Ok(disagreements)
}

#[cfg(test)]
mod tests {
    use relayer_core::{CleanupOptions, Retention, Timestamp};

    use super::*;

    fn recorded(instance: &str, options: &CleanupOptions) -> InstanceSettings {
        InstanceSettings {
            worker: "cleanup".to_owned(),
            instance: instance.to_owned(),
            fingerprint: options.fingerprint(),
            settings: settings_object(&options.canonical_settings()),
            seen_at: Timestamp::EPOCH,
        }
    }

    fn ours(options: &CleanupOptions) -> WorkerSettings {
        WorkerSettings::new("cleanup", options.fingerprint(), &options.canonical_settings())
    }

    #[test]
    fn equal_settings_agree_opt_4() {
        let options = CleanupOptions::default();
        assert_eq!(compare("a", &ours(&options), &recorded("b", &options)), None);
    }

    #[test]
    fn a_disagreement_names_the_worker_both_instances_and_each_differing_setting_opt_4() {
        let mine = CleanupOptions::default();
        let other = CleanupOptions::builder()
            .dead_retention(Retention::After(Duration::from_secs(86_400)))
            .batch_size(500)
            .build()
            .unwrap();
        let disagreement = compare("a", &ours(&mine), &recorded("b", &other)).unwrap();
        assert_eq!(disagreement.worker, "cleanup");
        assert_eq!((disagreement.this_instance.as_str(), disagreement.other_instance.as_str()), ("a", "b"));
        let settings: Vec<_> = disagreement
            .differences
            .iter()
            .map(|d| (d.setting.as_str(), d.ours.as_deref(), d.theirs.as_deref()))
            .collect();
        assert_eq!(
            settings,
            [("batch_size", Some("100"), Some("500")), ("dead_retention", Some("30d"), Some("1d"))]
        );
        assert_eq!(
            disagreement.to_string(),
            "cleanup settings of instance \"a\" differ from instance \"b\"'s: \
             batch_size 100 vs 500, dead_retention 30d vs 1d"
        );
    }

    #[test]
    fn a_setting_only_one_side_knows_is_a_difference() {
        let mine = ours(&CleanupOptions::default());
        let mut theirs = recorded("b", &CleanupOptions::default());
        theirs.fingerprint = "other".to_owned();
        theirs.settings["new_setting"] = serde_json::Value::String("5".to_owned());
        let disagreement = compare("a", &mine, &theirs).unwrap();
        assert_eq!(
            disagreement.differences,
            [SettingDifference {
                setting: "new_setting".to_owned(),
                ours: None,
                theirs: Some("5".to_owned())
            }]
        );
    }
}
