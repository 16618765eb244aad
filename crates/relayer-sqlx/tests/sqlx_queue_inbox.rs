//! Direct enqueue (QUE-4) and the inbox boundary (QUE-3) through sqlx, against a real
//! PostgreSQL: the same rows as the tokio-postgres side for the same input (DRV-1), the
//! host's consumer receives what sqlx enqueued, and concurrent deliveries of one message
//! apply its effects once.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use relayer::consumer::{Handler, Outcome, QueueMessage, Subscription};
use relayer::core::MessageProblem;
use relayer::postgres::{Inbox, InboxEntry, QueueWriter, StatementMode, migrate};
use relayer::{ConsumerOptions, Delivery, MessageId, NewMessage, Relayer, Timestamp};
use relayer_sqlx::{Handled, SqlxEnqueueError, SqlxInbox, SqlxInboxError, SqlxQueueWriter};
use relayer_test_support::{HeldServers, PoolMode, TestDb, eventually, pgbouncer, pooler_url};
use sqlx::PgConnection;
use sqlx::postgres::{PgPool, PgPoolOptions};

async fn migrated(connections: u32) -> (TestDb, tokio_postgres::Client, PgPool) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let pool = PgPoolOptions::new().max_connections(connections).connect(&db.url()).await.unwrap();
    (db, client, pool)
}

/// Every column the direct insert fills, in a form that does not depend on when it ran: a
/// visibility near the write (a delay) as its distance from it, a far one as is.
async fn queue_rows(client: &tokio_postgres::Client, db: &TestDb) -> Vec<String> {
    let sql = format!(
        "SELECT concat_ws(' | ', message_id, queue, encode(body, 'hex'), headers::text, trace_context, \
                CASE WHEN visible_at - created_at < interval '1 day' THEN (visible_at - created_at)::text \
                     ELSE visible_at::text END, \
                handled_count, original_topic, dead_lettered_at) \
         FROM {} ORDER BY seq",
        db.namespace().table("queue")
    );
    client.query(&sql, &[]).await.unwrap().iter().map(|row| row.get(0)).collect()
}

/// One message of every shape a direct enqueue takes.
fn every_shape() -> Vec<NewMessage> {
    let at = SystemTime::UNIX_EPOCH + Duration::new(1_900_000_000, 123_456_789);
    vec![
        NewMessage::new("queue", "orders", b"plain".to_vec()),
        NewMessage::new("queue", "orders", Vec::new())
            .header("content-type", "application/json")
            .header("x-quote", "\"é\\")
            .trace_context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        NewMessage::new("queue", "invoices", (0..=255).collect::<Vec<u8>>()),
        NewMessage::new("queue", "orders", b"at".to_vec())
            .delivery(Delivery::At(Timestamp::from_system_time(at))),
        NewMessage::new("queue", "orders", b"after".to_vec())
            .delivery(Delivery::After(Duration::from_secs(90))),
    ]
}

/// DRV-1, QUE-4: the same messages through both drivers' direct writers give the same
/// queue rows and the same ids, and sqlx prepared the very statement the tokio-postgres
/// writer renders.
#[tokio::test]
async fn both_drivers_enqueue_the_same_queue_rows_drv_1_que_4() {
    let (tokio_db, tokio_client, _) = migrated(1).await;
    let (sqlx_db, sqlx_client, pool) = migrated(1).await;
    let messages = every_shape();

    let writer = QueueWriter::new(tokio_db.namespace(), "queue");
    let written = writer.enqueue(&tokio_client, &messages).await.unwrap();

    let sqlx_writer = SqlxQueueWriter::new(sqlx_db.namespace(), "queue");
    let mut tx = pool.begin().await.unwrap();
    assert!(sqlx_writer.enqueue(&mut *tx, &[]).await.unwrap().is_empty());
    let sqlx_written = sqlx_writer.enqueue(&mut *tx, &messages).await.unwrap();
    let prepared: Vec<String> =
        sqlx::query_scalar("SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'WITH %'")
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    // A fresh writer renders what the sqlx writer's first write ran: the notifying batch.
    let fresh = QueueWriter::new(tokio_db.namespace(), "queue");
    let expected = fresh.batch(&messages).unwrap().statement().replace(tokio_db.schema(), sqlx_db.schema());
    assert_eq!(prepared, vec![expected]);
    tx.commit().await.unwrap();

    let ids = |written: &[relayer::postgres::Enqueued]| written.iter().map(|w| w.id).collect::<Vec<_>>();
    let expected: Vec<_> = messages.iter().map(NewMessage::message_id).collect();
    assert_eq!(ids(&written), expected);
    assert_eq!(ids(&sqlx_written), expected);
    let (tokio_rows, sqlx_rows) =
        (queue_rows(&tokio_client, &tokio_db).await, queue_rows(&sqlx_client, &sqlx_db).await);
    assert_eq!(tokio_rows.len(), messages.len());
    assert_eq!(tokio_rows, sqlx_rows);
}

