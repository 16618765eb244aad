//! A queue redrive wakes the original topic's consumers (issue 25, item 4): the operator's
//! redrive (`DeadLetterApi::redrive_queue`, DLP-7) and the policy worker's (DLP-3) send the
//! queue channel's NOTIFY in their own statement, so a listening consumer takes a redriven
//! message at once. The consumers here poll once an hour: only the NOTIFY can bring the
//! redriven message to them before the test's patience (a minute) runs out.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::postgres::{DeadLetterApi, Mode, QueueDeadLetterFilter};
use relayer::{
    ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, NewMessage,
    Relayer,
};
use relayer_test_support::{TestDb, eventually};

/// Rejects each message's first delivery (to the dead-letter queue), acks the next.
#[derive(Default)]
struct RejectFirst {
    deliveries: AtomicUsize,
}

#[relayer::core::async_trait]
impl Handler for RejectFirst {
    async fn handle(&self, _message: &QueueMessage) -> Outcome {
        if self.deliveries.fetch_add(1, Ordering::SeqCst) == 0 {
            Outcome::reject("first delivery: rejected on purpose")
        } else {
            Outcome::Ack
        }
    }
}

/// A subscription of "orders" that polls once an hour: it wakes on NOTIFY or not at all.
fn hourly() -> Subscription {
    let options = ConsumerOptions::builder().poll_interval(Duration::from_secs(3_600)).build().unwrap();
    Subscription::new("orders", options).unwrap()
}

async fn dead_letters(db: &TestDb, client: &tokio_postgres::Client, dead_letter_queue: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {} WHERE queue = $1", db.namespace().table("queue"));
    client.query_one(&sql, &[&dead_letter_queue]).await.unwrap().get(0)
}

/// Writes one message straight into "orders" (its commit notifies the consumer).
async fn write_one(host: &relayer::RelayerHost, client: &mut tokio_postgres::Client) {
    let tx = client.transaction().await.unwrap();
    host.queue_writer().enqueue(&tx, &[NewMessage::new("queue", "orders", b"order".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn an_operator_redrive_wakes_a_consumer_that_polls_hourly_dlp_7() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let handler = Arc::new(RejectFirst::default());
    let subscription = hourly();
    let dead_letter_queue = subscription.dead_letter_queue().to_owned();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .consumer(subscription, Arc::clone(&handler))
        .start()
        .await
        .unwrap();
    write_one(&host, &mut client).await;
    eventually("the first delivery is rejected into the dead-letter queue", || async {
        dead_letters(&db, &client, &dead_letter_queue).await == 1
    })
    .await;

    let filter = QueueDeadLetterFilter::new().queue(dead_letter_queue.as_str());
    let moved = DeadLetterApi::new(db.namespace())
        .redrive_queue(&client, &filter, "test", Mode::Apply)
        .await
        .unwrap();
    assert_eq!(moved.len(), 1);
    eventually("the redriven message is delivered again, woken by the redrive's NOTIFY", || async {
        handler.deliveries.load(Ordering::SeqCst) == 2
    })
    .await;
    let stats = host.consumer_stats("orders").unwrap().snapshot();
    host.shutdown().await;
    assert_eq!(stats.acked, 1);
    assert_eq!(dead_letters(&db, &client, &dead_letter_queue).await, 0);
}

#[tokio::test]
async fn a_policy_redrive_wakes_a_consumer_that_polls_hourly_dlp_3() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let handler = Arc::new(RejectFirst::default());
    let subscription = hourly();
    let redrive = DeadLetterPolicy::redrive(Duration::ZERO, Duration::from_secs(3_600)).unwrap();
    let rules = vec![DeadLetterRule::queue("orders", subscription.dead_letter_queue(), redrive)];
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .consumer(subscription, Arc::clone(&handler))
        .dead_letters(
            DeadLetterPolicies::new(rules).unwrap(),
            DeadLetterOptions::builder().interval(Duration::from_secs(1)).build().unwrap(),
        )
        .start()
        .await
        .unwrap();
    write_one(&host, &mut client).await;
    eventually("the message is rejected, redriven by the policy and delivered again", || async {
        handler.deliveries.load(Ordering::SeqCst) == 2
    })
    .await;
    let stats = host.consumer_stats("orders").unwrap().snapshot();
    host.shutdown().await;
    assert_eq!((stats.acked, stats.dead_lettered), (1, 1), "{stats:?}");
}
