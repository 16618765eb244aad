//! The alert rules and the dashboard in docs/monitoring name only metrics relayer exports
//! (OBS-2): every `relayer_…` they query is in docs/operations.md's metrics table, every
//! metric in that table is emitted by the code (the facade's `metrics` module or the
//! sidecar's SQL gauges) and shown on the dashboard, and everything the code emits is
//! documented. A renamed metric, or a new one, fails here until all four agree.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Every `relayer_…` metric name in `text`, a histogram's series suffixes taken off.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("relayer_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        // A name inside a longer identifier (`x_relayer_y`) is not one.
        let standalone = rest[..at].chars().last().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        if standalone && name.len() > "relayer_".len() {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .fold(name, |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
            names.insert(base.to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    names
}

/// The metrics docs/operations.md's table documents: each row's first cell.
fn documented() -> BTreeSet<String> {
    let docs = read("docs/operations.md");
    let names: BTreeSet<String> = docs
        .lines()
        .filter_map(|line| line.strip_prefix("| `relayer_"))
        .map(|rest| format!("relayer_{}", &rest[..rest.find('`').unwrap()]))
        .collect();
    assert!(names.len() >= 20, "the metrics table was not found: {names:?}");
    names
}

/// The metric names the code emits: string literals in the facade's metrics module and the
/// sidecar's gauges.
fn emitted() -> BTreeSet<String> {
    let mut sources = String::new();
    for dir in ["crates/relayer/src/metrics"] {
        for entry in std::fs::read_dir(workspace().join(dir)).unwrap() {
            sources.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
        }
    }
    sources.push_str(&read("crates/relayer-cli/src/gauges.rs"));
    let literals: String = sources.split('"').skip(1).step_by(2).map(|s| format!("{s}\n")).collect();
    metric_names(&literals)
}

#[test]
fn every_documented_metric_is_emitted_and_every_emitted_one_documented_obs_2() {
    let (documented, emitted) = (documented(), emitted());
    let undocumented: Vec<_> = emitted.difference(&documented).collect();
    let unemitted: Vec<_> = documented.difference(&emitted).collect();
    assert!(undocumented.is_empty(), "emitted but not in docs/operations.md: {undocumented:?}");
    assert!(unemitted.is_empty(), "documented but emitted nowhere: {unemitted:?}");
}

#[test]
fn the_alert_rules_query_only_documented_metrics_obs_2() {
    let rules = read("docs/monitoring/relayer-alerts.yml");
    // Comments may speak of families (`relayer_outbox_*`); only rules count.
    let body: String =
        rules.lines().filter(|l| !l.trim_start().starts_with('#')).map(|l| format!("{l}\n")).collect();
    let used = metric_names(&body);
    let documented = documented();
    let unknown: Vec<_> = used.difference(&documented).collect();
    assert!(unknown.is_empty(), "alert rules query metrics relayer does not export: {unknown:?}");
    let alerts = body.matches("- alert: ").count();
    assert_eq!(alerts, body.matches("expr:").count(), "every alert has one expr");
    assert_eq!(alerts, body.matches("severity: ").count(), "every alert has a severity");
    assert!(alerts >= 10, "{alerts} alerts");
}

#[test]
fn the_dashboard_shows_every_documented_metric_and_nothing_else_obs_2() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("docs/monitoring/relayer-dashboard.json")).unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        let targets =
            panel["targets"].as_array().unwrap_or_else(|| panic!("a panel without targets: {panel}"));
        assert!(!targets.is_empty() && panel["title"].as_str().is_some_and(|t| !t.is_empty()), "{panel}");
        exprs.extend(targets.iter().map(|t| t["expr"].as_str().unwrap().to_owned()));
    }
    let used = metric_names(&exprs.join("\n"));
    let documented = documented();
    let unknown: Vec<_> = used.difference(&documented).collect();
    let missing: Vec<_> = documented.difference(&used).collect();
    assert!(unknown.is_empty(), "the dashboard queries metrics relayer does not export: {unknown:?}");
    assert!(missing.is_empty(), "exported metrics the dashboard does not show: {missing:?}");
}

#[test]
fn metric_names_are_read_whole_and_without_series_suffixes() {
    let names = metric_names("rate(relayer_a_b_bucket[5m]) x_relayer_c relayer_d_count{} relayer_");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["relayer_a_b", "relayer_d"]);
}
