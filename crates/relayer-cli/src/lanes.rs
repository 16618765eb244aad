//! `relayer lanes list|release|skip` (LAN-2, LAN-5), each action audited.

use relayer_postgres::LaneAdmin;
use serde_json::{Value, json};

use crate::args::{Action, Args, LaneCommand};
use crate::connect::{CliResult, connect};
use crate::dead_letters::{actor, confirmed};
use crate::output::{maybe_age, or_dash, print_json, seconds};
use crate::table::Table;

pub(crate) async fn run(args: &Args, command: LaneCommand) -> CliResult {
    let client = connect(args).await?;
    let admin = LaneAdmin::new(&args.namespace);
    match command {
        LaneCommand::List { all, limit, json } => {
            let lanes = admin.list(&client, all, limit).await?;
            if json {
                print_json(&Value::Array(
                    lanes
                        .iter()
                        .map(|l| {
                            json!({
                                "lane": l.lane, "waiting": l.waiting, "head_seq": l.head_seq,
                                "head_attempts": l.head_attempts, "head_error": l.head_error,
                                "parked": l.parked_for.is_some(),
                                "parked_for_seconds": l.parked_for.map(seconds),
                                "parked_reason": l.parked_reason, "owned": l.owned,
                            })
                        })
                        .collect(),
                ));
            } else {
                let mut table =
                    Table::new(&["lane", "waiting", "head", "tries", "parked", "reason"]).text("reason");
                for l in &lanes {
                    table.row(vec![
                        l.lane.clone(),
                        l.waiting.to_string(),
                        or_dash(l.head_seq),
                        or_dash(l.head_attempts),
                        maybe_age(l.parked_for),
                        l.parked_reason.clone().or_else(|| l.head_error.clone()).unwrap_or_default(),
                    ]);
                }
                print!("{}", table.render(0));
                let parked = lanes.iter().filter(|l| l.parked_for.is_some()).count();
                println!("{} lane(s), {parked} parked", lanes.len());
            }
        }
        LaneCommand::Release { lane, action } => {
            confirmed(&action, "lanes release")?;
            let who = actor(&action)?;
            let outcome = if action.dry_run {
                admin.parked_head(&client, &lane).await?
            } else {
                admin.release(&client, &lane, &who).await?
            };
            report(
                &action,
                &who,
                "release",
                &lane,
                outcome,
                "released; its head is tried again with a fresh attempt count",
            );
        }
        LaneCommand::Skip { lane, action } => {
            confirmed(&action, "lanes skip")?;
            let who = actor(&action)?;
            let outcome = if action.dry_run {
                admin.parked_head(&client, &lane).await?
            } else {
                admin.skip(&client, &lane, &who).await?.map(Some)
            };
            report(
                &action,
                &who,
                "skip",
                &lane,
                outcome,
                "head moved to the dead table; the rest of the lane goes on",
            );
        }
    }
    Ok(())
}

fn report(action: &Action, actor: &str, verb: &str, lane: &str, outcome: Option<Option<i64>>, done: &str) {
    let parked = outcome.is_some();
    let head = outcome.flatten();
    if action.json {
        print_json(&json!({
            "action": verb, "lane": lane, "dry_run": action.dry_run, "actor": actor,
            "parked": parked, "head_seq": head,
        }));
    } else if !parked {
        println!("lane {lane:?} is not parked: nothing to {verb}");
    } else if action.dry_run {
        println!("dry run: would {verb} lane {lane:?} (head seq {}); nothing changed", or_dash(head));
    } else {
        println!("lane {lane:?} {done} (head seq {}); audited as {actor}", or_dash(head));
    }
}
