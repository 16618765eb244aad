//! `schema apply` and `status`.

use relayer_postgres::{NamespaceStatus, migrate, namespace_status};

use crate::args::Args;
use crate::{CliResult, connect};

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

pub(crate) async fn show(args: &Args) -> CliResult {
    let client = connect(args).await?;
    let status = namespace_status(&client, &args.namespace).await?;
    print!("{}", render(&args.namespace.to_string(), &status));
    Ok(())
}

/// The status as an aligned, human-readable block.
pub(crate) fn render(namespace: &str, status: &NamespaceStatus) -> String {
    let Some(version) = status.schema_version else {
        return format!("namespace {namespace}: no relayer schema (run `relayer schema apply`)\n");
    };
    let oldest =
        status.oldest_pending_age.map_or_else(|| "-".to_owned(), |age| format!("{:.1}s", age.as_secs_f64()));
    let mut text = format!(
        "namespace {namespace} (schema version {version})\n\
         \x20 outbox pending   {:>10}  (due now {}, ordered {}, oldest {oldest})\n\
         \x20 lanes parked     {:>10}\n\
         \x20 dead             {:>10}\n\
         \x20 inbox records    {:>10}\n",
        status.outbox_pending,
        status.outbox_due,
        status.outbox_ordered,
        status.lanes_parked,
        status.dead,
        status.inbox,
    );
    for (queue, count) in &status.queues {
        text.push_str(&format!("  queue {queue:<10} {count:>10}\n"));
    }
    for letters in &status.dead_letters {
        let topic = letters.original_topic.as_deref().unwrap_or("-");
        let reason = letters.reason.as_deref().unwrap_or("-");
        text.push_str(&format!(
            "  dead letters {:<10} {:>10}  (from {topic}, reason {reason})\n",
            letters.queue, letters.count
        ));
    }
    for (job, owner, term, live) in &status.leases {
        let state = if *live { "held" } else { "expired" };
        text.push_str(&format!("  lease {job:<10} {state} by {owner} (term {term})\n"));
    }
    text
}
