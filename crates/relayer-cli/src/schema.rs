//! `relayer schema apply|status` (`schema print` needs no database: see `main.rs`).

use relayer_postgres::{SCHEMA_VERSION, current_version, migrate};
use serde_json::json;

use crate::args::Args;
use crate::connect::{CliResult, connect};
use crate::output::print_json;

pub(crate) async fn apply(args: &Args) -> CliResult {
    let mut client = connect(args).await?;
    let report = migrate(&mut client, &args.namespace).await?;
    if report.applied.is_empty() {
        println!("namespace {}: schema already at version {}", args.namespace, report.to);
    } else {
        println!(
            "namespace {}: schema {} → {} (applied {:?})",
            args.namespace, report.from, report.to, report.applied
        );
    }
    Ok(())
}

pub(crate) async fn status(args: &Args, json: bool) -> CliResult {
    let client = connect(args).await?;
    let version = current_version(&client, &args.namespace).await?;
    let state = match version {
        None => "missing",
        Some(v) if v < SCHEMA_VERSION => "behind",
        Some(v) if v > SCHEMA_VERSION => "ahead",
        Some(_) => "current",
    };
    if json {
        print_json(&json!({
            "namespace": args.namespace.to_string(),
            "version": version,
            "shipped": SCHEMA_VERSION,
            "state": state,
        }));
    } else {
        let found = version.map_or_else(|| "none".to_owned(), |v| v.to_string());
        let advice = match state {
            "missing" | "behind" => " (run `relayer schema apply`)",
            "ahead" => " (this binary is older than the schema)",
            _ => "",
        };
        println!(
            "namespace {}: schema version {found}, this binary ships {SCHEMA_VERSION}: {state}{advice}",
            args.namespace
        );
    }
    Ok(())
}
