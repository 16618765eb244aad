//! Receipts, the inbox boundary and direct enqueue against a real PostgreSQL (QUE-3, QUE-4,
//! QUE-5), and exactly one effect per message under redelivery and concurrent pumps.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{count, enqueue, enqueue_messages, fast, pool, setup, start};
use relayer_consumer::{Handling, InboxHandler, Outcome, Subscription};
use relayer_core::{Delivery, MessageId, MessageProblem, NewMessage};
use relayer_postgres::{
    ConsumeStatements, DeadLetter, EnqueueError, Heard, Inbox, InboxEntry, PgSession, QueueMessage,
    QueueWriter, Requeue, listen,
};
use relayer_test_support::{TestDb, eventually, within};
use tokio_util::sync::CancellationToken;

/// QUE-5: once a reader's visibility lapsed and another reader received the message, the
/// first reader's ack, requeue, dead-letter and heartbeat match nothing; the second's ack
/// deletes it.
#[tokio::test]
async fn a_reader_whose_visibility_lapsed_cannot_settle_another_readers_copy_que_5() {
    let db = setup().await;
    enqueue(&db, "orders", 1).await;
    let client = db.connect().await;
    let statements = ConsumeStatements::new(db.namespace());
    let visibility = Duration::from_secs(30);
    let first = statements.receive(&client, "orders", 10, visibility).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(statements.receive(&client, "orders", 10, visibility).await.unwrap().is_empty(), "invisible");
    // The first reader's visibility lapses (a state no component produces on demand).
    client
        .execute(
            &format!("UPDATE {} SET visible_at = now() - interval '1 second'", db.namespace().table("queue")),
            &[],
        )
        .await
        .unwrap();
    let second = statements.receive(&client, "orders", 10, visibility).await.unwrap();
    assert_eq!(second.len(), 1);
    let (stale, fresh) = (first[0].receipt, second[0].receipt);
    assert_eq!(stale.seq, fresh.seq);
    assert_ne!(stale.token, fresh.token);
    assert!(statements.ack(&client, &[stale]).await.unwrap().is_empty());
    assert!(
        statements
            .requeue(&client, &[Requeue { receipt: stale, delay: Duration::ZERO }])
            .await
            .unwrap()
            .is_empty()
    );
    let dead = DeadLetter {
        receipt: stale,
        queue: "dead".into(),
        reason: relayer_core::RejectionReason::Rejected,
        message: "stale".into(),
        handled: true,
    };
    assert!(statements.dead_letter(&client, &[dead]).await.unwrap().is_empty());
    assert_eq!(statements.extend(&client, &[stale], visibility).await.unwrap(), 0);
    assert_eq!(count(&db, "orders").await, 1, "the stale reader changed nothing");
    assert_eq!(statements.ack(&client, &[fresh]).await.unwrap(), vec![fresh.seq]);
    assert_eq!(count(&db, "orders").await, 0);
}

/// DRV-1b: a receive prepared while the queue was empty, run under a generic plan, still
/// takes at most its limit.
#[tokio::test]
async fn a_receive_stays_bounded_under_a_generic_plan_made_on_an_empty_queue() {
    let db = setup().await;
    let mut config = db.config();
    config.options("-c plan_cache_mode=force_generic_plan");
    let pool = relayer_postgres::connect_pool(config, 1).await.unwrap();
    let connection = pool.get().await.unwrap();
    let statements = ConsumeStatements::new(db.namespace());
    let visibility = Duration::from_secs(30);
    assert!(statements.receive(&*connection, "orders", 5, visibility).await.unwrap().is_empty());
    enqueue(&db, "orders", 50).await;
    assert_eq!(statements.receive(&*connection, "orders", 5, visibility).await.unwrap().len(), 5);
}

/// An inbox handler that records its effect in the test schema's `effects` table.
struct Effects {
    insert: String,
    calls: AtomicU32,
    /// Calls per message id.
    seen: std::sync::Mutex<HashMap<MessageId, u32>>,
    /// Per message id, how many of its first calls overrun the deadline (a redelivery).
    slow_first: HashMap<MessageId, u32>,
}

#[relayer_core::async_trait]
impl InboxHandler<PgSession> for Effects {
    async fn handle(&self, tx: &PgSession, message: &QueueMessage) -> Outcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let call = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.entry(message.id).or_insert(0);
            *n += 1;
            *n
        };
        if let Err(error) = tx.connection().execute(&self.insert, &[message.id.as_uuid()]).await {
            return Outcome::failed(error);
        }
        if self.slow_first.get(&message.id).is_some_and(|n| call <= *n) {
            // Overrun the deadline after writing: the effect must roll back.
            tokio::time::sleep(Duration::from_secs(3_600)).await;
        }
        Outcome::Ack
    }
}

