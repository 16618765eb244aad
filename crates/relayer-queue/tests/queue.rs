//! The PostgreSQL queue transport against a real PostgreSQL (QUE-1, producer side).
#![allow(clippy::unwrap_used)]

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::SystemTime;

use relayer_core::{
    DispatcherOptions, Envelope, NewMessage, SendOutcome, Timestamp, Transport, TransportRegistry,
};
use relayer_dispatcher::Dispatcher;
use relayer_queue::PgQueueTransport;
use relayer_test_support::TestDb;

async fn database() -> TestDb {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    db
}

fn envelope(n: u8) -> Envelope {
    Envelope {
        id: relayer_core::MessageId::new(),
        body: vec![n, 0, 255],
        headers: [("content-type".to_owned(), "application/octet-stream".to_owned())].into(),
        created_at: Timestamp::from_micros(1_796_238_780_000_001),
        trace_context: Some(format!("00-trace-{n}-01")),
        lane: None,
        attempts: 0,
    }
}

/// QUE-1: a batch is inserted in order, every field preserved, all accepted.
#[tokio::test]
async fn a_batch_is_inserted_with_identity_headers_body_context_and_created_at() {
    let db = database().await;
    let transport =
        PgQueueTransport::new(relayer_postgres::connect_pool(db.config(), 2).await.unwrap(), db.namespace());
    assert_eq!((transport.name(), transport.batch_limit().get()), ("queue", 500));
    let batch: Vec<Envelope> = (0..3).map(envelope).collect();
    let outcomes = transport.send("orders", &batch).await.unwrap();
    assert_eq!(outcomes, vec![SendOutcome::Accepted; 3]);

    let client = db.connect().await;
    let rows = client
        .query(
            &format!(
                "SELECT message_id, queue, body, headers->>'content-type', trace_context, created_at, \
                        visible_at <= now(), handled_count FROM {} ORDER BY seq",
                db.namespace().table("queue")
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    for (row, sent) in rows.iter().zip(&batch) {
        assert_eq!(row.get::<_, relayer_core::Uuid>(0), *sent.id.as_uuid());
        assert_eq!(row.get::<_, String>(1), "orders");
        assert_eq!(row.get::<_, Vec<u8>>(2), sent.body);
        assert_eq!(row.get::<_, String>(3), "application/octet-stream");
        assert_eq!(row.get::<_, Option<String>>(4), sent.trace_context);
        assert_eq!(Timestamp::from_system_time(row.get::<_, SystemTime>(5)), sent.created_at);
        assert!(row.get::<_, bool>(6), "receivable at once");
        assert_eq!(row.get::<_, i32>(7), 0);
    }
}

/// TRN-2: a database failure is a transient error for the whole batch.
#[tokio::test]
async fn a_failed_insert_is_a_transient_error() {
    let db = TestDb::new().await; // not migrated: no queue table
    let transport =
        PgQueueTransport::new(relayer_postgres::connect_pool(db.config(), 1).await.unwrap(), db.namespace())
            .with_name("pgq");
    let error = transport.send("orders", &[envelope(1)]).await.unwrap_err();
    assert!(error.is_transient());
    assert!(error.chain().contains("inserting into queue \"orders\""), "{}", error.chain());
}

/// QUE-1 end to end: enqueued in the outbox, dispatched into the queue table, outbox row gone,
/// identity preserved; batches are split by the transport's limit.
#[tokio::test]
async fn outbox_messages_are_dispatched_into_the_queue_table() {
    let db = database().await;
    let transport =
        PgQueueTransport::new(relayer_postgres::connect_pool(db.config(), 1).await.unwrap(), db.namespace())
            .with_batch_limit(NonZeroUsize::new(4).unwrap());
    let registry = Arc::new(TransportRegistry::new().with(Arc::new(transport)).unwrap());
    let pool =
        relayer_postgres::connect_pool(relayer_postgres::asynchronous_commit(db.config()), 1).await.unwrap();
    let writer = relayer_postgres::OutboxWriter::for_registry(db.namespace(), &registry);
    let source = relayer_postgres::PgSource::new(pool, db.namespace()).with_transports(registry.names());
    let dispatcher =
        Dispatcher::new(source, db.namespace().clone(), DispatcherOptions::default(), registry).unwrap();
    let client = db.connect().await;
    let batch: Vec<NewMessage> =
        (0..10).map(|n| NewMessage::new("queue", "invoices", vec![n]).header("n", n.to_string())).collect();
    let written = writer.enqueue(&client, &batch).await.unwrap();
    let report = dispatcher.dispatch_now(&written).await.unwrap();
    assert_eq!(report.sent, 10);
    let outbox: i64 = client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table("outbox")), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(outbox, 0);
    let ids: Vec<relayer_core::Uuid> = client
        .query(
            &format!(
                "SELECT message_id FROM {} WHERE queue = 'invoices' ORDER BY seq",
                db.namespace().table("queue")
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(ids, batch.iter().map(|m| *m.message_id().as_uuid()).collect::<Vec<_>>());
}
