//! The sidecar's bounded gauge read against a real PostgreSQL (OBS-2): under its cap it
//! agrees with `relayer status` exactly; over it, it reads the oldest rows only and scales
//! their counts to the table's estimated size, the oldest ages still exact.
#![allow(clippy::unwrap_used)]

use relayer_core::NewMessage;
use relayer_postgres::{OutboxWriter, migrate, namespace_gauges, namespace_status};
use relayer_test_support::TestDb;

#[tokio::test]
async fn gauges_are_exact_under_the_cap_and_scaled_estimates_over_it_obs_2() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    // Interleaved, so the oldest rows hold both destinations alike.
    for n in 0..30 {
        let destination = if n % 2 == 0 { "orders" } else { "invoices" };
        writer.enqueue(&client, &[NewMessage::new("queue", destination, vec![1])]).await.unwrap();
    }
    client.batch_execute(&format!("ANALYZE {}", db.namespace().table("outbox"))).await.unwrap();
    let exact = namespace_status(&client, db.namespace()).await.unwrap();
    let counts = |status: &relayer_postgres::NamespaceStatus| -> Vec<(String, i64)> {
        let mut counts: Vec<(String, i64)> =
            status.backlog.iter().map(|b| (b.destination.clone(), b.pending)).collect();
        counts.sort();
        counts
    };

    let whole = namespace_gauges(&client, db.namespace(), 1_000).await.unwrap();
    assert_eq!(counts(&whole), counts(&exact));
    assert_eq!((whole.outbox_pending, whole.oldest_pending_age.is_some()), (30, true));

    let capped = namespace_gauges(&client, db.namespace(), 10).await.unwrap();
    assert_eq!(
        counts(&capped),
        [("invoices".to_owned(), 15), ("orders".to_owned(), 15)],
        "5 of each, × 30/10"
    );
    let oldest = |status: &relayer_postgres::NamespaceStatus, destination: &str| {
        status.backlog.iter().find(|b| b.destination == destination).unwrap().oldest_age.unwrap()
    };
    // The capped read comes later: its ages are at least the exact read's.
    assert!(oldest(&capped, "orders") >= oldest(&exact, "orders"));
    assert!(capped.oldest_pending_age >= exact.oldest_pending_age);
}
