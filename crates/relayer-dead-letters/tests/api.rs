//! The dead-letter API against a real PostgreSQL (DLP-7): list, show, redrive and purge,
//! one by id or a filtered set, each action audited, with dry runs; for the queue's dead
//! letters and the outbox's dead table.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use std::time::Duration;

use common::{DAY, count, db_now, dead_letter, dead_lettered_ago, failing_dispatcher, in_queue, send, setup};
use relayer_core::{MessageId, NewMessage, StoreSource};
use relayer_postgres::{
    DeadLetterApi, DeadLetterApiError, Mode, OutboxDeadFilter, OutboxWriter, QueueDeadLetterFilter, Touched,
};
use relayer_test_support::TestDb;
use serde_json::Value;
use tokio_postgres::Client;

/// The audit rows, oldest first: (actor, action, subject, detail, at is set).
async fn audit(client: &Client, db: &TestDb) -> Vec<(String, String, String, Value)> {
    let sql = format!(
        "SELECT actor, action, subject, detail, at IS NOT NULL FROM {} ORDER BY id",
        db.namespace().table("audit")
    );
    client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| {
            assert!(row.get::<_, bool>(4), "every audit row says when");
            (row.get(0), row.get(1), row.get(2), row.get(3))
        })
        .collect()
}

fn touched_ids(touched: &[Touched]) -> Vec<MessageId> {
    touched.iter().map(|t| t.message_id).collect()
}

/// DLP-7: listings filter by queue, topic, reason and age, page by keyset, and show one
/// dead letter whole; bad limits are refused naming the field.
#[tokio::test]
async fn queue_dead_letters_are_listed_by_filter_paged_by_keyset_and_shown_dlp_7() {
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    let orders = send(&db, "orders", 5, now).await;
    send(&db, "invoices", 2, now).await;
    send(&db, "pending", 1, now).await; // a live message: not a dead letter
    dead_letter(&client, &db, "orders", "dead", "handler", 3).await;
    dead_letter(&client, &db, "orders", "dead", "max_handled", 2).await;
    dead_letter(&client, &db, "invoices", "billing.dead", "handler", 2).await;
    dead_lettered_ago(&client, &db, "billing.dead", "invoices", DAY).await;
    let api = DeadLetterApi::new(db.namespace());

    let all = api.list_queue(&*client, &QueueDeadLetterFilter::new()).await.unwrap();
    assert_eq!(all.len(), 7);
    let count_of = |filter: QueueDeadLetterFilter| {
        let api = api.clone();
        let client = &client;
        async move { api.list_queue(&**client, &filter).await.unwrap().len() }
    };
    assert_eq!(count_of(QueueDeadLetterFilter::new().queue("dead")).await, 5);
    assert_eq!(count_of(QueueDeadLetterFilter::new().original_topic("invoices")).await, 2);
    assert_eq!(count_of(QueueDeadLetterFilter::new().queue("dead").reason("max_handled")).await, 2);
    assert_eq!(count_of(QueueDeadLetterFilter::new().older_than(Duration::from_secs(3_600))).await, 2);

    // Keyset paging: pages of two, each after the last seq seen, cover every row once.
    let mut seen = Vec::new();
    let mut filter = QueueDeadLetterFilter::new().queue("dead").limit(2);
    loop {
        let page = api.list_queue(&*client, &filter).await.unwrap();
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 2);
        filter = filter.after_seq(last.seq);
        seen.extend(page.iter().map(|letter| letter.message_id));
    }
    assert_eq!(seen, orders, "in seq order, each once");

    let shown = api.show_queue(&*client, orders[4]).await.unwrap().unwrap();
    assert_eq!((shown.queue.as_str(), shown.original_topic.as_deref()), ("dead", Some("orders")));
    assert_eq!(shown.rejection_reason.as_deref(), Some("max_handled"));
    assert_eq!(shown.rejection_message.as_deref(), Some("handler gave up"));
    assert_eq!(shown.body, b"orders #4");
    assert_eq!(shown.headers.get("kind").map(String::as_str), Some("orders"));
    assert!(shown.trace_context.is_some() && shown.dead_lettered_at >= shown.created_at);
    assert!(api.show_queue(&*client, MessageId::new()).await.unwrap().is_none());

    // `relayer status` counts them per dead-letter queue, topic and reason (OBS-3).
    let status = relayer_postgres::namespace_status(&*client, db.namespace()).await.unwrap();
    let counts: Vec<(&str, Option<&str>, Option<&str>, i64)> = status
        .dead_letters
        .iter()
        .map(|c| (c.queue.as_str(), c.original_topic.as_deref(), c.reason.as_deref(), c.count))
        .collect();
    assert_eq!(
        counts,
        [
            ("billing.dead", Some("invoices"), Some("handler"), 2),
            ("dead", Some("orders"), Some("handler"), 3),
            ("dead", Some("orders"), Some("max_handled"), 2),
        ]
    );

    let error = api.list_queue(&*client, &QueueDeadLetterFilter::new().limit(0)).await.unwrap_err();
    assert_eq!(error.to_string(), "dead letters: limit: 0 is out of range (1..=10000)");
}

