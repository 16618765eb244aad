//! Each console command against a real PostgreSQL: its output (human and `--json`) and its
//! effect (OBS-3, DLP-7, LAN-5).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{
    REFUSAL, audit, count, dead_letter, fits_80_columns, flat, kill, park_lane, relayer, send_to_queue,
    setup, write,
};
use relayer::{Delivery, NewMessage};
use relayer_test_support::TestDb;

/// OBS-3: `status` shows the backlog and the oldest pending age per transport and
/// destination, scheduled rows, parked lanes with their reason, dead letters by queue and
/// reason, and the xmin horizon — in 80 columns, and the same as JSON.
#[tokio::test]
async fn status_shows_backlog_lanes_dead_letters_and_the_horizon_obs_3() {
    let (db, client) = setup().await;
    park_lane(&client, &db, "account-7", 2).await;
    write(
        &client,
        &db,
        &[
            NewMessage::new("queue", "orders", b"1".to_vec()),
            NewMessage::new("queue", "orders", b"2".to_vec()),
            NewMessage::new("queue", "invoices", b"3".to_vec())
                .delivery(Delivery::After(Duration::from_secs(3_600))),
        ],
    )
    .await;
    send_to_queue(&db, "payments", 2).await;
    dead_letter(&client, &db, "payments", "payments.dead", "handler").await;

    // A session that holds the xmin horizon while three transactions commit after it.
    let holder = db.connect().await;
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current()").await.unwrap();
    for _ in 0..3 {
        client.query_one("SELECT txid_current()", &[]).await.unwrap();
    }
    let holder_pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let held_for: f64 =
        holder.query_one("SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8 FROM pg_stat_activity WHERE pid = pg_backend_pid()", &[]).await.unwrap().get(0);
    let orders_age = format!(
        "SELECT extract(epoch FROM now() - min(created_at))::float8 FROM {} WHERE destination = 'orders'",
        db.namespace().table("outbox")
    );
    let age_before: f64 = client.query_one(&orders_age, &[]).await.unwrap().get(0);

    let human = relayer(&db, &["status"]).await;
    let text = human.ok();
    fits_80_columns(text);
    assert!(text.contains("outbox: 6 pending"), "{text}");
    assert!(text.contains("1 scheduled"), "{text}");
    assert!(text.contains("lanes parked: 1"), "{text}");
    assert!(flat(text).contains("account-7 ") && flat(text).contains(REFUSAL), "{text}");
    assert!(text.contains("payments.dead") && text.contains("handler"), "{text}");
    let xmin_age: i64 = text
        .lines()
        .find_map(|line| line.strip_prefix("xmin horizon: xmin age "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no xmin age: {text}"));
    assert!(xmin_age >= 3, "three transactions committed after the held snapshot: {text}");

    let json = relayer(&db, &["status", "--json"]).await.json();
    let age_after: f64 = client.query_one(&orders_age, &[]).await.unwrap().get(0);
    assert_eq!(json["outbox"]["pending"], 6);
    assert_eq!(json["outbox"]["scheduled"], 1);
    let backlog = json["outbox"]["backlog"].as_array().unwrap();
    let orders = backlog.iter().find(|b| b["destination"] == "orders").unwrap();
    assert_eq!((orders["transport"].as_str(), orders["pending"].as_i64()), (Some("queue"), Some(2)));
    // The age of the oldest row, as the database measured it just before and just after.
    let reported = orders["oldest_age_seconds"].as_f64().unwrap();
    assert!(
        age_before - 0.001 <= reported && reported <= age_after + 0.001,
        "{age_before} ≤ {reported} ≤ {age_after}"
    );
    let invoices = backlog.iter().find(|b| b["destination"] == "invoices").unwrap();
    assert_eq!(invoices["oldest_age_seconds"], serde_json::Value::Null, "scheduled rows are not late");
    let lane = &json["lanes"]["parked_lanes"][0];
    assert_eq!((lane["lane"].as_str(), lane["waiting"].as_i64()), (Some("account-7"), Some(3)));
    assert_eq!(json["dead_letters"][0]["queue"], "payments.dead");
    assert_eq!(json["dead_letters"][0]["reason"], "handler");
    assert_eq!(json["dead_letters"][0]["count"], 2);
    let horizon = &json["horizon"];
    assert!(horizon["xmin_age"].as_i64().unwrap() >= 3, "{horizon}");
    assert!(horizon["oldest_transaction_age_seconds"].as_f64().unwrap() >= held_for, "{horizon}");
    // The holder's transaction is the oldest, unless another session's began even earlier.
    if horizon["oldest_transaction_pid"] == holder_pid {
        assert!(text.contains(&format!("held by pid {holder_pid}")), "{text}");
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert!(json["workers"].as_array().unwrap().is_empty(), "no worker runs: {}", json["workers"]);
}

/// OBS-2: a worker whose lease was last renewed more than three of its intervals ago is
/// flagged stalled, with where the evidence comes from; a fresh one is not; instances that
/// disagree on a setting are listed (OPT-4). (Old timestamps
/// are hand-written: no component makes them quickly.)
#[tokio::test]
async fn status_flags_a_worker_whose_last_pass_is_three_intervals_old_obs_2() {
    let (db, client) = setup().await;
    let (leases, instances) = (db.namespace().table("leases"), db.namespace().table("instances"));
    client
        .batch_execute(&format!(
            "INSERT INTO {instances} (worker, instance, fingerprint, settings) VALUES \
               ('sweeper', 'a', 'f1', '{{\"sweep_interval\": \"5s\"}}'), \
               ('sweeper', 'b', 'f3', '{{\"sweep_interval\": \"9s\"}}'), \
               ('cleanup', 'a', 'f2', '{{\"cleanup_interval\": \"1m\"}}'); \
             INSERT INTO {leases} (job, owner, term, acquired_at, renewed_at, expires_at) VALUES \
               ('sweeper', 'a', 3, now() - interval '1 hour', now() - interval '10 minutes', now() - interval '9 minutes'), \
               ('cleanup', 'a', 1, now() - interval '1 hour', now() - interval '30 seconds', now() + interval '30 seconds')"
        ))
        .await
        .unwrap();
    let json = relayer(&db, &["status", "--json"]).await.json();
    let worker = |name: &str| {
        json["workers"].as_array().unwrap().iter().find(|w| w["worker"] == name).unwrap().clone()
    };
    assert_eq!(
        (worker("sweeper")["stalled"].as_bool(), worker("sweeper")["source"].as_str()),
        (Some(true), Some("lease"))
    );
    assert_eq!(worker("sweeper")["interval_seconds"], 5.0);
    assert_eq!(worker("cleanup")["stalled"], false);
    let text = relayer(&db, &["status"]).await;
    let flagged = |name: &str| {
        text.stdout
            .lines()
            .any(|l| l.trim_start().starts_with(name) && l.contains("STALLED") && l.contains("lease"))
    };
    assert!(text.ok().contains("workers (last pass"));
    assert!(flagged("sweeper") && !flagged("cleanup"), "{}", text.stdout);
    assert!(text.stdout.contains("expired"), "the sweeper's lease shows as expired: {}", text.stdout);
    // OPT-4: the two sweeper instances disagree on sweep_interval.
    assert!(
        text.stdout.contains("DISAGREEMENT (OPT-4): sweeper instances differ on sweep_interval"),
        "{}",
        text.stdout
    );
    let disagreement = &json["disagreements"][0];
    assert_eq!(
        (disagreement["worker"].as_str(), disagreement["settings"][0].as_str()),
        (Some("sweeper"), Some("sweep_interval"))
    );
    assert_eq!(disagreement["groups"].as_array().unwrap().len(), 2);
}

/// `status` on a namespace without relayer's schema says so and how to fix it.
#[tokio::test]
async fn status_without_a_schema_says_how_to_apply_it_ns_3() {
    let db = TestDb::new().await;
    let text = relayer(&db, &["status"]).await;
    assert!(text.ok().contains("no relayer schema (run `relayer schema apply`)"), "{text:?}");
}

/// NS-3: `schema status` reports a missing schema, `schema apply` creates it (idempotently),
/// and `schema print` emits the DDL for the namespace.
#[tokio::test]
async fn schema_print_apply_and_status_ns_3() {
    let db = TestDb::new().await;
    let missing = relayer(&db, &["schema", "status", "--json"]).await.json();
    assert_eq!(missing["state"], "missing");
    let printed = relayer(&db, &["schema", "print"]).await;
    assert!(printed.ok().contains(&format!("CREATE TABLE \"{}\".\"relayer_outbox\"", db.schema())));
    assert!(relayer(&db, &["schema", "apply"]).await.ok().contains("applied"));
    assert!(relayer(&db, &["schema", "apply"]).await.ok().contains("already at version"));
    let current = relayer(&db, &["schema", "status", "--json"]).await.json();
    assert_eq!(current["state"], "current");
    assert!(relayer(&db, &["schema", "status"]).await.ok().contains(": current"));
}

/// DLP-7: dead letters are listed (table and JSON), shown whole, redriven by id after a
/// dry run that changes nothing, and purged by filter — each action audited with the actor
/// from `--actor` or the OS user.
#[tokio::test]
async fn dead_letters_are_listed_shown_redriven_and_purged_with_audit_dlp_7() {
    let (db, client) = setup().await;
    let ids = send_to_queue(&db, "orders", 3).await;
    dead_letter(&client, &db, "orders", "orders.dead", "handler").await;
    let id = ids[0].to_string();

    let listed = relayer(&db, &["dead-letters", "list", "--queue", "orders.dead"]).await;
    assert!(listed.ok().contains(&id) && listed.stdout.contains("3 queue dead letter(s)"), "{listed:?}");
    let json = relayer(&db, &["dead-letters", "list", "--reason", "handler", "--json"]).await.json();
    assert_eq!(json.as_array().unwrap().len(), 3);
    assert_eq!(json[0]["original_topic"], "orders");
    // A listing leaves bodies in the table: their size only (`show` reads one).
    assert_eq!((json[0].get("body"), json[0]["body_bytes"].as_i64()), (None, Some(9)));
    let shown = relayer(&db, &["dead-letters", "show", &id, "--json"]).await.json();
    assert_eq!(shown["queue"]["body"], "orders #0");
    assert!(relayer(&db, &["dead-letters", "show", &id]).await.ok().contains("rejection_reason: handler"));

    let dry = relayer(&db, &["dead-letters", "redrive", &id, "--dry-run"]).await;
    assert!(dry.ok().contains("dry run: would redrive 1"), "{dry:?}");
    assert_eq!(count(&client, &db, "queue", "queue = 'orders'").await, 0, "a dry run changes nothing");
    assert!(audit(&client, &db).await.is_empty(), "a dry run audits nothing");

    let redriven =
        relayer(&db, &["dead-letters", "redrive", &id, "--actor", "alice", "--json", "--yes"]).await.json();
    assert_eq!((redriven["count"].as_i64(), redriven["actor"].as_str()), (Some(1), Some("alice")));
    assert_eq!(count(&client, &db, "queue", "queue = 'orders' AND dead_lettered_at IS NULL").await, 1);

    let refused = relayer(&db, &["dead-letters", "purge", "--yes"]).await;
    assert!(!refused.success && refused.stderr.contains("at least one criterion"), "{refused:?}");
    let purged = relayer(&db, &["dead-letters", "purge", "--queue", "orders.dead", "-y"]).await;
    assert!(purged.ok().contains("purged 2 dead letter(s), audited as ops-test"), "{purged:?}");
    assert_eq!(count(&client, &db, "queue", "dead_lettered_at IS NOT NULL").await, 0);

    let actions: Vec<(String, String)> =
        audit(&client, &db).await.into_iter().map(|(a, b, _)| (a, b)).collect();
    assert_eq!(
        actions,
        [
            ("alice".to_owned(), "dead_letter.redrive".to_owned()),
            ("ops-test".to_owned(), "dead_letter.purge".to_owned()),
            ("ops-test".to_owned(), "dead_letter.purge".to_owned()),
        ]
    );
    let mixed = relayer(&db, &["dead-letters", "list", "--transport", "queue"]).await;
    assert!(!mixed.success && mixed.stderr.contains("--transport selects outbox dead rows: add --outbox"));
}

/// DLP-7 for the outbox's dead table (`--outbox`): rows the dispatcher gave up on are
/// listed with their message ids whole and their error wrapped within 80 columns (table and
/// JSON), shown, redriven by id back into the outbox after a dry run that changes nothing,
/// and purged by destination — each action audited; queue criteria are refused with it.
#[tokio::test]
async fn outbox_dead_rows_are_listed_shown_redriven_and_purged_with_audit_dlp_7() {
    let (db, client) = setup().await;
    let ledger = kill(&client, &db, "ledger", 2).await;
    let audit_rows = kill(&client, &db, "audit", 1).await;
    send_to_queue(&db, "orders", 1).await;
    dead_letter(&client, &db, "orders", "orders.dead", "handler").await;

    let listed = relayer(&db, &["dead-letters", "list", "--outbox"]).await;
    let text = listed.ok();
    fits_80_columns(text);
    for id in ledger.iter().chain(&audit_rows) {
        assert!(text.contains(&id.to_string()), "{id} is not shown whole: {text}");
    }
    assert!(flat(text).contains(REFUSAL), "the error is wrapped, not cut: {text}");
    assert!(text.contains("refusing:ledger") && text.ends_with("3 dead outbox row(s)\n"), "{text}");
    let json =
        relayer(&db, &["dead-letters", "list", "--outbox", "--destination", "ledger", "--json"]).await.json();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2, "queue dead letters and other destinations are not outbox rows of ledger");
    assert_eq!((rows[0]["kind"].as_str(), rows[0]["attempts"].as_i64()), (Some("outbox"), Some(1)));
    assert_eq!(rows[0]["message_id"], ledger[0].to_string());
    assert!(rows[0]["last_error"].as_str().unwrap().contains(REFUSAL));

    let id = ledger[0].to_string();
    let shown = relayer(&db, &["dead-letters", "show", &id, "--json"]).await.json();
    assert_eq!((shown["outbox"]["body"].as_str(), shown["queue"].as_null()), (Some("ledger #0"), Some(())));
    assert!(relayer(&db, &["dead-letters", "show", &id]).await.ok().contains("destination: ledger"));

    let dry = relayer(&db, &["dead-letters", "redrive", &id, "--outbox", "--dry-run", "--json"]).await.json();
    assert_eq!((dry["dry_run"].as_bool(), dry["count"].as_i64()), (Some(true), Some(1)));
    assert_eq!(count(&client, &db, "dead", "true").await, 3, "a dry run changes nothing");
    assert!(audit(&client, &db).await.is_empty(), "a dry run audits nothing");

    let redriven =
        relayer(&db, &["dead-letters", "redrive", &id, "--outbox", "--actor", "carol", "--yes"]).await;
    assert!(redriven.ok().contains("redriven 1 dead letter(s), audited as carol"), "{redriven:?}");
    let back = format!("message_id = '{id}' AND attempts = 0 AND visible_at <= now()");
    assert_eq!(count(&client, &db, "outbox", &back).await, 1, "back in the outbox, due, attempts afresh");
    assert_eq!(count(&client, &db, "dead", &format!("message_id = '{id}'")).await, 0);

    let purged =
        relayer(&db, &["dead-letters", "purge", "--outbox", "--destination", "audit", "--json", "--yes"])
            .await
            .json();
    assert_eq!(purged["messages"][0]["message_id"], audit_rows[0].to_string());
    assert_eq!(count(&client, &db, "dead", "true").await, 1, "only the other ledger row is left");
    assert_eq!(
        count(&client, &db, "queue", "dead_lettered_at IS NOT NULL").await,
        1,
        "queue dead letters untouched"
    );
    let actions: Vec<(String, String)> =
        audit(&client, &db).await.into_iter().map(|(actor, action, _)| (actor, action)).collect();
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert_eq!(actions[0].0, "carol");
    assert_eq!(actions[1].0, "ops-test");
    assert!(actions[0].1.contains("redrive") && actions[1].1.contains("purge"), "{actions:?}");

    let mixed = relayer(&db, &["dead-letters", "purge", "--outbox", "--queue", "orders.dead", "--yes"]).await;
    assert!(!mixed.success && mixed.stderr.contains("--queue selects queue dead letters: drop --outbox"));
}

/// LAN-2, LAN-5: `lanes list` shows a parked lane and its reason; `release` un-parks it with
/// a fresh attempt count; `skip` moves the head to the dead table and the rest of the lane
/// stays, in order — both audited.
#[tokio::test]
async fn lanes_are_released_with_fresh_attempts_and_skipped_to_dead_audited_lan_5() {
    let (db, client) = setup().await;
    let head = park_lane(&client, &db, "account-1", 2).await;

    let listed = relayer(&db, &["lanes", "list"]).await;
    assert!(listed.ok().contains("account-1") && listed.stdout.contains("1 lane(s), 1 parked"), "{listed:?}");
    fits_80_columns(&listed.stdout);
    assert!(flat(&listed.stdout).contains(REFUSAL), "the reason is wrapped, not cut: {}", listed.stdout);
    let json = relayer(&db, &["lanes", "list", "--json"]).await.json();
    assert_eq!((json[0]["lane"].as_str(), json[0]["waiting"].as_i64()), (Some("account-1"), Some(3)));
    assert_eq!(json[0]["head_attempts"], 1);
    assert!(json[0]["parked_reason"].as_str().unwrap().contains(REFUSAL));

    let dry = relayer(&db, &["lanes", "release", "account-1", "--dry-run"]).await;
    assert!(dry.ok().contains("dry run: would release"), "{dry:?}");
    assert_eq!(count(&client, &db, "lanes", "parked_at IS NOT NULL").await, 1);

    let released = relayer(&db, &["lanes", "release", "account-1", "--json", "--yes"]).await.json();
    assert_eq!(released["parked"], true);
    assert_eq!(count(&client, &db, "lanes", "parked_at IS NOT NULL").await, 0);
    assert_eq!(
        count(&client, &db, "outbox", "lane = 'account-1' AND attempts = 0").await,
        3,
        "fresh attempts"
    );

    // The head fails again and parks the lane again; this time the operator skips it.
    park_lane(&client, &db, "account-1", 0).await;
    let skipped = relayer(&db, &["lanes", "skip", "account-1", "--actor", "bob", "--yes"]).await;
    assert!(skipped.ok().contains("head moved to the dead table"), "{skipped:?}");
    let dead_head = format!("message_id = '{head}'");
    assert_eq!(count(&client, &db, "dead", &dead_head).await, 1);
    assert_eq!(count(&client, &db, "outbox", &dead_head).await, 0);
    assert_eq!(count(&client, &db, "lanes", "parked_at IS NOT NULL").await, 0);

    let not_parked = relayer(&db, &["lanes", "skip", "account-1", "--yes"]).await;
    assert!(not_parked.ok().contains("is not parked"), "{not_parked:?}");
    let actions: Vec<(String, String, String)> = audit(&client, &db).await;
    assert_eq!(
        actions,
        [
            ("ops-test".to_owned(), "lane.release".to_owned(), "account-1".to_owned()),
            ("bob".to_owned(), "lane.skip_head".to_owned(), "account-1".to_owned()),
        ]
    );
}

/// Completions come from the same description as the parser.
#[tokio::test]
async fn completions_are_generated_for_the_commands() {
    let db = TestDb::new().await;
    let bash = relayer(&db, &["completions", "bash"]).await;
    assert!(bash.ok().contains("dead-letters") && bash.stdout.contains("_relayer"), "{}", bash.stderr);
}
