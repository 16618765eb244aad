//! `relayer dead-letters list|show|redrive|purge` (DLP-7, OBS-3): the dead-letter API on the
//! command line. Queue dead letters by default, the outbox's dead rows with `--outbox`;
//! redrive and purge record the `--actor` in the audit table, and `--dry-run` only lists
//! what they would touch.

use std::time::Duration;

use relayer_core::{MessageId, Uuid};
use relayer_postgres::{
    DeadLetterApi, Mode, OutboxDeadFilter, OutboxDeadRow, QueueDeadLetter, QueueDeadLetterFilter,
};

use crate::args::Args;
use crate::{CliResult, connect};

/// Options without a value.
pub(crate) const FLAGS: &[&str] = &["--dry-run", "--outbox"];

/// Options with a value.
pub(crate) const OPTIONS: &[&str] = &[
    "--queue",
    "--topic",
    "--reason",
    "--transport",
    "--destination",
    "--lane",
    "--older-than",
    "--id",
    "--after",
    "--limit",
    "--actor",
];

/// What `relayer dead-letters` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    List,
    Show(MessageId),
    Redrive,
    Purge,
}

impl Action {
    pub(crate) fn parse(words: &[&str]) -> Result<Self, String> {
        match words {
            ["list"] => Ok(Action::List),
            ["show", id] => Ok(Action::Show(message_id(id)?)),
            ["redrive"] => Ok(Action::Redrive),
            ["purge"] => Ok(Action::Purge),
            other => Err(format!(
                "unknown command \"dead-letters {}\"; use list, show <ID>, redrive or purge",
                other.join(" ")
            )),
        }
    }
}

fn message_id(text: &str) -> Result<MessageId, String> {
    text.parse::<Uuid>().map(MessageId::from_uuid).map_err(|e| format!("invalid message id {text:?}: {e}"))
}

/// The parsed `dead-letters` options.
#[derive(Debug, Default)]
struct Options {
    outbox: bool,
    dry_run: bool,
    actor: Option<String>,
    queue: QueueDeadLetterFilter,
    dead: OutboxDeadFilter,
}

fn options(args: &Args) -> Result<Options, String> {
    let mut options = Options::default();
    let mut queue_only = None;
    let mut outbox_only = None;
    for (name, value) in &args.dead_letter_options {
        let value = value.clone().unwrap_or_default();
        match name.as_str() {
            "--outbox" => options.outbox = true,
            "--dry-run" => options.dry_run = true,
            "--actor" => options.actor = Some(value),
            "--queue" | "--topic" | "--reason" => {
                queue_only = Some(name.clone());
                options.queue = match name.as_str() {
                    "--queue" => options.queue.queue(value),
                    "--topic" => options.queue.original_topic(value),
                    _ => options.queue.reason(value),
                };
            }
            "--transport" | "--destination" | "--lane" => {
                outbox_only = Some(name.clone());
                options.dead = match name.as_str() {
                    "--transport" => options.dead.transport(value),
                    "--destination" => options.dead.destination(value),
                    _ => options.dead.lane(value),
                };
            }
            "--older-than" => {
                let age: Duration = relayer_core::duration::parse_duration(&value)
                    .map_err(|e| format!("invalid --older-than {value:?}: {e}"))?;
                options.queue = options.queue.older_than(age);
                options.dead = options.dead.older_than(age);
            }
            "--id" => {
                let id = message_id(&value)?;
                options.queue = options.queue.message_id(id);
                options.dead = options.dead.message_id(id);
            }
            "--after" => {
                let seq: i64 = value.parse().map_err(|e| format!("invalid --after {value:?}: {e}"))?;
                options.queue = options.queue.after_seq(seq);
                options.dead = options.dead.after_seq(seq);
            }
            "--limit" => {
                let limit: u32 = value.parse().map_err(|e| format!("invalid --limit {value:?}: {e}"))?;
                options.queue = options.queue.limit(limit);
                options.dead = options.dead.limit(limit);
            }
            other => return Err(format!("unknown option {other:?} for `relayer dead-letters`")),
        }
    }
    match (options.outbox, queue_only, outbox_only) {
        (true, Some(option), _) => Err(format!("{option} filters queue dead letters; leave out --outbox")),
        (false, _, Some(option)) => Err(format!("{option} filters the outbox's dead rows; add --outbox")),
        _ => Ok(options),
    }
}