/// DRV-1, QUE-4, QUE-3: sqlx prepares each writer's one-message statement once per
/// connection and reuses it (its named-statement cache), byte for byte the tokio-postgres
/// writer's; in `StatementMode::Unnamed` it prepares none.
#[tokio::test]
async fn sqlx_prepares_each_one_message_statement_once_per_connection_drv_1() {
    let (db, client, pool) = migrated(2).await;
    // Scheduled messages never notify: each write runs the same (silent) statement.
    let later = || {
        NewMessage::new("queue", "orders", b"later".to_vec())
            .delivery(Delivery::After(Duration::from_secs(60)))
    };
    let queue = SqlxQueueWriter::new(db.namespace(), "queue");
    let outbox = relayer_sqlx::SqlxWriter::new(db.namespace(), ["queue"]);
    let inbox = SqlxInbox::new(db.namespace());
    let mut connection = pool.acquire().await.unwrap();
    for _ in 0..3 {
        let mut tx = sqlx::Connection::begin(&mut *connection).await.unwrap();
        queue.enqueue(&mut *tx, &[later()]).await.unwrap();
        outbox.enqueue(&mut *tx, &[later()]).await.unwrap();
        inbox.record(&mut *tx, "billing", MessageId::new()).await.unwrap();
        tx.commit().await.unwrap();
    }
    let ours = format!(
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%{}%' ORDER BY 1",
        db.schema()
    );
    // This query itself unnamed, so it does not count itself.
    let prepared: Vec<String> =
        sqlx::query_scalar(&ours).persistent(false).fetch_all(&mut *connection).await.unwrap();
    let one = [later()];
    let mut expected = vec![
        queue.queue_writer().batch(&one).unwrap().statement().to_owned(),
        outbox.outbox_writer().batch(&one).unwrap().statement().to_owned(),
        Inbox::new(db.namespace()).record_statement("billing", MessageId::new()).unwrap().to_owned(),
    ];
    expected.sort();
    assert_eq!(prepared, expected, "each prepared once, and exactly the writers' statements");
    assert!(expected[..2].iter().all(|sql| !sql.contains("unnest")), "the one-row inserts");

    let unnamed = SqlxQueueWriter::new(db.namespace(), "queue").with_statement_mode(StatementMode::Unnamed);
    let mut other = pool.acquire().await.unwrap();
    unnamed.enqueue(&mut *other, &[later()]).await.unwrap();
    let prepared: Vec<String> =
        sqlx::query_scalar(&ours).persistent(false).fetch_all(&mut *other).await.unwrap();
    assert!(prepared.is_empty(), "{prepared:?}");
    let count: i64 = client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table("queue")), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 4);
}

/// OUT-3, QUE-4: a message the direct writer refuses (a lane) is named, and nothing of
/// its batch is written.
#[tokio::test]
async fn a_refused_direct_message_writes_nothing_of_its_batch_out_3() {
    let (db, client, pool) = migrated(1).await;
    let writer = SqlxQueueWriter::new(db.namespace(), "queue");
    let batch = [
        NewMessage::new("queue", "orders", b"ok".to_vec()),
        NewMessage::new("queue", "orders", Vec::new()).lane("a"),
    ];
    let error = writer.enqueue(&pool, &batch).await.unwrap_err();
    let SqlxEnqueueError::Invalid(invalid) = &error else { panic!("{error:?}") };
    assert_eq!(invalid.index(), 1, "{error}");
    assert!(matches!(invalid.problem(), MessageProblem::LaneOnDirectQueue), "{error}");
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table("queue"));
    assert_eq!(client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0), 0);
}

#[derive(Default)]
struct Bodies(Mutex<Vec<Vec<u8>>>);

#[relayer::core::async_trait]
impl Handler for Bodies {
    async fn handle(&self, message: &QueueMessage) -> Outcome {
        self.0.lock().unwrap().push(message.body.clone());
        Outcome::Ack
    }
}

