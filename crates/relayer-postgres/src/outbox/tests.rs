//! The outbox's own tests: channel names, and the claim under a generic plan made on an
//! empty table.
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed test.

use std::time::Duration;

use relayer_core::time::database_micros;
use relayer_core::{Namespace, NewMessage};
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::*;

#[test]
fn channel_is_short_deterministic_and_per_namespace() {
    let a = Namespace::new("a", "relayer_").unwrap();
    let b = Namespace::new("b", "relayer_").unwrap();
    let long = Namespace::new("s".repeat(63), "p".repeat(39)).unwrap();
    assert_eq!(notify_channel(&a), notify_channel(&a.clone()));
    assert_ne!(notify_channel(&a), notify_channel(&b));
    for ns in [&a, &b, &long] {
        let channel = notify_channel(ns);
        assert_eq!(channel.len(), 24, "{channel}");
        assert!(channel.starts_with("relayer_"));
        assert!(channel[8..].chars().all(|c| c.is_ascii_hexdigit()));
    }
}

/// The empty-table plan trap (docs/performance.md, "Raw limits"): a claim planned while the table was empty, kept as a generic plan,
/// must still claim at most `limit` rows once the table fills — with a registry bound
/// (TRN-6) and without one (every transport present).
#[tokio::test]
async fn a_claim_never_exceeds_its_limit_even_under_a_generic_plan_made_on_an_empty_table() {
    for registered in [Some(vec!["queue"]), None] {
        let db = relayer_test_support::TestDb::new().await;
        let mut client = db.connect().await;
        crate::migrate(&mut client, db.namespace()).await.unwrap();
        client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
        let statements = OutboxStatements::new(db.namespace());
        let types =
            [Type::UUID, Type::INT8, Type::INT8, Type::TEXT_ARRAY, Type::TEXT_ARRAY, Type::TEXT_ARRAY];
        let prepared = client.prepare_typed(&statements.claim_due, &types).await.unwrap();
        let empty: Vec<String> = Vec::new();
        let claim_us = database_micros(Duration::from_secs(30));
        for _ in 0..8 {
            let rows = client
                .query(&prepared, &[&Uuid::new_v4(), &claim_us, &5i64, &empty, &empty, &registered])
                .await
                .unwrap();
            assert!(rows.is_empty());
        }
        let writer = OutboxWriter::new(db.namespace(), ["queue"]);
        let batch: Vec<NewMessage> =
            (0..2000).map(|n| NewMessage::new("queue", "d", vec![u8::try_from(n % 250).unwrap()])).collect();
        writer.enqueue(&client, &batch).await.unwrap();
        let mut total = 0;
        loop {
            let rows = client
                .query(&prepared, &[&Uuid::new_v4(), &claim_us, &5i64, &empty, &empty, &registered])
                .await
                .unwrap();
            assert!(rows.len() <= 5, "claimed {} rows with limit 5 ({registered:?})", rows.len());
            if rows.is_empty() {
                break;
            }
            total += rows.len();
            if total >= 50 {
                break;
            }
        }
        assert_eq!(total, 50, "{registered:?}");
    }
}
