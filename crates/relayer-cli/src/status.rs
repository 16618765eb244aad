//! `relayer status`: a namespace's health at a glance, as sections of tables or as JSON.

use std::fmt::Write as _;

use relayer_postgres::{NamespaceStatus, namespace_status};
use serde_json::{Value, json};

use crate::args::Args;
use crate::connect::{CliResult, connect};
use crate::output::{age, maybe_age, or_dash, print_json, seconds};
use crate::table::Table;

pub(crate) async fn show(args: &Args, json: bool) -> CliResult {
    let client = connect(args).await?;
    let status = namespace_status(&client, &args.namespace).await?;
    if json {
        print_json(&to_json(&args.namespace.to_string(), &status));
    } else {
        print!("{}", render(&args.namespace.to_string(), &status));
    }
    Ok(())
}

/// The status as JSON: every age in seconds.
pub(crate) fn to_json(namespace: &str, status: &NamespaceStatus) -> Value {
    let secs = |d: Option<std::time::Duration>| d.map(seconds);
    json!({
        "namespace": namespace,
        "schema_version": status.schema_version,
        "outbox": {
            "pending": status.outbox_pending,
            "due": status.outbox_due,
            "scheduled": status.outbox_scheduled,
            "ordered": status.outbox_ordered,
            "oldest_pending_age_seconds": secs(status.oldest_pending_age),
            "backlog": status.backlog.iter().map(|b| json!({
                "transport": b.transport, "destination": b.destination, "pending": b.pending,
                "due": b.due, "scheduled": b.scheduled, "retrying": b.retrying, "ordered": b.ordered,
                "oldest_age_seconds": secs(b.oldest_age),
            })).collect::<Vec<_>>(),
            "unserved": status.unserved.iter().map(|u| json!({
                "transport": u.transport, "pending": u.pending, "oldest_age_seconds": secs(u.oldest_age),
            })).collect::<Vec<_>>(),
        },
        "lanes": {
            "parked": status.lanes_parked,
            "parked_lanes": status.parked_lanes.iter().map(|l| json!({
                "lane": l.lane, "parked_for_seconds": seconds(l.parked_for), "head_seq": l.parked_seq,
                "reason": l.reason, "waiting": l.waiting,
            })).collect::<Vec<_>>(),
        },
        "dead": {
            "rows": status.dead,
            "by_destination": status.dead_rows.iter().map(|d| json!({
                "transport": d.transport, "destination": d.destination, "count": d.count,
                "oldest_age_seconds": seconds(d.oldest_age),
            })).collect::<Vec<_>>(),
        },
        "dead_letters": status.dead_letters.iter().map(|d| json!({
            "queue": d.queue, "original_topic": d.original_topic, "reason": d.reason, "count": d.count,
            "oldest_age_seconds": seconds(d.oldest_age),
        })).collect::<Vec<_>>(),
        "queues": status.queues.iter().map(|(queue, count)| json!({"queue": queue, "messages": count})).collect::<Vec<_>>(),
        "inbox": status.inbox,
        "leases": status.leases.iter().map(|l| json!({
            "job": l.job, "owner": l.owner, "term": l.term, "live": l.live(),
            "held_for_seconds": seconds(l.held_for), "since_renewal_seconds": seconds(l.since_renewal),
            "expires_in_seconds": (l.expires_in_micros as f64 / 1e6 * 1000.0).round() / 1000.0,
        })).collect::<Vec<_>>(),
        "instances": status.instances.iter().map(|i| json!({
            "worker": i.worker, "instance": i.instance, "fingerprint": i.fingerprint,
            "since_seen_seconds": seconds(i.since_seen), "running_for_seconds": seconds(i.running_for),
            "settings": i.settings,
        })).collect::<Vec<_>>(),
        "disagreements": status.disagreements.iter().map(|d| json!({
            "worker": d.worker, "settings": d.settings,
            "groups": d.groups.iter().map(|(fingerprint, instances)| json!({"fingerprint": fingerprint, "instances": instances})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "workers": status.workers.iter().map(|w| json!({
            "worker": w.worker, "source": w.source.name(), "since_last_pass_seconds": seconds(w.since),
            "interval_seconds": secs(w.interval), "stalled": w.stalled, "instances": w.instances,
        })).collect::<Vec<_>>(),
        "horizon": {
            "oldest_transaction_age_seconds": secs(status.horizon.oldest_transaction_age),
            "oldest_transaction_pid": status.horizon.oldest_transaction_pid,
            "oldest_transaction_application": status.horizon.oldest_transaction_application,
            "xmin_age": status.horizon.xmin_age,
        },
        "tables": status.dead_tuples.iter().map(|t| json!({"table": t.table, "live": t.live, "dead": t.dead})).collect::<Vec<_>>(),
    })
}

/// The status as readable sections, each within 80 columns.
pub(crate) fn render(namespace: &str, status: &NamespaceStatus) -> String {
    let Some(version) = status.schema_version else {
        return format!("namespace {namespace}: no relayer schema (run `relayer schema apply`)\n");
    };
    let mut text = format!("namespace {namespace} (schema version {version})\n\n");
    let _ = writeln!(
        text,
        "outbox: {} pending ({} due, {} scheduled, {} ordered), oldest {}",
        status.outbox_pending,
        status.outbox_due,
        status.outbox_scheduled,
        status.outbox_ordered,
        maybe_age(status.oldest_pending_age)
    );
    let mut backlog = Table::new(&["transport", "destination", "pending", "due", "sched", "retry", "oldest"]);
    for b in &status.backlog {
        backlog.row(vec![
            b.transport.clone(),
            b.destination.clone(),
            b.pending.to_string(),
            b.due.to_string(),
            b.scheduled.to_string(),
            b.retrying.to_string(),
            maybe_age(b.oldest_age),
        ]);
    }
    section(&mut text, &backlog);
    if !status.unserved.is_empty() {
        // TRN-6: nothing running can deliver these until an instance with the transport starts.
        let _ = writeln!(text, "waiting on a transport no live instance registers:");
        let mut unserved = Table::new(&["transport", "pending", "oldest"]);
        for u in &status.unserved {
            unserved.row(vec![u.transport.clone(), u.pending.to_string(), maybe_age(u.oldest_age)]);
        }
        section(&mut text, &unserved);
    }

    let _ = writeln!(text, "lanes parked: {}", status.lanes_parked);
    let mut lanes = Table::new(&["lane", "parked", "head", "waiting", "reason"]).text("reason");
    for l in &status.parked_lanes {
        lanes.row(vec![
            l.lane.clone(),
            age(l.parked_for),
            or_dash(l.parked_seq),
            l.waiting.to_string(),
            l.reason.clone().unwrap_or_default(),
        ]);
    }
    section(&mut text, &lanes);

    let _ = writeln!(text, "dead (outbox): {}", status.dead);
    let mut dead = Table::new(&["transport", "destination", "count", "oldest"]);
    for d in &status.dead_rows {
        dead.row(vec![d.transport.clone(), d.destination.clone(), d.count.to_string(), age(d.oldest_age)]);
    }
    section(&mut text, &dead);

    let letters: i64 = status.dead_letters.iter().map(|d| d.count).sum();
    let _ = writeln!(text, "dead letters (queue): {letters}");
    let mut table = Table::new(&["queue", "from", "reason", "count", "oldest"]);
    for d in &status.dead_letters {
        table.row(vec![
            d.queue.clone(),
            or_dash(d.original_topic.as_ref()),
            or_dash(d.reason.as_ref()),
            d.count.to_string(),
            age(d.oldest_age),
        ]);
    }
    section(&mut text, &table);

    let mut queues = Table::new(&["queue", "messages"]);
    for (queue, count) in &status.queues {
        queues.row(vec![queue.clone(), count.to_string()]);
    }
    let _ = writeln!(text, "queues: {}, inbox records: {}", status.queues.len(), status.inbox);
    section(&mut text, &queues);

    let _ = writeln!(text, "leases:");
    let mut leases = Table::new(&["job", "holder", "term", "state", "renewed", "expiry"]);
    for l in &status.leases {
        let expiry = std::time::Duration::from_micros(l.expires_in_micros.unsigned_abs());
        leases.row(vec![
            l.job.clone(),
            l.owner.clone(),
            l.term.to_string(),
            if l.live() { "held" } else { "expired" }.to_owned(),
            format!("{} ago", age(l.since_renewal)),
            if l.live() { format!("in {}", age(expiry)) } else { format!("{} ago", age(expiry)) },
        ]);
    }
    section(&mut text, &leases);

    let _ = writeln!(text, "workers (last pass: lease = leases.renewed_at; heartbeat = instances.seen_at):");
    let mut workers = Table::new(&["worker", "last pass", "from", "interval", "instances", "state"]);
    for w in &status.workers {
        workers.row(vec![
            w.worker.clone(),
            format!("{} ago", age(w.since)),
            w.source.name().to_owned(),
            maybe_age(w.interval),
            w.instances.to_string(),
            if w.stalled { "STALLED" } else { "ok" }.to_owned(),
        ]);
    }
    section(&mut text, &workers);

    let _ = writeln!(text, "instances (seen within 10 minutes): {}", status.instances.len());
    let mut instances = Table::new(&["worker", "instance", "fingerprint", "seen", "transports"]);
    for i in &status.instances {
        instances.row(vec![
            i.worker.clone(),
            i.instance.clone(),
            i.fingerprint.clone(),
            format!("{} ago", age(i.since_seen)),
            if i.transports.is_empty() { "-".to_owned() } else { i.transports.join(",") },
        ]);
    }
    section(&mut text, &instances);
    for d in &status.disagreements {
        let _ = writeln!(
            text,
            "  DISAGREEMENT (OPT-4): {} instances differ on {} ({} settings groups)",
            d.worker,
            d.settings.join(", "),
            d.groups.len()
        );
    }

    let h = &status.horizon;
    let _ = writeln!(
        text,
        "xmin horizon: xmin age {} xids, oldest transaction {}",
        or_dash(h.xmin_age),
        maybe_age(h.oldest_transaction_age)
    );
    if let Some(pid) = h.oldest_transaction_pid {
        // Whole and quoted: an application name may hold spaces, or be empty.
        let application = h.oldest_transaction_application.as_deref().unwrap_or("");
        let _ = writeln!(text, "  held by pid {pid}, application_name {application:?}");
    }
    let dead_tuples: i64 = status.dead_tuples.iter().map(|t| t.dead).sum();
    let _ = writeln!(text, "dead tuples in the namespace's tables: {dead_tuples}");
    text
}

fn section(text: &mut String, table: &Table) {
    if !table.is_empty() {
        text.push_str(&table.render(2));
    }
    text.push('\n');
}
