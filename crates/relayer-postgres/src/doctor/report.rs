//! What a doctor's run yields — [`Finding`]s of a [`Severity`] gathered in a [`Report`] — and
//! the thresholds ([`DoctorOptions`]) and helpers its checks judge by.

use std::fmt;
use std::time::Duration;

use relayer_core::duration::HumanDuration;
use serde_json::{Value, json};

use crate::error::StorageError;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Checked, and nothing to do.
    Ok,
    /// Worth acting on soon: it costs throughput, disk or attention, and grows.
    Warning,
    /// Act now: messages are not moving, or the database is being hurt.
    Critical,
}

impl Severity {
    /// `ok`, `warning` or `critical`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// The exit status `relayer doctor` ends with: 0, 1 or 2.
    pub fn exit_code(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Critical => 2,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One thing the doctor saw.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// What kind of finding, stable across releases (`xmin.session`, `lanes.parked`, …):
    /// docs/operations.md has a section for each.
    pub code: &'static str,
    /// What it is about: `pid 4242`, `slot standby_a`, `table relayer_queue`, `lane order-7`.
    pub subject: String,
    /// What was seen, with the figures.
    pub message: String,
    /// What to do about it (empty for an `Ok` finding with nothing to advise).
    pub advice: String,
}

impl Finding {
    pub(crate) fn new(
        severity: Severity,
        code: &'static str,
        subject: impl Into<String>,
        message: impl Into<String>,
        advice: impl Into<String>,
    ) -> Finding {
        Finding { severity, code, subject: subject.into(), message: message.into(), advice: advice.into() }
    }

    /// The finding as JSON: `severity`, `code`, `subject`, `message`, `advice`.
    pub fn to_json(&self) -> Value {
        json!({
            "severity": self.severity.name(),
            "code": self.code,
            "subject": self.subject,
            "message": self.message,
            "advice": self.advice,
        })
    }
}

/// Everything the doctor found, in check order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The namespace examined, as `schema.prefix`.
    pub namespace: String,
    /// The findings, in check order; every check contributes at least one.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst severity among the findings (`Ok` when there are none).
    pub fn severity(&self) -> Severity {
        self.findings.iter().map(|f| f.severity).max().unwrap_or(Severity::Ok)
    }

    /// The findings with `code`.
    pub fn with_code<'a>(&'a self, code: &str) -> impl Iterator<Item = &'a Finding> + use<'a> {
        let code = code.to_owned();
        self.findings.iter().filter(move |f| f.code == code)
    }

    /// The report as JSON: `namespace`, `severity`, `exit_code`, counts per severity, and
    /// `findings` (each as [`Finding::to_json`]).
    pub fn to_json(&self) -> Value {
        let count = |s: Severity| self.findings.iter().filter(|f| f.severity == s).count();
        json!({
            "namespace": self.namespace,
            "severity": self.severity().name(),
            "exit_code": self.severity().exit_code(),
            "counts": {
                "ok": count(Severity::Ok),
                "warning": count(Severity::Warning),
                "critical": count(Severity::Critical),
            },
            "findings": self.findings.iter().map(Finding::to_json).collect::<Vec<_>>(),
        })
    }
}

/// The thresholds the doctor judges by. The defaults suit a queue at a few hundred
/// messages per second; every field is public so a caller (and `relayer doctor`'s flags)
/// can tighten or relax them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorOptions {
    /// A snapshot or prepared transaction held this long is a warning (default 1 minute:
    /// at 800 messages/s a consumer falls behind after 35–45 s of a held horizon,
    /// docs/performance.md "Held horizons").
    pub horizon_warning: Duration,
    /// Held this long, critical (default 10 minutes).
    pub horizon_critical: Duration,
    /// An xmin this many transactions old is a warning when no age in time is known
    /// (slots, standbys; default 100,000, about a minute of a busy queue).
    pub xid_warning: i32,
    /// This many, critical (default 1,000,000).
    pub xid_critical: i32,
    /// Rows waiting on an unserved transport, parked lanes, dead letters and dead rows this
    /// old are stuck (default 1 hour): unserved rows and parked lanes are then critical,
    /// dead letters a warning.
    pub stuck_after: Duration,
    /// No statement reads more than this many rows of a relayer table (default 1,000).
    pub cap: u32,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            horizon_warning: Duration::from_secs(60),
            horizon_critical: Duration::from_secs(600),
            xid_warning: 100_000,
            xid_critical: 1_000_000,
            stuck_after: Duration::from_secs(3600),
            cap: 1_000,
        }
    }
}

