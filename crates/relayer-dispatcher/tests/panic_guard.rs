//! TRN-2: every call into a transport runs inside the panic guard — `batch_limit()` and
//! `capabilities()` as well as `send`. A panic there fails the batch; the worker lives.
#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{count, database, options, run_once};
use relayer_core::{
    Capabilities, Envelope, NewMessage, SendOutcome, Transport, TransportError, TransportRegistry,
    async_trait,
};
use relayer_dispatcher::Dispatcher;
use relayer_postgres::{OutboxWriter, PgSource};
use relayer_test_support::TestDb;

/// A transport whose `batch_limit()` panics in its first calls and whose `capabilities()`
/// always panics; `send` accepts, after `delay`.
struct PanickyDeclarations {
    limit_panics: AtomicU32,
    delay: Duration,
}

#[async_trait]
impl Transport for PanickyDeclarations {
    fn name(&self) -> &str {
        "test"
    }

    fn batch_limit(&self) -> NonZeroUsize {
        if self.limit_panics.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            panic!("injected batch_limit panic");
        }
        NonZeroUsize::MIN
    }

    fn capabilities(&self) -> Capabilities {
        panic!("injected capabilities panic")
    }

    async fn send(&self, _: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        tokio::time::sleep(self.delay).await;
        Ok(vec![SendOutcome::Accepted; batch.len()])
    }
}

async fn dispatcher(
    db: &TestDb,
    transport: PanickyDeclarations,
    send_timeout: Duration,
) -> Dispatcher<PgSource> {
    let registry = Arc::new(TransportRegistry::new().with(Arc::new(transport)).unwrap());
    let pool = relayer_postgres::connect_pool(db.config(), 1).await.unwrap();
    let source = PgSource::new(pool, db.namespace()).with_transports(registry.names());
    Dispatcher::new(
        source,
        db.namespace().clone(),
        options().send_timeout(Some(send_timeout)).build().unwrap(),
        registry,
    )
    .unwrap()
}

async fn last_error(client: &tokio_postgres::Client, db: &TestDb) -> String {
    let sql = format!("SELECT last_error FROM {}", db.namespace().table("outbox"));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// TRN-2: a `batch_limit()` that panics fails the group's messages (an attempt counted, the
/// panic's text stored) and is reported as a panic; the next pass delivers.
#[tokio::test]
async fn a_panicking_batch_limit_is_a_failed_send_and_the_worker_lives_trn_2() {
    let db = database().await;
    let transport = PanickyDeclarations { limit_panics: AtomicU32::new(1), delay: Duration::ZERO };
    let dispatcher = dispatcher(&db, transport, Duration::from_secs(5)).await;
    let client = db.connect().await;
    OutboxWriter::new(db.namespace(), ["test"])
        .enqueue(&client, &[NewMessage::new("test", "orders", b"m".to_vec())])
        .await
        .unwrap();
    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.failed, report.panics, report.sent), (1, 1, 0), "{report:?}");
    let error = last_error(&client, &db).await;
    assert!(error.contains("panicked in batch_limit(): injected batch_limit panic"), "{error}");
    common::eventually("the row is delivered once the limit answers", || async {
        run_once(&dispatcher).await.unwrap();
        count(&client, &db, "outbox").await == 0
    })
    .await;
}

/// TRN-2, TRN-5: a send past its timeout asks the transport's `capabilities()` (for the
/// log); a panic there is caught, read as declaring none, and the batch is the transient
/// failure the timeout makes it.
#[tokio::test]
async fn a_panicking_capabilities_is_caught_when_a_send_times_out_trn_2() {
    let db = database().await;
    let transport = PanickyDeclarations { limit_panics: AtomicU32::new(0), delay: Duration::from_secs(3600) };
    let dispatcher = dispatcher(&db, transport, Duration::from_millis(100)).await;
    let client = db.connect().await;
    OutboxWriter::new(db.namespace(), ["test"])
        .enqueue(&client, &[NewMessage::new("test", "orders", b"m".to_vec())])
        .await
        .unwrap();
    let report = run_once(&dispatcher).await.unwrap();
    assert_eq!((report.failed, report.timed_out), (1, 1), "{report:?}");
    let error = last_error(&client, &db).await;
    assert!(error.contains("did not answer within the send timeout"), "{error}");
}