/// DLP-7: redrive and purge one dead letter by id; each action writes its audit row (who,
/// when, what) with the action; a dry run returns the same rows and changes nothing.
#[tokio::test]
async fn one_dead_letter_is_redriven_or_purged_by_id_and_each_action_is_audited_dlp_7() {
    let (db, client) = setup().await;
    let ids = send(&db, "orders", 2, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 2).await;
    let api = DeadLetterApi::new(db.namespace());

    let one = QueueDeadLetterFilter::message(ids[0]);
    let would = api.redrive_queue(&*client, &one, "ops:alice", Mode::DryRun).await.unwrap();
    assert_eq!(touched_ids(&would), [ids[0]]);
    assert_eq!((in_queue(&client, &db, "dead").await, audit(&client, &db).await.len()), (2, 0), "dry run");

    let moved = api.redrive_queue(&*client, &one, "ops:alice", Mode::Apply).await.unwrap();
    assert_eq!(moved, would);
    let back = client
        .query_one(
            &format!(
                "SELECT queue, handled_count, original_topic IS NULL AND dead_lettered_at IS NULL \
                 FROM {} WHERE message_id = $1",
                db.namespace().table("queue")
            ),
            &[ids[0].as_uuid()],
        )
        .await
        .unwrap();
    assert_eq!(
        (back.get::<_, String>(0), back.get::<_, i32>(1), back.get::<_, bool>(2)),
        ("orders".into(), 0, true)
    );

    let purged = api
        .purge_queue(&*client, &QueueDeadLetterFilter::message(ids[1]), "ops:bob", Mode::Apply)
        .await
        .unwrap();
    assert_eq!(touched_ids(&purged), [ids[1]]);
    assert_eq!(in_queue(&client, &db, "dead").await, 0);

    let records = audit(&client, &db).await;
    assert_eq!(records.len(), 2);
    let (actor, action, subject, detail) = &records[0];
    assert_eq!((actor.as_str(), action.as_str()), ("ops:alice", "dead_letter.redrive"));
    assert_eq!(subject, &ids[0].to_string());
    assert_eq!((detail["queue"].as_str(), detail["original_topic"].as_str()), (Some("dead"), Some("orders")));
    assert_eq!(detail["reason"].as_str(), Some("handler"));
    assert!(detail["filter"].as_str().unwrap().contains(&ids[0].to_string()), "{detail}");
    let (actor, action, subject, _) = &records[1];
    assert_eq!(
        (actor.as_str(), action.as_str(), subject),
        ("ops:bob", "dead_letter.purge", &ids[1].to_string())
    );
}

