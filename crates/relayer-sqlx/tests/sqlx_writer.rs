//! The sqlx writer against a real PostgreSQL (OUT-1, OUT-3, OUT-4, DRV-1).
//!
//! Rows are compared with what the tokio-postgres writer writes for the same input, and
//! dispatched by relayer's own dispatcher through the facade host.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::{Duration, SystemTime};

use relayer::core::MessageProblem;
use relayer::postgres::{OutboxWriter, StatementMode, migrate};
use relayer::{Delivery, DispatcherOptions, NewMessage, Relayer, Timestamp};
use relayer_sqlx::{SqlxEnqueueError, SqlxWriter};
use relayer_test_support::{HeldServers, PoolMode, TestDb, eventually, pgbouncer, pooler_url};
use sqlx::postgres::{PgPool, PgPoolOptions};

async fn migrated() -> (TestDb, tokio_postgres::Client, PgPool) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let pool = PgPoolOptions::new().max_connections(2).connect(&db.url()).await.unwrap();
    (db, client, pool)
}

async fn count(client: &tokio_postgres::Client, db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table(table));
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// Every column the writer fills, in a form that does not depend on when it ran: a
/// delivery time near the write (a delay) as its distance from it, a far one as is.
async fn outbox_rows(client: &tokio_postgres::Client, db: &TestDb) -> Vec<String> {
    let sql = format!(
        "SELECT concat_ws(' | ', message_id, transport, destination, encode(body, 'hex'), headers::text, \
                trace_context, coalesce(lane, '-'), \
                CASE WHEN deliver_at - created_at < interval '1 day' THEN (deliver_at - created_at)::text \
                     ELSE deliver_at::text END, \
                visible_at = coalesce(deliver_at, created_at), attempts, claim_token) \
         FROM {} ORDER BY seq",
        db.namespace().table("outbox")
    );
    client.query(&sql, &[]).await.unwrap().iter().map(|row| row.get(0)).collect()
}

/// One message of every shape: headers, trace context, lanes, a fixed delivery time with
/// sub-microsecond digits, a delay, an empty body and a body with every byte value.
fn every_shape() -> Vec<NewMessage> {
    let at = SystemTime::UNIX_EPOCH + Duration::new(1_900_000_000, 123_456_789);
    vec![
        NewMessage::new("queue", "orders", b"plain".to_vec()),
        NewMessage::new("queue", "orders", Vec::new())
            .header("content-type", "application/json")
            .header("x-quote", "\"é\\")
            .trace_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        NewMessage::new("queue", "orders", (0..=255).collect::<Vec<u8>>()).lane("customer-1"),
        NewMessage::new("queue", "invoices", b"later".to_vec()).lane("customer-2"),
        NewMessage::new("queue", "orders", b"at".to_vec())
            .delivery(Delivery::At(Timestamp::from_system_time(at))),
        NewMessage::new("queue", "orders", b"after".to_vec())
            .delivery(Delivery::After(Duration::from_secs(90))),
    ]
}

/// DRV-1: the same input through both drivers writes the same rows, in the same order,
/// and both return the written ids in order.
#[tokio::test]
async fn both_drivers_write_the_same_rows_for_the_same_input_drv_1() {
    let (tokio_db, tokio_client, _) = migrated().await;
    let (sqlx_db, sqlx_client, pool) = migrated().await;
    let messages = every_shape();
    // Two batches each: one without lanes, one with (they are different renderings).
    let (unordered, ordered) = (&messages[..2], &messages[2..]);

    let writer = OutboxWriter::new(tokio_db.namespace(), ["queue"]);
    let mut written = writer.enqueue(&tokio_client, unordered).await.unwrap();
    written.extend(writer.enqueue(&tokio_client, ordered).await.unwrap());

    let sqlx_writer = SqlxWriter::new(sqlx_db.namespace(), ["queue"]);
    let mut tx = pool.begin().await.unwrap();
    let mut sqlx_written = sqlx_writer.enqueue(&mut *tx, unordered).await.unwrap();
    sqlx_written.extend(sqlx_writer.enqueue(&mut *tx, ordered).await.unwrap());
    // Byte-identical SQL: the statements sqlx prepared on its connection are the writer's.
    let mut prepared: Vec<String> =
        sqlx::query_scalar("SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'WITH %'")
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    prepared.sort();
    let mut expected_sql =
        [writer.batch(unordered).unwrap().statement(), writer.batch(ordered).unwrap().statement()];
    expected_sql.sort();
    // Namespaces differ only in their schema name.
    let expected_sql: Vec<String> =
        expected_sql.iter().map(|sql| sql.replace(tokio_db.schema(), sqlx_db.schema())).collect();
    assert_eq!(prepared, expected_sql);
    tx.commit().await.unwrap();

    let ids = |written: &[relayer::postgres::Enqueued]| written.iter().map(|w| w.id).collect::<Vec<_>>();
    let expected: Vec<_> = messages.iter().map(NewMessage::message_id).collect();
    assert_eq!(ids(&written), expected);
    assert_eq!(ids(&sqlx_written), expected);
    assert!(sqlx_written.windows(2).all(|w| w[0].seq < w[1].seq));

    let (tokio_rows, sqlx_rows) =
        (outbox_rows(&tokio_client, &tokio_db).await, outbox_rows(&sqlx_client, &sqlx_db).await);
    assert_eq!(tokio_rows.len(), messages.len());
    assert_eq!(tokio_rows, sqlx_rows);
}

