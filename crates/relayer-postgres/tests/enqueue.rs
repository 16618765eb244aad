//! The writers on every client a user holds: a tokio-postgres client (autocommit), a
//! transaction, a transaction run through a kept per-connection statement cache
//! ([`Prepared`]), a connection of relayer's pool (prepared) and one of a bb8-postgres pool
//! (unnamed). A one-message write runs the one-row `INSERT … VALUES` and a batch the
//! multi-row statement: both write the same rows, and a one-message write notifies on
//! commit as a batch does (OUT-4, QUE-4). Behind a transaction-mode PgBouncer the unnamed
//! statements work unchanged.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use relayer_core::{Delivery, MessageId, NewMessage, PassBackoff, Timestamp};
use relayer_postgres::{
    Executor, Heard, Inbox, InboxEntry, OutboxWriter, PgClient, Prepared, QueueWriter, StatementCache,
    StatementMode, connect_pool, listen, migrate,
};
use relayer_test_support::{PoolMode, TestDb, pgbouncer};
use tokio_util::sync::CancellationToken;

async fn setup() -> TestDb {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    db
}

/// One message of each delivery kind, with headers and a trace context: every column the
/// writers fill from a message.
fn every_kind(destination: &str) -> Vec<NewMessage> {
    let far = Timestamp::from_system_time(SystemTime::UNIX_EPOCH + Duration::from_secs(4_000_000_000));
    vec![
        NewMessage::new("queue", destination, b"now".to_vec())
            .header("kind", "now")
            .trace_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        NewMessage::new("queue", destination, b"at".to_vec()).delivery(Delivery::At(far)),
        NewMessage::new("queue", destination, vec![0, 159, 255])
            .delivery(Delivery::After(Duration::from_secs(60))),
    ]
}

/// Every column a writer filled, in a form that does not depend on when it ran: a delivery
/// near the write as its distance from the write, a far one as is.
async fn rows(db: &TestDb, table: &str, key: &str, filter: &str) -> Vec<String> {
    let extra = if table == "outbox" {
        "transport, coalesce(lane, '-'), CASE WHEN deliver_at - created_at < interval '1 day' \
         THEN (deliver_at - created_at)::text ELSE coalesce(deliver_at::text, '-') END, attempts"
    } else {
        "handled_count"
    };
    let sql = format!(
        "SELECT concat_ws(' | ', {key}, encode(body, 'hex'), headers::text, coalesce(trace_context, '-'), \
                CASE WHEN visible_at - created_at < interval '1 day' THEN (visible_at - created_at)::text \
                     ELSE visible_at::text END, {extra}) \
         FROM {} WHERE {key} = $1 ORDER BY seq",
        db.namespace().table(table)
    );
    let client = db.connect().await;
    client.query(&sql, &[&filter]).await.unwrap().iter().map(|row| row.get(0)).collect()
}

/// Writes `every_kind` one message per call and then as one batch, with both writers, on
/// `client`, checking the ids read back; returns nothing, the rows are compared after.
async fn write_each_way(client: &impl Executor, queue: &QueueWriter, outbox: &OutboxWriter, label: &str) {
    for (suffix, batched) in [("single", false), ("batch", true)] {
        let destination = format!("{label}.{suffix}");
        let messages = every_kind(&destination);
        let chunks: Vec<&[NewMessage]> = if batched { vec![&messages] } else { messages.chunks(1).collect() };
        for chunk in chunks {
            let expected: Vec<MessageId> = chunk.iter().map(NewMessage::message_id).collect();
            let written = queue.enqueue(client, chunk).await.unwrap();
            assert_eq!(written.iter().map(|w| w.id).collect::<Vec<_>>(), expected, "{destination}");
            let written = outbox.enqueue(client, chunk).await.unwrap();
            assert_eq!(written.iter().map(|w| w.id).collect::<Vec<_>>(), expected, "{destination}");
        }
    }
}