/// DLP-7: a filtered action takes at most its limit, never redrives a dead letter that has
/// no original topic, and refuses an empty filter or an anonymous actor.
#[tokio::test]
async fn filtered_actions_are_bounded_and_refuse_empty_filters_and_anonymous_actors_dlp_7() {
    let (db, client) = setup().await;
    let now = db_now(&client).await;
    send(&db, "orders", 5, now).await;
    send(&db, "dead", 1, now).await; // no original topic
    dead_letter(&client, &db, "orders", "dead", "handler", 5).await;
    // Stamped by another tool without an original topic: listable, never redriven.
    client
        .execute(
            &format!(
                "UPDATE {} SET dead_lettered_at = now(), rejection_reason = 'handler' \
                 WHERE queue = 'dead' AND original_topic IS NULL",
                db.namespace().table("queue")
            ),
            &[],
        )
        .await
        .unwrap();
    let api = DeadLetterApi::new(db.namespace());
    let filter = QueueDeadLetterFilter::new().queue("dead").reason("handler").limit(4);
    assert_eq!(api.redrive_queue(&*client, &filter, "ops", Mode::Apply).await.unwrap().len(), 4);
    assert_eq!(api.redrive_queue(&*client, &filter, "ops", Mode::Apply).await.unwrap().len(), 1);
    assert!(api.redrive_queue(&*client, &filter, "ops", Mode::Apply).await.unwrap().is_empty());
    assert_eq!(in_queue(&client, &db, "orders").await, 5);
    assert_eq!(in_queue(&client, &db, "dead").await, 1, "the row without an original topic stays");
    assert_eq!(audit(&client, &db).await.len(), 5, "one audit row per message moved");

    for (result, expected) in [
        (
            api.purge_queue(&*client, &QueueDeadLetterFilter::new(), "ops", Mode::Apply).await,
            "dead letters: filter: an action needs at least one criterion (queue, topic, reason, age, id …)",
        ),
        (
            api.purge_queue(&*client, &filter, " ", Mode::Apply).await,
            "dead letters: actor: must name who acts, for the audit record",
        ),
    ] {
        let error = result.unwrap_err();
        assert!(matches!(error, DeadLetterApiError::Invalid(_)));
        assert_eq!(error.to_string(), expected);
    }
    assert_eq!(api.purge_queue(&*client, &filter, "ops", Mode::Apply).await.unwrap().len(), 1);
    assert_eq!(count(&client, &db, "audit").await, 6);
}

/// DLP-7 for the outbox's dead table: list, show, dry-run and redrive one row by id back
/// into the outbox (audited), which the dispatcher then delivers with its identity, headers
/// and context; purge another by filter (audited).
#[tokio::test]
async fn outbox_dead_rows_are_listed_redriven_by_id_delivered_and_purged_with_audit_dlp_7() {
    let (db, client) = setup().await;
    let (dispatcher, transport) = failing_dispatcher(&db).await;
    let writer = OutboxWriter::new(db.namespace(), ["switch"]);
    let messages = [
        NewMessage::new("switch", "orders", b"first".to_vec())
            .header("tenant", "a")
            .trace_context("00-ab-01"),
        NewMessage::new("switch", "orders", b"second".to_vec()),
        NewMessage::new("switch", "audit", b"third".to_vec()),
    ];
    writer.enqueue(&*client, &messages).await.unwrap();
    assert_eq!(dispatcher.run_once().await.unwrap().dead, 3);
    transport.heal();
    let api = DeadLetterApi::new(db.namespace());

    let listed = api.list_outbox(&*client, &OutboxDeadFilter::new().destination("orders")).await.unwrap();
    assert_eq!(
        listed.iter().map(|row| row.message_id).collect::<Vec<_>>(),
        [messages[0].message_id(), messages[1].message_id()]
    );
    let shown = api.show_outbox(&*client, messages[0].message_id()).await.unwrap().unwrap();
    assert_eq!(
        (shown.transport.as_str(), shown.destination.as_str(), shown.attempts),
        ("switch", "orders", 1)
    );
    assert_eq!(shown.last_error.as_deref().map(|e| e.contains("broker refused")), Some(true));
    assert_eq!((shown.body.as_slice(), shown.trace_context.as_deref()), (&b"first"[..], Some("00-ab-01")));

    let one = OutboxDeadFilter::message(messages[0].message_id());
    let would = api.redrive_outbox(&*client, &one, "ops:carol", Mode::DryRun).await.unwrap();
    assert_eq!(
        (would.len(), count(&client, &db, "dead").await, count(&client, &db, "audit").await),
        (1, 3, 0)
    );
    let moved = api.redrive_outbox(&*client, &one, "ops:carol", Mode::Apply).await.unwrap();
    assert_eq!(moved, would);
    assert_eq!((count(&client, &db, "dead").await, count(&client, &db, "outbox").await), (2, 1));
    assert_eq!(dispatcher.run_once().await.unwrap().sent, 1);
    let delivered = transport.accepted();
    assert_eq!(delivered.len(), 1);
    let (destination, envelope) = &delivered[0];
    assert_eq!(
        (destination.as_str(), envelope.id, envelope.body.as_slice()),
        ("orders", messages[0].message_id(), &b"first"[..])
    );
    assert_eq!(envelope.headers.get("tenant").map(String::as_str), Some("a"));
    assert_eq!((envelope.trace_context.as_deref(), envelope.attempts), (Some("00-ab-01"), 0));
    assert_eq!(envelope.created_at, shown.created_at, "creation time preserved");

    let purged = api
        .purge_outbox(&*client, &OutboxDeadFilter::new().destination("audit"), "ops:dave", Mode::Apply)
        .await
        .unwrap();
    assert_eq!(touched_ids(&purged), [messages[2].message_id()]);
    let records = audit(&client, &db).await;
    let summary: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|(actor, action, subject, _)| (actor.as_str(), action.as_str(), subject.as_str()))
        .collect();
    let (first, third) = (messages[0].message_id().to_string(), messages[2].message_id().to_string());
    assert_eq!(
        summary,
        [
            ("ops:carol", "outbox_dead.redrive", first.as_str()),
            ("ops:dave", "outbox_dead.purge", third.as_str())
        ]
    );
    assert_eq!(records[0].3["destination"].as_str(), Some("orders"));
    assert_eq!(records[0].3["attempts"].as_i64(), Some(1));
    assert_eq!(count(&client, &db, "dead").await, 1);
}

