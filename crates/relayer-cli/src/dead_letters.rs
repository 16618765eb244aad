//! `relayer dead-letters list|show|redrive|purge` (DLP-7) over the audited dead-letter API.

use relayer_core::{MessageId, Uuid};
use relayer_postgres::{
    DeadLetterApi, Mode, OutboxDeadFilter, OutboxDeadRow, QueueDeadLetter, QueueDeadLetterFilter, Touched,
};
use serde_json::{Value, json};

use crate::args::{Action, Args, DeadLetterCommand, DeadLetterSelection};
use crate::connect::{CliResult, connect};
use crate::escape::{Newlines, printable};
use crate::output::{age, or_dash, print_json};
use crate::table::Table;

pub(crate) async fn run(args: &Args, command: DeadLetterCommand) -> CliResult {
    let client = connect(args).await?;
    let api = DeadLetterApi::new(&args.namespace);
    match command {
        DeadLetterCommand::List { selection, json } => {
            let now = std::time::SystemTime::now();
            if selection.outbox {
                let rows = api.list_outbox(&client, &outbox_filter(&selection, None)?).await?;
                if json {
                    print_json(&Value::Array(rows.iter().map(|r| listed(outbox_json(r))).collect()));
                } else {
                    let mut table =
                        Table::new(&["seq", "message id", "destination", "tries", "died", "error"])
                            .text("error");
                    for r in &rows {
                        table.row(vec![
                            r.seq.to_string(),
                            r.message_id.to_string(),
                            format!("{}:{}", r.transport, r.destination),
                            r.attempts.to_string(),
                            ago(now, r.failed_at),
                            r.last_error.clone().unwrap_or_default(),
                        ]);
                    }
                    print!("{}", table.render(0));
                    println!("{} dead outbox row(s)", rows.len());
                }
            } else {
                let rows = api.list_queue(&client, &queue_filter(&selection, None)?).await?;
                if json {
                    print_json(&Value::Array(rows.iter().map(|l| listed(queue_json(l))).collect()));
                } else {
                    let mut table = Table::new(&["seq", "message id", "queue", "from", "reason", "dead"]);
                    for r in &rows {
                        table.row(vec![
                            r.seq.to_string(),
                            r.message_id.to_string(),
                            r.queue.clone(),
                            or_dash(r.original_topic.as_ref()),
                            or_dash(r.rejection_reason.as_ref()),
                            ago(now, r.dead_lettered_at),
                        ]);
                    }
                    print!("{}", table.render(0));
                    println!("{} queue dead letter(s)", rows.len());
                }
            }
        }
        DeadLetterCommand::Show { id, json } => {
            let id = MessageId::from_uuid(id);
            let queue = api.show_queue(&client, id).await?;
            let outbox = api.show_outbox(&client, id).await?;
            if queue.is_none() && outbox.is_none() {
                return Err(format!("no dead letter with message id {id} in {}", args.namespace).into());
            }
            if json {
                print_json(&json!({
                    "queue": queue.as_ref().map(queue_json),
                    "outbox": outbox.as_ref().map(outbox_json),
                }));
            } else {
                if let Some(letter) = &queue {
                    print!("{}", describe(&queue_json(letter)));
                }
                if let Some(row) = &outbox {
                    print!("{}", describe(&outbox_json(row)));
                }
            }
        }
        DeadLetterCommand::Redrive { id, selection, action } => {
            confirmed(&action, "dead-letters redrive")?;
            let (actor, mode) = (actor(&action)?, mode(&action));
            let touched = if selection.outbox {
                api.redrive_outbox(&client, &outbox_filter(&selection, id)?, &actor, mode).await?
            } else {
                api.redrive_queue(&client, &queue_filter(&selection, id)?, &actor, mode).await?
            };
            report("redrive", "redriven", &touched, &action, &actor);
        }
        DeadLetterCommand::Purge { id, selection, action } => {
            confirmed(&action, "dead-letters purge")?;
            let (actor, mode) = (actor(&action)?, mode(&action));
            let touched = if selection.outbox {
                api.purge_outbox(&client, &outbox_filter(&selection, id)?, &actor, mode).await?
            } else {
                api.purge_queue(&client, &queue_filter(&selection, id)?, &actor, mode).await?
            };
            report("purge", "purged", &touched, &action, &actor);
        }
    }
    Ok(())
}

/// Refuses an action that changes data when standard input is not a terminal and neither
/// `--yes` nor `--dry-run` was given: a script must say it means it. At a terminal the
/// command acts as typed.
pub(crate) fn confirmed(action: &Action, command: &str) -> Result<(), String> {
    use std::io::IsTerminal as _;
    confirmation(action.yes || action.dry_run, std::io::stdin().is_terminal(), command)
}

fn confirmation(confirmed: bool, terminal: bool, command: &str) -> Result<(), String> {
    if confirmed || terminal {
        return Ok(());
    }
    Err(format!(
        "{command} changes data and standard input is not a terminal: add --yes to confirm \
         (or --dry-run to only see what it would touch)"
    ))
}

/// The actor of an action: `--actor`, else the OS user.
pub(crate) fn actor(action: &Action) -> Result<String, String> {
    action
        .actor
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|name| !name.trim().is_empty())
        .ok_or_else(|| "--actor: no actor given and no OS user found (USER, LOGNAME)".to_owned())
}

fn mode(action: &Action) -> Mode {
    if action.dry_run { Mode::DryRun } else { Mode::Apply }
}