/// QUE-4: what sqlx enqueued straight into the queue is received by the host's ordinary
/// consumer; a rolled-back enqueue never is.
#[tokio::test]
async fn direct_enqueue_through_sqlx_is_received_by_the_consumer_que_4() {
    let (db, _client, pool) = migrated(2).await;
    let bodies = Arc::new(Bodies::default());
    let options = ConsumerOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .consumer(Subscription::new("orders", options).unwrap(), Arc::clone(&bodies))
        .start()
        .await
        .unwrap();
    let writer = SqlxQueueWriter::new(db.namespace(), relayer::QUEUE_TRANSPORT);
    let mut tx = pool.begin().await.unwrap();
    writer.enqueue(&mut *tx, &[NewMessage::new("queue", "orders", b"rolled back".to_vec())]).await.unwrap();
    tx.rollback().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    writer.enqueue(&mut *tx, &[NewMessage::new("queue", "orders", b"committed".to_vec())]).await.unwrap();
    tx.commit().await.unwrap();

    eventually("the committed message is handled", || async { !bodies.0.lock().unwrap().is_empty() }).await;
    let stats = host.consumer_stats("orders").unwrap();
    host.shutdown().await;
    assert_eq!(*bodies.0.lock().unwrap(), vec![b"committed".to_vec()]);
    assert_eq!(stats.snapshot().acked, 1);
}

/// DRV-1, QUE-3: both drivers run one record statement on one inbox table, so each sees
/// the other's records as duplicates and writes the same row.
#[tokio::test]
async fn both_drivers_share_one_inbox_drv_1_que_3() {
    let (db, client, pool) = migrated(1).await;
    let (tokio_inbox, sqlx_inbox) = (Inbox::new(db.namespace()), SqlxInbox::new(db.namespace()));
    let (first, second) = (MessageId::new(), MessageId::new());
    assert_eq!(tokio_inbox.record(&client, "billing", first).await.unwrap(), InboxEntry::First);
    assert_eq!(sqlx_inbox.record(&pool, "billing", first).await.unwrap(), InboxEntry::Duplicate);
    assert_eq!(sqlx_inbox.record(&pool, "billing", second).await.unwrap(), InboxEntry::First);
    assert_eq!(tokio_inbox.record(&client, "billing", second).await.unwrap(), InboxEntry::Duplicate);
    let sql = format!(
        "SELECT consumer, message_id::text FROM {} ORDER BY message_id",
        db.namespace().table("inbox")
    );
    let rows: Vec<(String, String)> =
        client.query(&sql, &[]).await.unwrap().iter().map(|row| (row.get(0), row.get(1))).collect();
    let mut expected =
        vec![("billing".to_owned(), first.to_string()), ("billing".to_owned(), second.to_string())];
    expected.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(rows, expected);

    let error = sqlx_inbox.record(&pool, "", first).await.unwrap_err();
    assert!(matches!(error, SqlxInboxError::Refused(_)), "{error:?}");
    assert!(error.to_string().contains("consumer name \"\""), "{error}");
}

/// QUE-3: many deliveries of each of several messages at once, each in its own sqlx
/// transaction, run the effects exactly once per message id; every other delivery is told
/// it is a duplicate, and only the applied delivery's effect is in the database.
#[tokio::test]
async fn concurrent_deliveries_run_the_effects_once_per_message_que_3() {
    const MESSAGES: usize = 3;
    const DELIVERIES: usize = 8;
    let (db, client, pool) = migrated(u32::try_from(DELIVERIES).unwrap()).await;
    let effects = db.namespace().table("effects");
    client
        .batch_execute(&format!("CREATE TABLE {effects} (message_id text NOT NULL, delivery int NOT NULL)"))
        .await
        .unwrap();
    let inbox = SqlxInbox::new(db.namespace());
    let messages: Vec<MessageId> = (0..MESSAGES).map(|_| MessageId::new()).collect();
    // How many times the effects closure ran, per message id.
    let runs: Arc<Mutex<HashMap<MessageId, usize>>> = Arc::default();
    let start = Arc::new(tokio::sync::Barrier::new(MESSAGES * DELIVERIES));
    let mut deliveries = Vec::new();
    for &message in &messages {
        for delivery in 0..DELIVERIES {
            let (inbox, pool, start, runs) =
                (inbox.clone(), pool.clone(), Arc::clone(&start), Arc::clone(&runs));
            let insert = format!("INSERT INTO {effects} (message_id, delivery) VALUES ($1, $2)");
            deliveries.push(tokio::spawn(async move {
                start.wait().await;
                let handled = inbox
                    .handle(&pool, "billing", message, async |tx: &mut PgConnection| {
                        *runs.lock().unwrap().entry(message).or_default() += 1;
                        let delivery = i32::try_from(delivery).unwrap();
                        sqlx::query(&insert)
                            .bind(message.to_string())
                            .bind(delivery)
                            .execute(&mut *tx)
                            .await?;
                        // Held open a moment, so the other deliveries meet the uncommitted record.
                        sqlx::query("SELECT pg_sleep(0.05)").execute(&mut *tx).await?;
                        Ok::<_, sqlx::Error>(delivery)
                    })
                    .await
                    .unwrap();
                (message, handled)
            }));
        }
    }
    let mut applied: HashMap<MessageId, Vec<i32>> = HashMap::new();
    for delivery in deliveries {
        let (message, handled) = delivery.await.unwrap();
        let entry = applied.entry(message).or_default();
        if let Handled::Applied(which) = handled {
            entry.push(which);
        }
    }
    let runs = runs.lock().unwrap().clone();
    for message in &messages {
        assert_eq!(runs.get(message), Some(&1), "effects runs per message: {runs:?}");
        assert_eq!(applied[message].len(), 1, "{applied:?}");
        let rows: Vec<i32> = client
            .query(&format!("SELECT delivery FROM {effects} WHERE message_id = $1"), &[&message.to_string()])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(rows, applied[message]);
    }
    assert_eq!(runs.len(), MESSAGES);
}

