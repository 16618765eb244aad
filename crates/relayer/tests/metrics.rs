//! OBS-2 against a real PostgreSQL and a real recorder (the Prometheus exporter's, installed
//! for this test binary): after real passes, each counter holds exactly what the workers
//! did — emitted once, by the facade, never again by a worker crate.
//!
//! The recorder is global to this binary, so each test owns its label values (its queues).
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::{
    ConsumerOptions, DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, MessageId,
    NewMessage, Relayer,
};
use relayer_test_support::{TestDb, eventually};

/// The recorder every host of this binary reports to.
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
}

/// The value of the one sample of `name` whose line contains every fragment, if any.
fn sample(name: &str, fragments: &[&str]) -> Option<f64> {
    let text = recorder().render();
    let mut found = text
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| fragments.iter().all(|fragment| line.contains(fragment)));
    let value = found.next().and_then(|line| line.rsplit(' ').next()).and_then(|v| v.parse().ok());
    assert!(found.next().is_none(), "more than one {name} sample with {fragments:?}:\n{text}");
    value
}

/// Rejects a message the first time it sees it, acks it after its redrive.
#[derive(Default)]
struct RejectOnce(Mutex<HashSet<MessageId>>);

#[relayer::core::async_trait]
impl Handler for RejectOnce {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        if self.0.lock().unwrap().insert(message.id) { Outcome::reject("not yet") } else { Outcome::Ack }
    }
}

/// Rejects everything.
struct RejectAll;

#[relayer::core::async_trait]
impl Handler for RejectAll {
    async fn handle(&self, _message: &QueueMessage) -> Outcome {
        Outcome::reject("never")
    }
}

fn subscription(queue: &str) -> Subscription {
    let options = ConsumerOptions::builder().poll_interval(Duration::from_millis(50)).build().unwrap();
    Subscription::new(queue, options).unwrap()
}

/// OBS-2, DLP-5: a consumer and the dead-letter policies run for real — four orders rejected
/// once, redriven by their policy, then handled; two audit messages rejected and expired.
/// Each counter is exact (the policy worker's moves are counted once, by the facade), the
/// consumer's counters and handler durations are exported per queue, and the stuck gauge
/// is set per type.
#[tokio::test]
async fn consumers_and_dead_letter_policies_export_exact_counts_obs_2() {
    recorder();
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let (orders, audit) = ("metrics-orders", "metrics-audit");
    let day = Duration::from_secs(86_400);
    let policies = DeadLetterPolicies::new([
        DeadLetterRule::queue(
            orders,
            format!("{orders}.dead_letters"),
            DeadLetterPolicy::redrive(Duration::ZERO, day).unwrap(),
        ),
        DeadLetterRule::queue(
            audit,
            format!("{audit}.dead_letters"),
            DeadLetterPolicy::expire(Duration::ZERO),
        ),
    ])
    .unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .consumer(subscription(orders), Arc::new(RejectOnce::default()))
        .consumer(subscription(audit), Arc::new(RejectAll))
        .dead_letters(
            policies,
            DeadLetterOptions::builder().interval(Duration::from_millis(100)).build().unwrap(),
        )
        .start()
        .await
        .unwrap();
    let messages: Vec<NewMessage> = (0..4)
        .map(|n| NewMessage::new("queue", orders, vec![n]))
        .chain((0..2).map(|n| NewMessage::new("queue", audit, vec![n])))
        .collect();
    host.queue_writer().enqueue(&client, &messages).await.unwrap();

    let (orders_stats, audit_stats) =
        (host.consumer_stats(orders).unwrap(), host.consumer_stats(audit).unwrap());
    let dead_letters = format!("SELECT count(*) FROM {} WHERE queue = $1", db.namespace().table("queue"));
    let audit_dead = format!("{audit}.dead_letters");
    eventually("orders are handled after their redrive, audit messages expired", || async {
        let expired = audit_stats.snapshot().dead_lettered == 2
            && client.query_one(&dead_letters, &[&audit_dead]).await.unwrap().get::<_, i64>(0) == 0;
        orders_stats.snapshot().acked == 4 && expired
    })
    .await;
    host.shutdown().await;

    let dead_letter = "worker=\"dead_letter\"";
    let orders_type = format!("type=\"queue:{orders}/{orders}.dead_letters\"");
    let audit_type = format!("type=\"queue:{audit}/{audit}.dead_letters\"");
    let orders_label = format!("queue=\"{orders}\"");
    let audit_label = format!("queue=\"{audit}\"");
    eventually("the last counts are exported once the workers stopped", || async {
        sample("relayer_messages_total", &["outcome=\"acked\"", &orders_label]) == Some(4.0)
            && sample("relayer_messages_total", &[dead_letter, "outcome=\"expired\"", &audit_type])
                == Some(2.0)
    })
    .await;
    let counter = |fragments: &[&str]| sample("relayer_messages_total", fragments);
    assert_eq!(counter(&[dead_letter, "outcome=\"redriven\"", &orders_type]), Some(4.0));
    assert_eq!(counter(&[dead_letter, "outcome=\"redriven\"", &audit_type]), Some(0.0));
    assert_eq!(counter(&[dead_letter, "outcome=\"expired\"", &orders_type]), Some(0.0));
    for (outcome, count) in [("received", 8.0), ("acked", 4.0), ("dead", 4.0), ("requeued", 0.0)] {
        let outcome = format!("outcome=\"{outcome}\"");
        assert_eq!(counter(&["worker=\"consumer\"", &orders_label, &outcome]), Some(count), "{outcome}");
    }
    assert_eq!(counter(&["worker=\"consumer\"", &audit_label, "outcome=\"dead\""]), Some(2.0));
    let calls = |queue: &str, outcome: &str| {
        sample("relayer_handler_duration_seconds_count", &[queue, &format!("outcome=\"{outcome}\"")])
    };
    assert_eq!((calls(&orders_label, "reject"), calls(&orders_label, "ack")), (Some(4.0), Some(4.0)));
    assert_eq!(calls(&audit_label, "reject"), Some(2.0));
    assert_eq!(sample("relayer_dead_letters_stuck", &[&orders_type]), Some(0.0));
    let text = recorder().render();
    for gone in ["relayer_dead_letters_redriven_total", "relayer_dead_letters_expired_total"] {
        assert!(!text.contains(gone), "{gone} counts the moves a second time:\n{text}");
    }
}