fn report(verb: &str, done: &str, touched: &[Touched], action: &Action, actor: &str) {
    if action.json {
        print_json(&json!({
            "action": verb,
            "dry_run": action.dry_run,
            "actor": actor,
            "count": touched.len(),
            "messages": touched.iter().map(|t| json!({"seq": t.seq, "message_id": t.message_id.to_string()})).collect::<Vec<_>>(),
        }));
        return;
    }
    for t in touched {
        println!("{}  seq {}", t.message_id, t.seq);
    }
    if action.dry_run {
        println!("dry run: would {verb} {} dead letter(s); nothing changed", touched.len());
    } else {
        println!("{done} {} dead letter(s), audited as {actor}", touched.len());
    }
}

fn queue_filter(s: &DeadLetterSelection, id: Option<Uuid>) -> Result<QueueDeadLetterFilter, String> {
    for (name, given) in [
        ("--transport", s.transport.is_some()),
        ("--destination", s.destination.is_some()),
        ("--lane", s.lane.is_some()),
    ] {
        if given {
            return Err(format!("{name} selects outbox dead rows: add --outbox"));
        }
    }
    let mut filter = QueueDeadLetterFilter::new().limit(s.limit);
    if let Some(queue) = &s.queue {
        filter = filter.queue(queue);
    }
    if let Some(topic) = &s.topic {
        filter = filter.original_topic(topic);
    }
    if let Some(reason) = &s.reason {
        filter = filter.reason(reason);
    }
    if let Some(age) = s.older_than {
        filter = filter.older_than(age);
    }
    if let Some(seq) = s.after_seq {
        filter = filter.after_seq(seq);
    }
    if let Some(id) = id {
        filter = filter.message_id(MessageId::from_uuid(id));
    }
    Ok(filter)
}

fn outbox_filter(s: &DeadLetterSelection, id: Option<Uuid>) -> Result<OutboxDeadFilter, String> {
    for (name, given) in
        [("--queue", s.queue.is_some()), ("--topic", s.topic.is_some()), ("--reason", s.reason.is_some())]
    {
        if given {
            return Err(format!("{name} selects queue dead letters: drop --outbox"));
        }
    }
    let mut filter = OutboxDeadFilter::new().limit(s.limit);
    if let Some(transport) = &s.transport {
        filter = filter.transport(transport);
    }
    if let Some(destination) = &s.destination {
        filter = filter.destination(destination);
    }
    if let Some(lane) = &s.lane {
        filter = filter.lane(lane);
    }
    if let Some(age) = s.older_than {
        filter = filter.older_than(age);
    }
    if let Some(seq) = s.after_seq {
        filter = filter.after_seq(seq);
    }
    if let Some(id) = id {
        filter = filter.message_id(MessageId::from_uuid(id));
    }
    Ok(filter)
}

fn ago(now: std::time::SystemTime, at: relayer_core::Timestamp) -> String {
    age(now.duration_since(at.to_system_time()).unwrap_or_default())
}

fn body_text(body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text) => json!(text),
        Err(_) => json!(body.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

fn queue_json(l: &QueueDeadLetter) -> Value {
    json!({
        "kind": "queue",
        "seq": l.seq,
        "message_id": l.message_id.to_string(),
        "queue": l.queue,
        "original_topic": l.original_topic,
        "rejection_reason": l.rejection_reason,
        "rejection_message": l.rejection_message,
        "handled_count": l.handled_count,
        "created_at": l.created_at.to_string(),
        "dead_lettered_at": l.dead_lettered_at.to_string(),
        "headers": l.headers.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "body": body_text(&l.body),
        "body_bytes": l.body_bytes,
        "trace_context": l.trace_context,
    })
}

fn outbox_json(r: &OutboxDeadRow) -> Value {
    json!({
        "kind": "outbox",
        "seq": r.seq,
        "message_id": r.message_id.to_string(),
        "transport": r.transport,
        "destination": r.destination,
        "lane": r.lane,
        "attempts": r.attempts,
        "last_error": r.last_error,
        "created_at": r.created_at.to_string(),
        "failed_at": r.failed_at.to_string(),
        "headers": r.headers.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "body": body_text(&r.body),
        "body_bytes": r.body_bytes,
        "trace_context": r.trace_context,
    })
}

/// A listed dead letter: its body stays in the table (`list` never reads it; `show` does),
/// so only `body_bytes` says how large it is.
fn listed(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("body");
    }
    value
}

/// One `name: value` line per field of a JSON object.
fn describe(value: &Value) -> String {
    let mut text = String::new();
    if let Some(object) = value.as_object() {
        for (name, field) in object {
            let shown = match field {
                Value::String(s) => s.clone(),
                Value::Null => "-".to_owned(),
                other => other.to_string(),
            };
            // Bodies, headers and errors are the database's text: escaped for the terminal.
            text.push_str(&format!("{name:>18}: {}\n", printable(&shown, Newlines::Escape)));
        }
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OBS-3: without a terminal, an action needs --yes (or is a dry run); at a terminal it
    /// acts as typed.
    #[test]
    fn actions_without_a_terminal_need_yes_obs_3() {
        let refused = confirmation(false, false, "dead-letters purge").unwrap_err();
        assert!(
            refused.starts_with("dead-letters purge changes data") && refused.contains("--yes"),
            "{refused}"
        );
        assert!(confirmation(true, false, "lanes skip").is_ok());
        assert!(confirmation(false, true, "lanes skip").is_ok());
    }
}