/// QUE-3: when the effects fail and the rollback then fails too (the session was killed
/// under them), the effects' error is the one returned, with the rollback's failure
/// attached; nothing was recorded, so the next delivery applies.
#[tokio::test]
async fn a_failed_rollback_keeps_the_effects_error_and_attaches_its_own_que_3() {
    let (db, client, pool) = migrated(2).await;
    let inbox = SqlxInbox::new(db.namespace());
    let message = MessageId::new();
    let client = &client;
    let error = inbox
        .handle(&pool, "billing", message, async |tx: &mut PgConnection| {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *tx).await?;
            client.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
            Err::<(), Box<dyn std::error::Error + Send + Sync>>("the ledger is closed".into())
        })
        .await
        .unwrap_err();
    let SqlxInboxError::Effects { rollback, error: effects, .. } = &error else { panic!("{error:?}") };
    assert!(rollback.is_some(), "{error:?}");
    assert_eq!(effects.to_string(), "the ledger is closed");
    assert!(std::error::Error::source(&error).is_none(), "the chain is in the message");
    let text = error.to_string();
    assert!(text.contains("the ledger is closed") && text.contains("rolling back then failed too"), "{text}");
    let handled = inbox
        .handle(&pool, "billing", message, async |_: &mut PgConnection| Ok::<_, sqlx::Error>("applied"))
        .await;
    assert_eq!(handled.unwrap(), Handled::Applied("applied"));
}

/// DRV-1b, QUE-3: behind a transaction-mode pooler that does not track prepared
/// statements, an inbox with unnamed statements records, deduplicates and rolls back over
/// a pool whose connections the pooler hands to many server sessions.
#[tokio::test]
async fn unnamed_inbox_statements_work_behind_a_transaction_mode_pooler_drv_1b() {
    let (db, client, _) = migrated(1).await;
    let test = "unnamed_inbox_statements_work_behind_a_transaction_mode_pooler_drv_1b";
    let Some(config) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    let url = pooler_url(&config);
    let pool = PgPoolOptions::new().max_connections(4).connect(&url).await.unwrap();
    let inbox = SqlxInbox::new(db.namespace()).with_statement_mode(StatementMode::Unnamed);
    let messages: Vec<MessageId> = (0..20).map(|_| MessageId::new()).collect();
    let mut tasks = Vec::new();
    for (n, &message) in messages.iter().enumerate() {
        let (inbox, pool) = (inbox.clone(), pool.clone());
        tasks.push(tokio::spawn(async move {
            let first = inbox.handle(&pool, "billing", message, async |_: &mut PgConnection| {
                // Every third message fails once: rolled back, recorded by its redelivery.
                if n % 3 == 0 { Err("not yet") } else { Ok(n) }
            });
            let first = first.await;
            let again =
                inbox.handle(&pool, "billing", message, async |_: &mut PgConnection| Ok::<_, &str>(n));
            (first, again.await.unwrap())
        }));
    }
    for (n, task) in tasks.into_iter().enumerate() {
        let (first, again) = task.await.unwrap();
        if n % 3 == 0 {
            assert!(matches!(first, Err(SqlxInboxError::Effects { rollback: None, .. })), "{first:?}");
            assert_eq!(again, Handled::Applied(n));
        } else {
            assert_eq!(first.unwrap(), Handled::Applied(n));
            assert_eq!(again, Handled::Duplicate);
        }
    }
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table("inbox"));
    assert_eq!(client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0), 20);
}