pub(crate) async fn run(args: &Args, action: Action) -> CliResult {
    let options = options(args)?;
    let client = connect(args).await?;
    let api = DeadLetterApi::new(&args.namespace);
    let mode = if options.dry_run { Mode::DryRun } else { Mode::Apply };
    let actor = || {
        options
            .actor
            .clone()
            .ok_or_else(|| "redrive and purge need --actor <WHO>, for the audit record".to_owned())
    };
    match (action, options.outbox) {
        (Action::List, false) => api.list_queue(&client, &options.queue).await?.iter().for_each(print_queue),
        (Action::List, true) => api.list_outbox(&client, &options.dead).await?.iter().for_each(print_dead),
        (Action::Show(id), false) => match api.show_queue(&client, id).await? {
            Some(letter) => show_queue(&letter),
            None => return Err(format!("no queue dead letter with id {id}").into()),
        },
        (Action::Show(id), true) => match api.show_outbox(&client, id).await? {
            Some(row) => show_dead(&row),
            None => return Err(format!("no dead outbox row with id {id}").into()),
        },
        (action @ (Action::Redrive | Action::Purge), outbox) => {
            let actor = actor()?;
            let touched = match (action == Action::Redrive, outbox) {
                (true, false) => api.redrive_queue(&client, &options.queue, &actor, mode).await?,
                (false, false) => api.purge_queue(&client, &options.queue, &actor, mode).await?,
                (true, true) => api.redrive_outbox(&client, &options.dead, &actor, mode).await?,
                (false, true) => api.purge_outbox(&client, &options.dead, &actor, mode).await?,
            };
            let verb = match (action == Action::Redrive, options.dry_run) {
                (true, true) => "would redrive",
                (true, false) => "redrove",
                (false, true) => "would purge",
                (false, false) => "purged",
            };
            for t in &touched {
                println!("{verb}\tseq={}\t{}", t.seq, t.message_id);
            }
            println!("{verb} {} message(s)", touched.len());
        }
    }
    Ok(())
}

fn print_queue(letter: &QueueDeadLetter) {
    println!(
        "{}\t{}\t{}\t{}\t{}\thandled={}",
        letter.seq,
        letter.message_id,
        letter.queue,
        letter.original_topic.as_deref().unwrap_or("-"),
        letter.rejection_reason.as_deref().unwrap_or("-"),
        letter.handled_count
    );
}

fn print_dead(row: &OutboxDeadRow) {
    println!(
        "{}\t{}\t{}\t{}\t{}\tattempts={}\t{}",
        row.seq,
        row.message_id,
        row.transport,
        row.destination,
        row.lane.as_deref().unwrap_or("-"),
        row.attempts,
        row.last_error.as_deref().unwrap_or("-")
    );
}

fn show_queue(letter: &QueueDeadLetter) {
    print_queue(letter);
    println!("message: {}", letter.rejection_message.as_deref().unwrap_or("-"));
    println!("created_at: {}  dead_lettered_at: {}", letter.created_at, letter.dead_lettered_at);
    println!("headers: {:?}", letter.headers);
    println!("body: {}", String::from_utf8_lossy(&letter.body));
}

fn show_dead(row: &OutboxDeadRow) {
    print_dead(row);
    println!("created_at: {}  failed_at: {}", row.created_at, row.failed_at);
    println!("headers: {:?}", row.headers);
    println!("body: {}", String::from_utf8_lossy(&row.body));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::args::{Command, parse};

    fn parse_words(words: &str) -> Result<crate::args::Args, String> {
        let args: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        parse(&args, None)
    }

    #[test]
    fn parses_dead_letter_commands_and_refuses_misplaced_filters_dlp_7() {
        let args =
            parse_words("dead-letters redrive --queue dead --topic orders --actor ops --dry-run").unwrap();
        assert_eq!(args.command, Command::DeadLetters(super::Action::Redrive));
        let options = super::options(&args).unwrap();
        assert!(options.dry_run && !options.outbox);
        assert_eq!(options.queue.to_string(), "queue=dead original_topic=orders limit=100");
        let error = parse_words("dead-letters show nope").unwrap_err();
        assert!(error.starts_with("invalid message id \"nope\": "), "{error}");
        assert!(
            parse_words("dead-letters drop")
                .unwrap_err()
                .starts_with("unknown command \"dead-letters drop\"")
        );
        assert_eq!(
            parse_words("status --queue dead").unwrap_err(),
            "option \"--queue\" belongs to `relayer dead-letters`"
        );
        let args = parse_words("dead-letters list --outbox --queue dead").unwrap();
        assert_eq!(
            super::options(&args).unwrap_err(),
            "--queue filters queue dead letters; leave out --outbox"
        );
        let args = parse_words("dead-letters list --older-than 5").unwrap();
        assert!(super::options(&args).unwrap_err().starts_with("invalid --older-than \"5\""));
    }
}
