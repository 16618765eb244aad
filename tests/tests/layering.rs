//! The store seam holds (LDR-1b): worker crates reach storage only through the core
//! crate's store traits, so none of them depends on relayer's PostgreSQL crate, its driver
//! or its pool, nor turns on the core's PostgreSQL types. A test may (a dev-dependency);
//! the facade wires `relayer_postgres::PgSource` in.
//!
//! Read from `cargo metadata`, so every way of writing a dependency counts: under a
//! `[target.….dependencies]` table, renamed (`package = …`), inherited from the
//! workspace, optional, or as a build dependency.
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The worker crates that are generic over `relayer_core::session::StoreSource`, and the
/// worker-side crates they are built from.
const WORKERS: [&str; 7] = [
    "relayer-dispatcher",
    "relayer-sweeper",
    "relayer-cleanup",
    "relayer-dead-letters",
    "relayer-consumer",
    "relayer-worker",
    "relayer-delivery",
];

/// The crates a worker may never depend on (dev-dependencies aside): the storage crate,
/// and the driver, pool and type crates it is built on.
const STORAGE: [&str; 5] = ["relayer-postgres", "tokio-postgres", "bb8", "bb8-postgres", "postgres-types"];

/// The core's feature that brings in `postgres-types`.
const CORE_POSTGRES_FEATURE: &str = "postgres";

/// Every workspace package's metadata (`cargo metadata --no-deps`), by name.
fn workspace_packages() -> BTreeMap<String, Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--manifest-path"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| (package["name"].as_str().unwrap().to_owned(), package.clone()))
        .collect()
}

/// `package`'s dependencies that are built into it (normal and build, any target), each
/// as its package name (not a rename) with its entry.
fn built_in_dependencies(package: &Value) -> Vec<(&str, &Value)> {
    package["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|dependency| dependency["kind"].as_str() != Some("dev"))
        .map(|dependency| (dependency["name"].as_str().unwrap(), dependency))
        .collect()
}

/// Why `package` breaks the seam, if it does: a storage dependency, or the core's
/// PostgreSQL types turned on (by the dependency entry, or by one of its own features).
fn seam_violations(package: &Value, core_defaults: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    for (name, dependency) in built_in_dependencies(package) {
        let how = format!(
            "{}{}{}",
            dependency["kind"].as_str().map(|kind| format!(" ({kind})")).unwrap_or_default(),
            dependency["target"].as_str().map(|target| format!(" for {target}")).unwrap_or_default(),
            dependency["rename"].as_str().map(|rename| format!(" as {rename}")).unwrap_or_default(),
        );
        if STORAGE.contains(&name) {
            found.push(format!("depends on {name}{how}"));
        }
        if name == "relayer-core" {
            let features: Vec<&str> =
                dependency["features"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
            let defaults = dependency["uses_default_features"].as_bool().unwrap()
                && core_defaults.contains(CORE_POSTGRES_FEATURE);
            if features.contains(&CORE_POSTGRES_FEATURE) || defaults {
                found.push(format!("enables relayer-core's `{CORE_POSTGRES_FEATURE}` feature{how}"));
            }
        }
    }
    // A feature of the package's own that turns the core's on (`relayer-core/postgres`,
    // `relayer-core?/postgres`, or through a rename of the core).
    let core_keys: BTreeSet<&str> = built_in_dependencies(package)
        .into_iter()
        .filter(|(name, _)| *name == "relayer-core")
        .map(|(name, dependency)| dependency["rename"].as_str().unwrap_or(name))
        .collect();
    for (feature, enables) in package["features"].as_object().unwrap() {
        for enabled in enables.as_array().unwrap().iter().map(|e| e.as_str().unwrap()) {
            if let Some((key, sub)) = enabled.split_once('/')
                && core_keys.contains(key.trim_end_matches('?'))
                && sub == CORE_POSTGRES_FEATURE
            {
                found.push(format!("has a feature `{feature}` enabling {enabled}"));
            }
        }
    }
    found
}

/// The core's `default` feature, closed over the features it names.
fn core_default_features(core: &Value) -> BTreeSet<String> {
    let features = core["features"].as_object().unwrap();
    let mut on = BTreeSet::new();
    let mut pending = vec!["default".to_owned()];
    while let Some(feature) = pending.pop() {
        if let Some(enables) = features.get(&feature) {
            for enabled in enables.as_array().unwrap().iter().map(|e| e.as_str().unwrap()) {
                if features.contains_key(enabled) && on.insert(enabled.to_owned()) {
                    pending.push(enabled.to_owned());
                }
            }
        }
    }
    on
}

#[test]
fn no_worker_crate_depends_on_the_storage_crate_or_its_driver_ldr_1() {
    let packages = workspace_packages();
    let core = &packages["relayer-core"];
    let core_defaults = core_default_features(core);
    let mut violations = Vec::new();
    for worker in WORKERS {
        let package = packages.get(worker).unwrap_or_else(|| panic!("{worker} is not a workspace package"));
        assert!(
            built_in_dependencies(package).iter().any(|(name, _)| *name == "relayer-core"),
            "{worker}: its dependencies were not read as expected"
        );
        violations
            .extend(seam_violations(package, &core_defaults).into_iter().map(|v| format!("{worker} {v}")));
        // Nor through another workspace crate it is built with (each checked the same way;
        // the core's optional dependencies are the `postgres` feature's, checked above).
        for (name, _) in built_in_dependencies(package) {
            if let Some(member) = packages.get(name)
                && name != "relayer-core"
                && !WORKERS.contains(&name)
            {
                violations.extend(
                    seam_violations(member, &core_defaults)
                        .into_iter()
                        .map(|v| format!("{worker} is built with {name}, which {v}")),
                );
            }
        }
    }
    // The core itself, without its `postgres` feature, needs no storage crate.
    for (name, dependency) in built_in_dependencies(core) {
        if STORAGE.contains(&name) && !dependency["optional"].as_bool().unwrap() {
            violations.push(format!("relayer-core depends on {name} even without its `postgres` feature"));
        }
    }
    assert!(
        violations.is_empty(),
        "workers reach storage only through the core store traits (LDR-1b):\n{}",
        violations.join("\n")
    );
}