/// The backend pid of the inbox transaction that handles a new message on `pool` (read by
/// its effects, so the record and the effects ran on that server connection), or the error.
async fn handle_new(pool: &PgPool, inbox: &SqlxInbox) -> Result<i32, SqlxInboxError> {
    let handled = inbox
        .handle(pool, "billing", MessageId::new(), async |tx: &mut PgConnection| {
            // The simple protocol: this read leaves no statement of its own behind.
            let row = sqlx::raw_sql("SELECT pg_backend_pid()").fetch_one(&mut *tx).await?;
            Ok::<i32, sqlx::Error>(sqlx::Row::get(&row, 0))
        })
        .await?;
    match handled {
        Handled::Applied(pid) => Ok(pid),
        Handled::Duplicate => panic!("a new message id was a duplicate"),
    }
}

/// DRV-1b, QUE-3: each round holds the server connection the last inbox transaction ran on,
/// so PgBouncer (transaction mode) runs the next one on another: unnamed record statements
/// keep working there, and the control — sqlx preparing the record statement — fails once
/// its transaction lands on a server connection that never prepared it.
#[tokio::test]
async fn unnamed_inbox_statements_survive_a_change_of_server_connection_drv_1b() {
    let (db, client, _) = migrated(1).await;
    let test = "unnamed_inbox_statements_survive_a_change_of_server_connection_drv_1b";
    let Some(config) = pgbouncer(&db, PoolMode::Transaction, test).await else {
        return;
    };
    // One connection: every transaction is that client's, whatever server runs it.
    let pool = PgPoolOptions::new().max_connections(1).connect(&pooler_url(&config)).await.unwrap();
    let unnamed = SqlxInbox::new(db.namespace()).with_statement_mode(StatementMode::Unnamed);
    let mut last = handle_new(&pool, &unnamed).await.unwrap();
    let mut moved = 0;
    for _ in 0..5 {
        let (held, holds) = HeldServers::hold_backend(&config, last, 3).await;
        moved += usize::from(holds);
        last = handle_new(&pool, &unnamed).await.unwrap();
        drop(held);
    }
    assert!(moved >= 1, "no inbox transaction was moved to another server connection");
    let sql = format!("SELECT count(*) FROM {}", db.namespace().table("inbox"));
    assert_eq!(client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0), 6);

    let prepared = SqlxInbox::new(db.namespace());
    let mut last = handle_new(&pool, &prepared).await.unwrap();
    let mut failure = None;
    for _ in 0..5 {
        let (held, _) = HeldServers::hold_backend(&config, last, 3).await;
        match handle_new(&pool, &prepared).await {
            Ok(pid) => last = pid,
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
        drop(held);
    }
    let Some(SqlxInboxError::Database { error, .. }) = failure else {
        panic!("a prepared record statement survived a change of server connection: {failure:?}");
    };
    let code = error.as_database_error().and_then(|e| e.code()).map(|code| code.into_owned());
    assert_eq!(code.as_deref(), Some("26000"), "{error}");
}

/// QUE-3: effects that fail roll back with the inbox record, so the next delivery runs
/// them; the error names the message and the consumer.
#[tokio::test]
async fn failed_effects_leave_no_record_and_the_next_delivery_applies_que_3() {
    let (db, client, pool) = migrated(1).await;
    let effects = db.namespace().table("effects");
    client.batch_execute(&format!("CREATE TABLE {effects} (attempt int NOT NULL)")).await.unwrap();
    let inbox = SqlxInbox::new(db.namespace());
    let message = MessageId::new();
    let insert = format!("INSERT INTO {effects} (attempt) VALUES ($1)");
    let error = inbox
        .handle(&pool, "billing", message, async |tx: &mut PgConnection| {
            sqlx::query(&insert).bind(1).execute(&mut *tx).await?;
            Err::<(), Box<dyn std::error::Error + Send + Sync>>("the ledger is closed".into())
        })
        .await
        .unwrap_err();
    assert!(matches!(error, SqlxInboxError::Effects { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains(&message.to_string())
            && text.contains("billing")
            && text.contains("the ledger is closed"),
        "{text}"
    );

    let handled = inbox
        .handle(&pool, "billing", message, async |tx: &mut PgConnection| {
            sqlx::query(&insert).bind(2).execute(&mut *tx).await.map(|_| "applied")
        })
        .await
        .unwrap();
    assert_eq!(handled, Handled::Applied("applied"));
    let again =
        inbox.handle(&pool, "billing", message, async |_: &mut PgConnection| Ok::<_, sqlx::Error>(())).await;
    assert_eq!(again.unwrap(), Handled::Duplicate);
    let attempts: Vec<i32> = client
        .query(&format!("SELECT attempt FROM {effects}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(attempts, vec![2]);
}