/// DRV-1: unnamed statements (for transaction-mode poolers) and a silent writer write the
/// same rows too; an empty batch writes nothing and runs nothing.
#[tokio::test]
async fn unnamed_statements_and_silent_writers_write_the_same_rows_drv_1() {
    let (tokio_db, tokio_client, _) = migrated().await;
    let (sqlx_db, sqlx_client, pool) = migrated().await;
    let messages = every_shape();
    OutboxWriter::new(tokio_db.namespace(), ["queue"])
        .without_notify()
        .enqueue(&tokio_client, &messages)
        .await
        .unwrap();
    let writer = SqlxWriter::from(OutboxWriter::new(sqlx_db.namespace(), ["queue"]).without_notify())
        .with_statement_mode(StatementMode::Unnamed);
    let mut connection = pool.acquire().await.unwrap();
    assert!(writer.enqueue(&mut *connection, &[]).await.unwrap().is_empty());
    writer.enqueue(&mut *connection, &messages).await.unwrap();
    assert_eq!(outbox_rows(&tokio_client, &tokio_db).await, outbox_rows(&sqlx_client, &sqlx_db).await);
}

/// OUT-3: a bad message is refused naming it, before anything of its batch is written.
#[tokio::test]
async fn a_bad_message_is_refused_and_nothing_of_its_batch_is_written_out_3() {
    let (db, client, pool) = migrated().await;
    let writer = SqlxWriter::new(db.namespace(), ["queue"]);
    let batch =
        [NewMessage::new("queue", "orders", b"ok".to_vec()), NewMessage::new("kafka", "orders", Vec::new())];
    let error = writer.enqueue(&pool, &batch).await.unwrap_err();
    let SqlxEnqueueError::Invalid(invalid) = &error else { panic!("{error:?}") };
    assert!(matches!(invalid.problem(), MessageProblem::UnknownTransport { .. }), "{error}");
    assert_eq!(count(&client, &db, "outbox").await, 0);
}

