//! Inbox retention (RET-2, RET-5) still holds under a consumer's write load: two cleaners
//! side by side delete every expired inbox row in batches while an inbox-wrapped pump keeps
//! recording new ones, and never touch a fresh row.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{count, enqueue, fast, pool, setup, start};
use relayer_cleanup::Cleanup;
use relayer_consumer::{Handling, InboxHandler, Outcome, Subscription};
use relayer_core::{CleanupOptions, Retention, StoreSource};
use relayer_postgres::{PgSession, PgSource, QueueMessage};
use relayer_worker::Leadership;

struct Noop;

#[relayer_core::async_trait]
impl InboxHandler<PgSession> for Noop {
    async fn handle(&self, _tx: &PgSession, _message: &QueueMessage) -> Outcome {
        Outcome::Ack
    }
}

#[tokio::test]
async fn inbox_cleanup_deletes_every_expired_row_under_a_consumers_write_load_ret_2() {
    let db = setup().await;
    let client = db.connect().await;
    let inbox = db.namespace().table("inbox");
    let expired = 5_000i64;
    client
        .execute(
            &format!(
                "INSERT INTO {inbox} (consumer, message_id, processed_at) \
                 SELECT 'billing', gen_random_uuid(), now() - interval '10 days' FROM generate_series(1, $1::bigint)"
            ),
            &[&expired],
        )
        .await
        .unwrap();
    let messages = 400;
    enqueue(&db, "billing", messages).await;
    let handling = Handling::Inbox(Arc::new(Noop) as Arc<dyn InboxHandler<PgSession>>);
    let pump = start(
        &db,
        pool(&db, "pump", 8).await.0,
        Subscription::new("billing", fast().concurrency(4).build().unwrap()).unwrap(),
        handling,
    )
    .await;

    let options = CleanupOptions::builder()
        .batch_size(100)
        .inbox_retention(Retention::After(Duration::from_secs(86_400)))
        .build()
        .unwrap();
    let mut cleaners = Vec::new();
    for _ in 0..2 {
        let cleanup = Cleanup::new(
            PgSource::new(pool(&db, "cleanup", 1).await.0, db.namespace()),
            db.namespace().clone(),
            options.clone(),
            Leadership::EveryInstance,
        );
        let mut connection = cleanup.source().open().await.unwrap();
        cleaners.push(tokio::spawn(async move {
            let (mut deleted, mut batches) = (0, 0);
            loop {
                let report = cleanup.run_once(&mut connection).await.unwrap();
                deleted += report.inbox_deleted;
                batches += report.batches;
                if report.inbox_deleted == 0 {
                    return (deleted, batches);
                }
            }
        }));
    }
    let mut deleted = 0;
    for cleaner in cleaners {
        let (rows, batches) = relayer_test_support::within(cleaner).await.unwrap();
        deleted += rows;
        assert!(batches >= 1);
    }
    relayer_test_support::eventually("every message is handled", || async {
        count(&db, "billing").await == 0
    })
    .await;
    pump.stop().await;
    assert_eq!(
        deleted,
        u64::try_from(expired).unwrap(),
        "each expired row deleted once, by one of the cleaners"
    );
    let left: Vec<(i64, i64)> = client
        .query(
            &format!("SELECT count(*) FILTER (WHERE processed_at < now() - interval '1 day'), count(*) FROM {inbox}"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        left,
        vec![(0, i64::try_from(messages).unwrap())],
        "no expired row left, every fresh one kept"
    );
}