/// DLP-7, LAN-5: a skipped lane head in the dead table is left alone by policies, and an
/// operator's redrive puts it back into its lane (behind the lane's writer lock), where the
/// lane dispatcher delivers it after the rows that overtook it.
#[tokio::test]
async fn a_skipped_lane_head_is_left_by_policies_and_redriven_by_hand_into_its_lane_dlp_7() {
    use relayer_core::{DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule};
    let (db, client) = setup().await;
    let (dispatcher, transport) = failing_dispatcher(&db).await;
    let writer = OutboxWriter::new(db.namespace(), ["switch"]);
    let head = NewMessage::new("switch", "orders", b"head".to_vec()).lane("customer-7");
    writer.enqueue(&*client, std::slice::from_ref(&head)).await.unwrap();
    assert_eq!(dispatcher.run_once().await.unwrap().lanes_parked, 1);
    let next = NewMessage::new("switch", "orders", b"next".to_vec()).lane("customer-7");
    writer.enqueue(&*client, std::slice::from_ref(&next)).await.unwrap();
    assert!(dispatcher.skip_lane_head("customer-7", "ops:erin").await.unwrap().is_some());
    transport.heal();

    let policy = DeadLetterPolicy::redrive(Duration::ZERO, DAY).unwrap();
    let worker = relayer_dead_letters::DeadLetterWorker::new(
        relayer_postgres::PgSource::new(
            relayer_postgres::connect_pool(db.config(), 1).await.unwrap(),
            db.namespace(),
        ),
        db.namespace().clone(),
        DeadLetterPolicies::new([DeadLetterRule::outbox("switch", "orders", policy)]).unwrap(),
        DeadLetterOptions::default(),
        relayer_worker::Leadership::EveryInstance,
    );
    assert_eq!(
        worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap().redriven,
        0,
        "policies leave lane rows alone"
    );
    assert_eq!(count(&client, &db, "dead").await, 1);

    let api = DeadLetterApi::new(db.namespace());
    let moved = api
        .redrive_outbox(&*client, &OutboxDeadFilter::new().lane("customer-7"), "ops:erin", Mode::Apply)
        .await
        .unwrap();
    assert_eq!(touched_ids(&moved), [head.message_id()]);
    for _ in 0..3 {
        dispatcher.run_once().await.unwrap();
    }
    let bodies: Vec<(Vec<u8>, Option<String>)> =
        transport.accepted().into_iter().map(|(_, e)| (e.body, e.lane)).collect();
    let lane = Some("customer-7".to_owned());
    assert_eq!(bodies, [(b"next".to_vec(), lane.clone()), (b"head".to_vec(), lane)]);
    let records = audit(&client, &db).await;
    let actions: Vec<&str> = records.iter().map(|(_, action, _, _)| action.as_str()).collect();
    assert_eq!(actions, ["lane.skip_head", "outbox_dead.redrive"]);
    assert_eq!(records[1].3["lane"].as_str(), Some("customer-7"));
}