async fn effects_table(db: &TestDb) -> String {
    let client = db.connect().await;
    let table = format!("\"{}\".effects", db.schema());
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (message_id uuid NOT NULL, at timestamptz DEFAULT now())"
        ))
        .await
        .unwrap();
    format!("INSERT INTO {table} (message_id) VALUES ($1)")
}

async fn effects_per_message(db: &TestDb) -> HashMap<relayer_core::Uuid, i64> {
    let client = db.connect().await;
    client
        .query(&format!("SELECT message_id, count(*) FROM \"{}\".effects GROUP BY 1", db.schema()), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// QUE-3: the inbox row is recorded first and commits with the effects and the ack; a
/// message delivered twice (two rows with one id) has one effect, and the duplicate is
/// acked without calling the handler.
#[tokio::test]
async fn the_inbox_records_first_and_commits_effects_with_the_ack_que_3() {
    let db = setup().await;
    let insert = effects_table(&db).await;
    let message = NewMessage::new("queue", "billing", b"{}".to_vec());
    enqueue_messages(&db, &[message.clone(), message.clone()]).await;
    let handler = Arc::new(Effects {
        insert,
        calls: AtomicU32::new(0),
        seen: Default::default(),
        slow_first: HashMap::new(),
    });
    let handling = Handling::Inbox(Arc::clone(&handler) as Arc<dyn InboxHandler<PgSession>>);
    let running = start(
        &db,
        pool(&db, "p", 5).await.0,
        Subscription::new("billing", fast().build().unwrap()).unwrap(),
        handling,
    )
    .await;
    eventually("both deliveries are acked", || async { count(&db, "billing").await == 0 }).await;
    let stats = running.stats.snapshot();
    running.stop().await;
    assert_eq!(effects_per_message(&db).await.get(message.message_id().as_uuid()), Some(&1));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "the duplicate never reached the handler");
    assert_eq!((stats.acked, stats.duplicates), (2, 1));
    let inbox = db
        .connect()
        .await
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table("inbox")), &[])
        .await
        .unwrap();
    assert_eq!(inbox.get::<_, i64>(0), 1);
}

/// QUE-3: the inbox on its own, for a message from any broker: the first record says run
/// the effects, a later one says duplicate, and a concurrent one waits for the first
/// transaction and then says duplicate; a rolled-back record leaves nothing.
#[tokio::test]
async fn the_inbox_is_usable_on_its_own_for_any_broker_que_3() {
    let db = setup().await;
    let inbox = Inbox::new(db.namespace());
    let id = MessageId::new();
    let mut a = db.connect().await;
    let mut b = db.connect().await;
    {
        let rolled_back = a.transaction().await.unwrap();
        assert_eq!(inbox.record(&rolled_back, "billing", id).await.unwrap(), InboxEntry::First);
    }
    let tx_a = a.transaction().await.unwrap();
    assert!(inbox.record(&tx_a, "billing", id).await.unwrap().is_first());
    let inbox_b = inbox.clone();
    let concurrent = tokio::spawn(async move {
        let tx_b = b.transaction().await.unwrap();
        let entry = inbox_b.record(&tx_b, "billing", id).await.unwrap();
        tx_b.commit().await.unwrap();
        entry
    });
    tokio::time::sleep(Duration::from_millis(100)).await; // let it reach the row lock; not asserted
    tx_a.commit().await.unwrap();
    assert_eq!(within(concurrent).await.unwrap(), InboxEntry::Duplicate);
    assert_eq!(inbox.record(&a, "other-consumer", id).await.unwrap(), InboxEntry::First, "per consumer");
    assert!(inbox.record(&a, "", id).await.is_err(), "an empty consumer name is refused");
}

/// QUE-3, QUE-5: handlers writing to the same database through the inbox, four pumps at
/// once, duplicate deliveries and handlers that overrun after writing (so their message
/// is redelivered): exactly one effect per message.
#[tokio::test]
async fn a_handler_writing_to_the_same_database_has_exactly_one_effect_per_message_que_3() {
    let db = setup().await;
    let insert = effects_table(&db).await;
    let messages: Vec<NewMessage> = (0..120).map(|n| NewMessage::new("queue", "billing", vec![n])).collect();
    let mut delivered = messages.clone();
    delivered.extend(messages.iter().step_by(3).cloned()); // a third delivered twice
    enqueue_messages(&db, &delivered).await;
    let slow_first: HashMap<MessageId, u32> =
        messages.iter().step_by(10).map(|m| (m.message_id(), 1)).collect();
    let handler =
        Arc::new(Effects { insert, calls: AtomicU32::new(0), seen: Default::default(), slow_first });
    let options = fast().concurrency(4).handler_deadline(Duration::from_millis(300)).build().unwrap();
    let subscription = Subscription::new("billing", options).unwrap();
    let mut pumps = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let handling = Handling::Inbox(Arc::clone(&handler) as Arc<dyn InboxHandler<PgSession>>);
        pumps.push(start(&db, pool(&db, name, 7).await.0, subscription.clone(), handling).await);
    }
    eventually("every delivery is acked", || async { count(&db, "billing").await == 0 }).await;
    let mut overran = 0;
    for pump in pumps {
        overran += pump.stats.snapshot().overran;
        pump.stop().await;
    }
    assert_eq!(overran, 12, "each slow message was redelivered once");
    let effects = effects_per_message(&db).await;
    assert_eq!(effects.len(), messages.len());
    for message in &messages {
        assert_eq!(effects.get(message.message_id().as_uuid()), Some(&1), "{}", message.message_id());
    }
    assert_eq!(count(&db, "billing.dead_letters").await, 0);
}