/// A database failure names what was being done and why, in the message itself.
#[tokio::test]
async fn a_database_failure_says_what_and_why() {
    let db = TestDb::new().await; // no migrate: the outbox does not exist
    let pool = PgPoolOptions::new().max_connections(1).connect(&db.url()).await.unwrap();
    let writer = SqlxWriter::new(db.namespace(), ["queue"]);
    let error = writer.enqueue(&pool, &[NewMessage::new("queue", "orders", Vec::new())]).await.unwrap_err();
    let text = error.to_string();
    assert!(text.starts_with("enqueueing 1 message through sqlx: "), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    // Said once: in the message, not again by a chain printer.
    assert_eq!(relayer::error_chain(&error), text);
    assert_eq!(text.matches("does not exist").count(), 1, "{text}");
}

/// OUT-1, OUT-4: a rolled-back sqlx enqueue is never sent; a committed one wakes the
/// dispatcher at its commit (its poll interval is an hour) and is sent exactly once.
#[tokio::test]
async fn a_rollback_is_never_sent_and_a_commit_wakes_the_dispatcher_out_1_out_4() {
    let (db, client, pool) = migrated().await;
    let options = DispatcherOptions::builder().poll_interval(Duration::from_secs(3600)).build().unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dispatcher(options)
        .start()
        .await
        .unwrap();
    let writer = SqlxWriter::new(db.namespace(), [relayer::QUEUE_TRANSPORT]);
    let queued = |id: relayer::MessageId| {
        let (client, table) = (&client, db.namespace().table("queue"));
        async move {
            let sql = format!("SELECT count(*) FROM {table} WHERE message_id = $1");
            client.query_one(&sql, &[id.as_uuid()]).await.unwrap().get::<_, i64>(0)
        }
    };

    // The dispatcher's first pass runs at once; after this message is delivered, only a
    // wake-up can make it look again within the hour.
    let first = NewMessage::new("queue", "orders", b"first".to_vec());
    let mut tx = pool.begin().await.unwrap();
    writer.enqueue(&mut *tx, std::slice::from_ref(&first)).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the first message is in the queue", || async { queued(first.message_id()).await == 1 }).await;

    let rolled_back = NewMessage::new("queue", "orders", b"never".to_vec());
    let mut tx = pool.begin().await.unwrap();
    writer.enqueue(&mut *tx, std::slice::from_ref(&rolled_back)).await.unwrap();
    tx.rollback().await.unwrap();

    let committed = NewMessage::new("queue", "orders", b"now".to_vec());
    let mut tx = pool.begin().await.unwrap();
    writer.enqueue(&mut *tx, std::slice::from_ref(&committed)).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the committed message is in the queue", || async {
        queued(committed.message_id()).await == 1
    })
    .await;

    assert_eq!(queued(rolled_back.message_id()).await, 0);
    assert_eq!(count(&client, &db, "queue").await, 2);
    eventually("the outbox is empty", || async { count(&client, &db, "outbox").await == 0 }).await;
    host.shutdown().await;
}

/// One transaction on `pool` enqueuing `messages` with `writer`; the backend it ran on.
async fn enqueue_through(
    pool: &PgPool,
    writer: &SqlxWriter,
    messages: &[NewMessage],
) -> Result<i32, SqlxEnqueueError> {
    let mut tx = pool.begin().await.unwrap();
    let pid =
        sqlx::query_scalar("SELECT pg_backend_pid()").persistent(false).fetch_one(&mut *tx).await.unwrap();
    writer.enqueue(&mut *tx, messages).await?;
    tx.commit().await.unwrap();
    Ok(pid)
}

/// DRV-1b: behind a transaction-mode pooler that does not track prepared statements, an
/// sqlx writer with unnamed statements enqueues, while other clients hold the server
/// connection of its last transaction so the next one runs on another; a rollback still
/// writes nothing. The control: a writer that lets sqlx prepare its statement fails there.
#[tokio::test]
async fn unnamed_statements_enqueue_behind_a_transaction_mode_pooler_drv_1b() {
    let (db, client, _) = migrated().await;
    let test = "unnamed_statements_enqueue_behind_a_transaction_mode_pooler_drv_1b";
    let Some(config) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    let url = pooler_url(&config);
    // One connection: every transaction is that client's, whatever server runs it.
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    let writer = SqlxWriter::new(db.namespace(), ["queue"]).with_statement_mode(StatementMode::Unnamed);
    let mut last = enqueue_through(&pool, &writer, &every_shape()).await.unwrap();
    let mut moved = 0;
    for round in 0..5 {
        let (held, holds) = HeldServers::hold_backend(&config, last, 3).await;
        moved += usize::from(holds);
        last = enqueue_through(&pool, &writer, &every_shape()).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        writer.enqueue(&mut *tx, &every_shape()[..1]).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(count(&client, &db, "outbox").await, 6 * (round + 2));
        drop(held);
    }
    assert!(moved >= 1, "no transaction was moved to another server connection");

    // The control: sqlx prepares the statement on the server connection of its first
    // transaction, and a later one on another server connection cannot find it.
    let prepared = SqlxWriter::new(db.namespace(), ["queue"]);
    let mut last = enqueue_through(&pool, &prepared, &every_shape()).await.unwrap();
    let mut failure = None;
    for _ in 0..5 {
        let (held, _) = HeldServers::hold_backend(&config, last, 3).await;
        match enqueue_through(&pool, &prepared, &every_shape()).await {
            Ok(pid) => last = pid,
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
        drop(held);
    }
    let Some(SqlxEnqueueError::Database { error, .. }) = failure else {
        panic!("a prepared statement survived a change of server connection: {failure:?}");
    };
    let code = error.as_database_error().and_then(|e| e.code()).map(|code| code.into_owned());
    assert_eq!(code.as_deref(), Some("26000"), "{error}");
}
