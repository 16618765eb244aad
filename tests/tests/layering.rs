//! The store seam holds (LDR-1b): worker crates reach storage only through the core
//! crate's store traits, so none of them depends on relayer's PostgreSQL crate. A test may
//! (a dev-dependency); the facade wires `relayer_postgres::PgSource` in.
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

use std::path::Path;

/// The worker crates that are generic over `relayer_core::session::StoreSource`.
const WORKERS: [&str; 5] =
    ["relayer-dispatcher", "relayer-sweeper", "relayer-cleanup", "relayer-dead-letters", "relayer-consumer"];

/// The crates a worker may never depend on (dev-dependencies aside): the storage crate,
/// and the driver and pool it is built on.
const STORAGE: [&str; 3] = ["relayer-postgres", "tokio-postgres", "bb8"];

#[test]
fn no_worker_crate_depends_on_the_storage_crate_or_its_driver_ldr_1() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    for worker in WORKERS {
        let manifest = std::fs::read_to_string(crates.join(worker).join("Cargo.toml")).unwrap();
        let manifest: toml::Table = toml::from_str(&manifest).unwrap();
        let dependencies = manifest["dependencies"].as_table().unwrap();
        assert!(dependencies.contains_key("relayer-core"), "{worker}: the manifest was not read as expected");
        for storage in STORAGE {
            assert!(
                !dependencies.contains_key(storage),
                "{worker} depends on {storage}: workers reach storage only through the core store traits"
            );
        }
    }
}