/// QUE-4: a direct write is part of the caller's transaction (rolled back: never
/// received), schedules through `visible_at`, is validated like the outbox writer's (a
/// lane or another transport refuses the whole batch), and its NOTIFY reaches a listener
/// in another session on commit — at most once per interval per queue.
#[tokio::test]
async fn direct_enqueue_is_transactional_scheduled_validated_and_wakes_other_sessions_que_4() {
    let db = setup().await;
    let writer = QueueWriter::new(db.namespace(), "queue").with_notify_interval(Duration::from_secs(3_600));
    let (heard_tx, mut heard_rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let backoff =
        relayer_core::PassBackoff::new(Duration::from_millis(100), Duration::from_millis(100)).unwrap();
    let listener =
        tokio::spawn(listen(db.config(), writer.channel().to_owned(), backoff, stop.clone(), move |heard| {
            if let Heard::Notification(queue) = heard {
                let _ = heard_tx.send(queue.to_owned());
            }
            if heard == Heard::Connected {
                let _ = heard_tx.send(String::new());
            }
        }));
    assert_eq!(within(heard_rx.recv()).await.unwrap(), "", "listening");

    let mut client = db.connect().await;
    // Its own writer: a rolled-back write uses up its writer's notification for the interval.
    let tx = client.transaction().await.unwrap();
    QueueWriter::new(db.namespace(), "queue")
        .enqueue(&tx, &[NewMessage::new("queue", "orders", b"a".to_vec())])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count(&db, "orders").await, 0, "rolled back, never written");

    let tx = client.transaction().await.unwrap();
    let written = writer
        .enqueue(
            &tx,
            &[
                NewMessage::new("queue", "orders", b"now".to_vec()),
                NewMessage::new("queue", "orders", b"later".to_vec())
                    .delivery(Delivery::After(Duration::from_secs(3_600))),
            ],
        )
        .await
        .unwrap();
    assert_eq!(written.len(), 2);
    tx.commit().await.unwrap();
    assert_eq!(within(heard_rx.recv()).await.unwrap(), "orders", "the commit notified the queue");

    // Within the interval: written; a second NOTIFY only after a quiet gap.
    let tx = client.transaction().await.unwrap();
    writer.enqueue(&tx, &[NewMessage::new("queue", "orders", b"quiet".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();

    let statements = ConsumeStatements::new(db.namespace());
    let received = statements.receive(&client, "orders", 10, Duration::from_secs(30)).await.unwrap();
    let bodies: Vec<Vec<u8>> = received.iter().map(|r| r.message.as_ref().unwrap().body.clone()).collect();
    assert_eq!(bodies, vec![b"now".to_vec(), b"quiet".to_vec()], "the scheduled message is not visible yet");
    assert_eq!(count(&db, "orders").await, 3);

    for (bad, problem) in [
        (NewMessage::new("queue", "orders", vec![]).lane("l"), MessageProblem::LaneOnDirectQueue),
        (NewMessage::new("nats", "orders", vec![]), MessageProblem::UnknownTransport("nats".into())),
    ] {
        let error =
            writer.enqueue(&client, &[NewMessage::new("queue", "orders", vec![]), bad]).await.unwrap_err();
        match error {
            EnqueueError::Invalid(error) => assert_eq!((error.index(), error.problem()), (1, &problem)),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(count(&db, "orders").await, 3, "a refused batch writes nothing");
    stop.cancel();
    within(listener).await.unwrap();
    // The second write comes after a round trip to the listener, so it may follow a quiet
    // gap (NOTIFY_AFTER_QUIET) and notify again; the throttle allows it one NOTIFY at most,
    // for the same queue. The refused batches wrote nothing and notified nobody.
    let mut more = Vec::new();
    while let Ok(queue) = heard_rx.try_recv() {
        more.push(queue);
    }
    assert!(more.len() <= 1 && more.iter().all(|queue| queue == "orders"), "{more:?}");
}