/// The autovacuum settings schema step 5 gives the tables that churn — `queue` and
/// `outbox` — as `(storage parameter, value)`: vacuum once 1,000 rows are dead, however many
/// rows stay in the table. The doctor warns when a table is less eager than this.
pub const RECOMMENDED_AUTOVACUUM: &[(&str, &str)] =
    &[("autovacuum_vacuum_scale_factor", "0"), ("autovacuum_vacuum_threshold", "1000")];

/// The tables [`RECOMMENDED_AUTOVACUUM`] applies to, unprefixed.
pub const CHURNING_TABLES: &[&str] = &["queue", "outbox"];

/// Runs a doctor's read; an error names what it was reading.
pub(super) async fn rows(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    what: &str,
) -> Result<Vec<tokio_postgres::Row>, StorageError> {
    client.query(sql, params).await.map_err(|e| StorageError::database(format!("reading {what}"), e))
}

/// A duration for a message: whole seconds (`2m3s`), or `0s`.
pub(super) fn age(duration: Duration) -> HumanDuration {
    HumanDuration(Duration::from_secs(duration.as_secs()))
}

/// The severity of something held for `held`, by the two thresholds.
pub(super) fn by_time(held: Duration, warning: Duration, critical: Duration) -> Severity {
    if held >= critical {
        Severity::Critical
    } else if held >= warning {
        Severity::Warning
    } else {
        Severity::Ok
    }
}

/// The severity of an xmin `age` transactions old, by the options' thresholds.
pub(super) fn by_xid_age(age: i32, options: &DoctorOptions) -> Severity {
    if age >= options.xid_critical {
        Severity::Critical
    } else if age >= options.xid_warning {
        Severity::Warning
    } else {
        Severity::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_as_bad_as_its_worst_finding_and_exits_by_it_obs_6() {
        let mut report = Report { namespace: "public.relayer_".to_owned(), findings: Vec::new() };
        assert_eq!((report.severity(), report.severity().exit_code()), (Severity::Ok, 0));
        report.findings.push(Finding::new(Severity::Ok, "notify.queue", "server", "0%", ""));
        report.findings.push(Finding::new(Severity::Warning, "lanes.parked", "lane a", "parked", "release"));
        assert_eq!((report.severity(), report.severity().exit_code()), (Severity::Warning, 1));
        report.findings.push(Finding::new(Severity::Critical, "xmin.session", "pid 1", "held", "end it"));
        assert_eq!((report.severity(), report.severity().exit_code()), (Severity::Critical, 2));
        let json = report.to_json();
        assert_eq!(json["exit_code"], 2);
        assert_eq!(json["counts"]["warning"], 1);
        assert_eq!(json["findings"][2]["subject"], "pid 1");
        assert_eq!(report.with_code("lanes.parked").count(), 1);
    }

    #[test]
    fn thresholds_are_inclusive_and_ordered_obs_6() {
        let (w, c) = (Duration::from_secs(60), Duration::from_secs(600));
        assert_eq!(by_time(Duration::from_secs(59), w, c), Severity::Ok);
        assert_eq!(by_time(w, w, c), Severity::Warning);
        assert_eq!(by_time(c, w, c), Severity::Critical);
        let options = DoctorOptions::default();
        assert_eq!(by_xid_age(99_999, &options), Severity::Ok);
        assert_eq!(by_xid_age(100_000, &options), Severity::Warning);
        assert_eq!(by_xid_age(1_000_000, &options), Severity::Critical);
    }

    #[test]
    fn step_5_ships_exactly_the_recommended_settings_on_the_churning_tables_obs_6() {
        let step = crate::schema::MIGRATIONS
            .iter()
            .find(|m| m.version == 5)
            .map(|m| m.render(&relayer_core::Namespace::default()));
        let step = step.unwrap_or_default();
        let pairs: Vec<String> = RECOMMENDED_AUTOVACUUM.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        for table in CHURNING_TABLES {
            let alter = format!("ALTER TABLE \"public\".\"relayer_{table}\"\n    SET ({})", pairs.join(", "));
            assert!(step.contains(&alter), "step 5 lacks {alter}:\n{step}");
        }
        assert_eq!(step.matches("ALTER TABLE").count(), CHURNING_TABLES.len(), "{step}");
    }
}
