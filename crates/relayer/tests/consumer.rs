//! The host's queue consumers against a real PostgreSQL (§10, OPT-5): a message enqueued
//! through the outbox and dispatched to relayer's queue, and one written straight into the
//! queue (QUE-4), are both handled by the host's pump; two subscriptions of one queue are
//! refused at start, before anything runs.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::{ConsumerOptions, DispatcherOptions, NewMessage, Relayer, StartError};
use relayer_test_support::{TestDb, eventually};

#[derive(Default)]
struct Bodies(Mutex<Vec<Vec<u8>>>);

#[relayer::core::async_trait]
impl Handler for Bodies {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        self.0.lock().unwrap().push(message.body.clone());
        Outcome::Ack
    }
}

fn subscription() -> Subscription {
    let options = ConsumerOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap();
    Subscription::new("orders", options).unwrap()
}

#[tokio::test]
async fn the_host_runs_a_pump_for_outbox_and_direct_messages_que_1_que_4() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let bodies = Arc::new(Bodies::default());
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap())
        .consumer(subscription(), Arc::clone(&bodies))
        .start()
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[NewMessage::new("queue", "orders", b"via outbox".to_vec())]).await.unwrap();
    host.queue_writer()
        .enqueue(&tx, &[NewMessage::new("queue", "orders", b"direct".to_vec())])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    eventually("both messages are handled", || async { bodies.0.lock().unwrap().len() == 2 }).await;
    let stats = host.consumer_stats("orders").unwrap();
    host.shutdown().await;
    let mut handled = bodies.0.lock().unwrap().clone();
    handled.sort();
    assert_eq!(handled, vec![b"direct".to_vec(), b"via outbox".to_vec()]);
    assert_eq!(stats.snapshot().acked, 2);
}

#[tokio::test]
async fn two_subscriptions_of_one_queue_are_refused_at_start_opt_5() {
    let db = TestDb::new().await; // not even migrated: the check comes before the database
    let error = Relayer::builder(db.config(), db.namespace().clone())
        .consumer(subscription(), Arc::new(Bodies::default()))
        .consumer(subscription(), Arc::new(Bodies::default()))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, StartError::Subscription { .. }), "{error:?}");
    assert!(error.to_string().contains("\"orders\" has two subscriptions"), "{error}");
}

/// QUE-2, OPT-5: subscriptions whose dead-letter queues lead back to each other (A → B →
/// A) are refused at start, naming the cycle, before anything runs.
#[tokio::test]
async fn dead_letter_queues_forming_a_cycle_are_refused_at_start_que_2() {
    let db = TestDb::new().await; // not even migrated: the check comes before the database
    let options = || ConsumerOptions::builder().build().unwrap();
    let a = Subscription::new("a", options()).unwrap().with_dead_letter_queue("b").unwrap();
    let b = Subscription::new("b", options()).unwrap().with_dead_letter_queue("a").unwrap();
    let error = Relayer::builder(db.config(), db.namespace().clone())
        .consumer(a, Arc::new(Bodies::default()))
        .consumer(b, Arc::new(Bodies::default()))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, StartError::DeadLetterCycle { .. }), "{error:?}");
    assert!(error.to_string().contains(r#"dead-letter queues form a cycle: "a" → "b" → "a""#), "{error}");
}

/// RES-5: a consumer's short visibility timeout bounds its own pool only. A sweeper pass
/// holds its transaction idle while the transport sends (here 3 s, longer than the 2 s the
/// maintenance pool's idle-transaction bound once was with a 2 s visibility timeout), and
/// still completes: the row leaves the outbox instead of being sent again on every pass.
#[tokio::test]
async fn a_sweep_whose_send_outlasts_a_consumers_visibility_timeout_still_completes_res_5() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let mut slow = relayer_test_support::FaultyTransport::new("slow");
    slow.delay = Duration::from_secs(3);
    let slow = Arc::new(slow);
    let sweeper = relayer::SweeperOptions::builder()
        .sweep_interval(Duration::from_millis(100))
        .recovery_delay(Duration::ZERO)
        .build()
        .unwrap();
    let options = ConsumerOptions::builder()
        .poll_interval(Duration::from_millis(100))
        .visibility_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .transport(Arc::clone(&slow) as Arc<dyn relayer::core::Transport>)
        .sweeper(sweeper)
        .consumer(Subscription::new("orders", options).unwrap(), Arc::new(Bodies::default()))
        .start()
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[NewMessage::new("slow", "invoices", b"held".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
    let outbox = format!("SELECT count(*) FROM {}", db.namespace().table("outbox"));
    eventually("the swept row is completed, not only sent", || async {
        client.query_one(&outbox, &[]).await.unwrap().get::<_, i64>(0) == 0
    })
    .await;
    assert!(!slow.accepted().is_empty());
    host.shutdown().await;
}