/// Records a new message id twice on `client`: first, then a duplicate.
async fn record_twice(client: &impl Executor, inbox: &Inbox, label: &str) {
    let id = MessageId::new();
    assert_eq!(inbox.record(client, label, id).await.unwrap(), InboxEntry::First, "{label}");
    assert_eq!(inbox.record(client, label, id).await.unwrap(), InboxEntry::Duplicate, "{label}");
}

/// OUT-1, OUT-2, QUE-4: on every client kind a user holds, a message written alone (the
/// one-row insert) lands exactly as the same message written in a batch (the multi-row
/// statement) — body, headers, trace context, delivery on the database clock — in the
/// outbox and in the queue table, and the inbox records once.
#[tokio::test]
async fn a_message_written_alone_lands_as_in_a_batch_on_every_client_out_2_que_4() {
    let db = setup().await;
    let queue = QueueWriter::new(db.namespace(), "queue");
    let outbox = OutboxWriter::new(db.namespace(), ["queue"]);
    let inbox = Inbox::new(db.namespace());

    let mut client = db.connect().await;
    write_each_way(&client, &queue, &outbox, "client").await;
    record_twice(&client, &inbox, "client").await;

    let tx = client.transaction().await.unwrap();
    write_each_way(&tx, &queue, &outbox, "transaction").await;
    record_twice(&tx, &inbox, "transaction").await;
    tx.commit().await.unwrap();

    // The handle a caller keeps beside its own connection: statements prepared once on it.
    let statements = StatementCache::new(StatementMode::Prepared);
    let tx = client.transaction().await.unwrap();
    write_each_way(&Prepared::new(&tx, &statements), &queue, &outbox, "kept").await;
    record_twice(&Prepared::new(&tx, &statements), &inbox, "kept").await;
    tx.commit().await.unwrap();
    // The queue's one-row insert with its NOTIFY (the first write to a queue is due) and
    // without (scheduled messages wake nobody), its notifying multi-row insert, the
    // outbox's one-row and multi-row inserts, and the inbox record: each prepared once.
    assert_eq!(statements.len(), 6);

    let mut kept = PgClient::new(db.connect().await);
    let (connection, statements) = kept.split();
    let tx = connection.transaction().await.unwrap();
    write_each_way(&Prepared::new(&tx, statements), &queue, &outbox, "pgclient").await;
    tx.commit().await.unwrap();

    let pool = connect_pool(db.config(), 1).await.unwrap();
    let connection = pool.get().await.unwrap();
    write_each_way(&*connection, &queue, &outbox, "pool").await;
    record_twice(&*connection, &inbox, "pool").await;
    assert_eq!(connection.statements().len(), 6);
    drop(connection);

    let bb8 = db.pool(1).await;
    let mut connection = bb8.get().await.unwrap();
    let tx = connection.transaction().await.unwrap();
    write_each_way(&tx, &queue, &outbox, "bb8").await;
    record_twice(&tx, &inbox, "bb8").await;
    tx.commit().await.unwrap();

    for label in ["client", "transaction", "kept", "pgclient", "pool", "bb8"] {
        for (table, key) in [("queue", "queue"), ("outbox", "destination")] {
            let single = rows(&db, table, key, &format!("{label}.single")).await;
            let batch = rows(&db, table, key, &format!("{label}.batch")).await;
            assert_eq!(single.len(), 3, "{label} {table}");
            // The rows differ only in their destination's suffix.
            let batch: Vec<String> = batch.iter().map(|row| row.replace(".batch", ".single")).collect();
            assert_eq!(single, batch, "{label} {table}");
        }
    }
    let first = rows(&db, "queue", "queue", "client.single").await;
    assert!(first[0].contains("{\"kind\": \"now\"}") && first[0].contains("| 00:00:00 |"), "{first:?}");
    assert!(first[2].contains("009fff") && first[2].contains("| 00:01:00 |"), "{first:?}");
}

