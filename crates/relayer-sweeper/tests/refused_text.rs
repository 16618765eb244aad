//! Text PostgreSQL refuses never wedges a recovery page (SPEC §15): a transport whose
//! errors carry a NUL (U+0000), which no `text` value may hold.
#![allow(clippy::unwrap_used)]
// `common` re-exports helpers for other test files.
#![allow(unused_imports)]

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    FaultyTransport, count, database, eventually, lease, message, options, pool, registry, session,
};
use relayer_core::bounded_text::{MAX_ERROR_BYTES, NUL_REPLACEMENT};
use relayer_core::{DispatcherOptions, StoreSource};
use relayer_delivery::SendPath;
use relayer_postgres::{OutboxWriter, PgSource};
use relayer_sweeper::Sweeper;

/// SWP-4, DSP-5, SPEC §15: a recovery page whose every send fails with a NUL in the error
/// commits: each attempt is counted and the rows are buried at `max_attempts`, their
/// `last_error` sanitized and bounded. Before, the page's completion failed and the pass
/// rolled back, so the same page was sent again on every pass, forever.
#[tokio::test]
async fn a_recovery_page_whose_errors_carry_a_nul_is_counted_and_buried_swp_4() {
    let db = database().await;
    let client = db.connect().await;
    let rows: Vec<_> = (0..20).map(|n| message("orders", n)).collect();
    OutboxWriter::new(db.namespace(), ["test"]).enqueue(&client, &rows).await.unwrap();

    let mut transport = FaultyTransport::new("test").with_batch_limit(100);
    transport.error_detail = format!(": broker said \0 then {}", "x".repeat(20_000));
    transport.failing.store(true, Ordering::SeqCst);
    let policy = DispatcherOptions::builder()
        .retry_base(Duration::from_millis(10))
        .retry_max(Duration::from_millis(20))
        .max_attempts(NonZeroU32::new(2))
        .breaker_threshold(NonZeroU32::new(1000).unwrap())
        .build()
        .unwrap();
    let send = SendPath::new(registry(Arc::new(transport)), policy);
    let (pool, _) = pool(&db, "sweeper", 1).await;
    let source = PgSource::new(pool, db.namespace()).with_transports(send.transports().names());
    let sweeper = Sweeper::new(
        source,
        db.namespace().clone(),
        options(100).build().unwrap(),
        send,
        lease("a", Duration::from_secs(30)),
    );
    eventually("every row is dead", || async {
        sweeper.run_once(&mut session(&sweeper).await).await.unwrap();
        count(&client, &db, "dead").await == 20
    })
    .await;
    assert_eq!(count(&client, &db, "outbox").await, 0);
    let dead = client
        .query(&format!("SELECT attempts, last_error FROM {}", db.namespace().table("dead")), &[])
        .await
        .unwrap();
    for row in dead {
        let error: String = row.get(1);
        assert_eq!(row.get::<_, i32>(0), 2);
        assert!(error.contains(&format!("broker said {NUL_REPLACEMENT} then x")), "{error}");
        assert!(!error.contains('\0') && error.len() <= MAX_ERROR_BYTES);
    }
}