/// DLP-7, QUE-5: a dead letter that a consumer of its dead-letter queue holds right now
/// (received, visibility not lapsed) is in flight: neither a policy nor a redrive by hand
/// moves it, and its handler's ack still settles it. A dead letter whose reader's
/// visibility lapsed is redriven without its receipt, so that reader's late ack deletes
/// nothing from the queue it went back to.
#[tokio::test]
async fn a_redrive_skips_dead_letters_in_flight_and_clears_their_receipt_dlp_7() {
    let (db, client) = setup().await;
    send(&db, "orders", 4, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "orders.dead", "handler", 3).await;
    let consume = relayer_postgres::ConsumeStatements::new(db.namespace());
    let held = consume.receive(&*client, "orders.dead", 1, Duration::from_secs(600)).await.unwrap();
    let lapsed = consume.receive(&*client, "orders.dead", 1, Duration::ZERO).await.unwrap();
    let receipts = |received: &[relayer_postgres::Received]| -> Vec<relayer_postgres::Receipt> {
        received.iter().map(|r| r.receipt).collect()
    };
    let with_receipt = format!(
        "SELECT count(*) FROM {} WHERE queue = 'orders' AND receipt IS NOT NULL",
        db.namespace().table("queue")
    );

    // The policy worker: the lapsed one and the untouched one go back, the held one stays.
    let rule = relayer_core::DeadLetterRule::queue(
        "orders",
        "orders.dead",
        relayer_core::DeadLetterPolicy::redrive(Duration::ZERO, DAY).unwrap(),
    );
    let worker = common::worker(&db, vec![rule], 10).await;
    let report = worker.run_once(&mut worker.source().open().await.unwrap()).await.unwrap();
    assert_eq!(report.redriven, 2, "{report:?}");
    assert_eq!((in_queue(&client, &db, "orders").await, in_queue(&client, &db, "orders.dead").await), (3, 1));
    assert_eq!(client.query_one(&with_receipt, &[]).await.unwrap().get::<_, i64>(0), 0);
    assert!(consume.ack(&*client, &receipts(&lapsed)).await.unwrap().is_empty(), "a lapsed reader's ack");
    assert_eq!(in_queue(&client, &db, "orders").await, 3);

    // By hand: the same, through the dry run too.
    dead_letter(&client, &db, "orders", "orders.dead", "handler", 1).await;
    let lapsed = consume.receive(&*client, "orders.dead", 1, Duration::ZERO).await.unwrap();
    let api = DeadLetterApi::new(db.namespace());
    let all = QueueDeadLetterFilter::new().queue("orders.dead");
    let lapsed_id = lapsed[0].message.as_ref().unwrap().id;
    let would = api.redrive_queue(&*client, &all, "ops:alice", Mode::DryRun).await.unwrap();
    assert_eq!(touched_ids(&would), [lapsed_id]);
    let moved = api.redrive_queue(&*client, &all, "ops:alice", Mode::Apply).await.unwrap();
    assert_eq!(touched_ids(&moved), [lapsed_id]);
    assert_eq!(client.query_one(&with_receipt, &[]).await.unwrap().get::<_, i64>(0), 0);
    assert!(consume.ack(&*client, &receipts(&lapsed)).await.unwrap().is_empty(), "a lapsed reader's ack");
    assert_eq!(in_queue(&client, &db, "orders").await, 3);

    // The held dead letter was never moved: its handler settles it where it is.
    let held_seq = held[0].receipt.seq;
    assert_eq!(consume.ack(&*client, &receipts(&held)).await.unwrap(), [held_seq]);
    assert_eq!(in_queue(&client, &db, "orders.dead").await, 0);
}

/// DLP-7, LAN-5: every audit row records who acted as the database sees it — the session
/// user (the role that logged in) and the client's address — besides the actor named.
#[tokio::test]
async fn audit_rows_record_the_session_user_and_the_client_address_dlp_7() {
    let (db, client) = setup().await;
    let ids = send(&db, "orders", 1, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 1).await;
    let api = DeadLetterApi::new(db.namespace());
    let one = QueueDeadLetterFilter::message(ids[0]);
    let purged = api.purge_queue(&*client, &one, "ops:alice", Mode::Apply).await.unwrap();
    assert_eq!(touched_ids(&purged), [ids[0]]);

    let sql = format!(
        "SELECT actor, db_user, client_addr::text, db_user = session_user, \
                client_addr IS NOT DISTINCT FROM inet_client_addr() FROM {}",
        db.namespace().table("audit")
    );
    let row = client.query_one(&sql, &[]).await.unwrap();
    let (actor, user, address): (String, Option<String>, Option<String>) =
        (row.get(0), row.get(1), row.get(2));
    assert_eq!(actor, "ops:alice");
    assert_eq!(user.as_deref(), db.config().get_user(), "the session user");
    assert!(row.get::<_, bool>(3) && row.get::<_, bool>(4), "{user:?} {address:?}");
    if db.config().get_hosts().iter().any(|host| matches!(host, tokio_postgres::config::Host::Tcp(_))) {
        assert!(address.is_some(), "a TCP client's address is recorded");
    }
}