/// OUT-4, QUE-4: a one-message write notifies when its transaction commits, never when it
/// rolls back — the outbox writer on every write, the direct writer when its queue is due.
#[tokio::test]
async fn a_message_written_alone_notifies_on_commit_only_out_4_que_4() {
    let db = setup().await;
    let queue = QueueWriter::new(db.namespace(), "queue").with_notify_interval(Duration::from_secs(3_600));
    let outbox = OutboxWriter::new(db.namespace(), ["queue"]);
    let (heard_tx, mut heard_rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let backoff = PassBackoff::new(Duration::from_millis(100), Duration::from_millis(100)).unwrap();
    let mut listeners = Vec::new();
    for channel in [queue.channel().to_owned(), outbox.channel().to_owned()] {
        let heard_tx = heard_tx.clone();
        let label = channel.clone();
        listeners.push(tokio::spawn(listen(db.config(), channel, backoff, stop.clone(), move |heard| {
            let _ = heard_tx.send(match heard {
                Heard::Notification(payload) => format!("{label}:{payload}"),
                Heard::Connected => String::new(),
            });
        })));
    }
    for _ in 0..2 {
        assert_eq!(within(heard_rx.recv()).await.unwrap(), "", "listening");
    }

    let mut client = db.connect().await;
    // Rolled back: the queue's first write (due) and an outbox write notify nobody.
    let tx = client.transaction().await.unwrap();
    QueueWriter::new(db.namespace(), "queue")
        .enqueue(&tx, &[NewMessage::new("queue", "ghosts", b"x".to_vec())])
        .await
        .unwrap();
    outbox.enqueue(&tx, &[NewMessage::new("queue", "ghosts", b"x".to_vec())]).await.unwrap();
    tx.rollback().await.unwrap();

    let tx = client.transaction().await.unwrap();
    queue.enqueue(&tx, &[NewMessage::new("queue", "orders", b"a".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(within(heard_rx.recv()).await.unwrap(), format!("{}:orders", queue.channel()));

    outbox.enqueue(&client, &[NewMessage::new("queue", "orders", b"b".to_vec())]).await.unwrap();
    assert_eq!(within(heard_rx.recv()).await.unwrap(), format!("{}:", outbox.channel()));

    stop.cancel();
    for listener in listeners {
        within(listener).await.unwrap();
    }
    let mut more = Vec::new();
    while let Ok(heard) = heard_rx.try_recv() {
        more.push(heard);
    }
    assert!(more.iter().all(|heard| !heard.contains("ghosts")), "{more:?}");
}

/// OUT-1, QUE-4, QUE-3: behind PgBouncer in transaction mode, the writers' unnamed
/// statements — one message, a batch, the inbox record — run on a plain client in and out
/// of transactions, whichever server connection each transaction gets.
#[tokio::test]
async fn the_writers_run_unnamed_behind_a_transaction_mode_pooler_out_1() {
    let db = setup().await;
    let test = "the_writers_run_unnamed_behind_a_transaction_mode_pooler_out_1";
    let Some(config) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    let (mut client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let queue = QueueWriter::new(db.namespace(), "queue");
    let outbox = OutboxWriter::new(db.namespace(), ["queue"]);
    let inbox = Inbox::new(db.namespace());
    for round in 0..5 {
        write_each_way(&client, &queue, &outbox, &format!("pooled{round}")).await;
        record_twice(&client, &inbox, "pooled").await;
        let tx = client.transaction().await.unwrap();
        write_each_way(&tx, &queue, &outbox, &format!("pooledtx{round}")).await;
        record_twice(&tx, &inbox, "pooledtx").await;
        tx.commit().await.unwrap();
    }
    for label in ["pooled4", "pooledtx4"] {
        let single = rows(&db, "queue", "queue", &format!("{label}.single")).await;
        let batch = rows(&db, "queue", "queue", &format!("{label}.batch")).await;
        let batch: Vec<String> = batch.iter().map(|row| row.replace(".batch", ".single")).collect();
        assert_eq!((single.len(), &single), (3, &batch), "{label}");
    }
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.expect("within 10 s")
}
