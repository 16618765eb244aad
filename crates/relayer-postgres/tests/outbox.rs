//! The outbox and lane statements against a real PostgreSQL (OUT-1..4, DSP-1, DSP-3, DSP-5,
//! LAN-1..5).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use relayer_core::store::{LockOutbox, PageRequest};
use relayer_core::{Delivery, MessageProblem, NewMessage, PassPlan, Uuid};
use relayer_postgres::recovery::RecoveryStatements;
use relayer_postgres::{
    Completion, EnqueueError, HeadFailure, LaneHead, LaneStatements, OutboxStatements, OutboxWriter, PgStore,
    migrate, notify_channel,
};
use relayer_test_support::TestDb;

const CLAIM: Duration = Duration::from_secs(30);

async fn setup() -> (TestDb, tokio_postgres::Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

fn writer(db: &TestDb) -> OutboxWriter {
    OutboxWriter::new(db.namespace(), ["queue", "other"]).with_max_body_bytes(64)
}

async fn count(client: &tokio_postgres::Client, db: &TestDb, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table(table)), &[])
        .await
        .unwrap()
        .get(0)
}

fn message(n: usize) -> NewMessage {
    NewMessage::new("queue", "orders", format!("m{n}").into_bytes())
}

/// OUT-1, OUT-2: one batch, rows in order, fields preserved, scheduled on the DB clock.
#[tokio::test]
async fn enqueue_writes_a_batch_in_order_with_every_field() {
    let (db, client) = setup().await;
    let messages = vec![
        message(0).header("content-type", "text/plain").trace_context("00-abc-def-01"),
        message(1).lane("order-1"),
        message(2).delivery(Delivery::After(Duration::from_secs(3600))),
    ];
    let written = writer(&db).enqueue(&client, &messages).await.unwrap();
    assert_eq!(written.len(), 3);
    assert!(written.windows(2).all(|w| w[0].seq < w[1].seq));
    for (w, m) in written.iter().zip(&messages) {
        assert_eq!(w.id, m.message_id());
    }
    let rows = client
        .query(
            &format!(
                "SELECT message_id, headers->>'content-type', trace_context, lane, \
                        deliver_at IS NOT NULL, visible_at > now() + interval '59 minutes', attempts \
                 FROM {} ORDER BY seq",
                db.namespace().table("outbox")
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, Uuid>(0), *messages[0].message_id().as_uuid());
    assert_eq!(rows[0].get::<_, Option<String>>(1).as_deref(), Some("text/plain"));
    assert_eq!(rows[0].get::<_, Option<String>>(2).as_deref(), Some("00-abc-def-01"));
    assert_eq!(rows[1].get::<_, Option<String>>(3).as_deref(), Some("order-1"));
    assert!(!rows[0].get::<_, bool>(4) && rows[2].get::<_, bool>(4) && rows[2].get::<_, bool>(5));
    assert_eq!(rows[0].get::<_, i32>(6), 0);
}

/// OUT-3: each kind of bad message is refused with a clear error; nothing of the batch is written.
#[tokio::test]
async fn bad_messages_are_refused_and_nothing_is_written() {
    let (db, client) = setup().await;
    let writer = writer(&db);
    let cases = [
        (NewMessage::new("nats", "orders", vec![]), "no transport is registered as \"nats\""),
        (NewMessage::new("queue", "", vec![]), "the destination is empty"),
        (NewMessage::new("queue", "orders", vec![0; 65]), "the body is 65 bytes; the limit is 64"),
        (message(9).header("bad name", "v"), "invalid header name \"bad name\""),
    ];
    for (bad, expected) in cases {
        let batch = vec![message(0), message(1), bad];
        let error = writer.enqueue(&client, &batch).await.unwrap_err();
        assert!(matches!(&error, EnqueueError::Invalid(e) if e.index() == 2), "{error}");
        assert!(error.to_string().contains(expected), "{error}");
        assert_eq!(count(&client, &db, "outbox").await, 0);
    }
    let error = writer.enqueue(&client, &[NewMessage::new("x", "d", vec![])]).await.unwrap_err();
    let EnqueueError::Invalid(e) = error else { panic!("expected a validation error") };
    assert_eq!(e.problem(), &MessageProblem::UnknownTransport("x".into()));
}

/// OUT-1, OUT-4: a rolled-back enqueue leaves nothing and notifies no one; a committed
/// one notifies the namespace's channel.
#[tokio::test]
async fn enqueue_is_transactional_and_notifies_on_commit_only() {
    let (db, mut client) = setup().await;
    let (listener, mut connection) = db.config().connect(tokio_postgres::NoTls).await.unwrap();
    let (tx_note, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let Ok(tokio_postgres::AsyncMessage::Notification(n)) = message {
                let _ = tx_note.send(n.channel().to_owned());
            }
        }
    });
    listener.batch_execute(&format!("LISTEN {}", notify_channel(db.namespace()))).await.unwrap();

    let tx = client.transaction().await.unwrap();
    writer(&db).enqueue(&tx, &[message(0)]).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count(&client, &db, "outbox").await, 0);
    listener.batch_execute("SELECT 1").await.unwrap(); // a round trip: any notification has arrived
    assert!(notes.try_recv().is_err(), "a rolled-back enqueue must not notify");

    let tx = client.transaction().await.unwrap();
    writer(&db).enqueue(&tx, &[message(1), message(2)]).await.unwrap();
    tx.commit().await.unwrap();
    let channel = tokio::time::timeout(Duration::from_secs(30), notes.recv()).await.unwrap().unwrap();
    assert_eq!(channel, notify_channel(db.namespace()));
    assert_eq!(count(&client, &db, "outbox").await, 2);
}

/// DSP-1: claims take only due, unordered, unclaimed rows, never more than asked, and a
/// second claimer skips what the first holds.
#[tokio::test]
async fn claims_are_conditional_bounded_and_exclusive() {
    let (db, client) = setup().await;
    let mut batch: Vec<NewMessage> = (0..20).map(message).collect();
    batch.push(message(20).lane("l"));
    batch.push(message(21).delivery(Delivery::After(Duration::from_secs(3600))));
    let written = writer(&db).enqueue(&client, &batch).await.unwrap();
    let statements = OutboxStatements::new(db.namespace());
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());

    let first = statements.claim_due(&client, a, CLAIM, 7, &[]).await.unwrap().messages;
    assert_eq!(first.len(), 7);
    let second = statements.claim_due(&client, b, CLAIM, 100, &[]).await.unwrap().messages;
    assert_eq!(second.len(), 13, "the rest of the due unordered rows, none of the first claim's");
    assert!(second.iter().all(|m| first.iter().all(|f| f.seq != m.seq)));
    assert!(statements.claim_due(&client, b, CLAIM, 100, &[]).await.unwrap().messages.is_empty());
    // The scheduled row and the lane row are never claimed here; by seq neither.
    let by_seq =
        statements.claim_seqs(&client, b, CLAIM, &[written[20].seq, written[21].seq]).await.unwrap().messages;
    assert!(by_seq.is_empty());
    // Fields arrive intact.
    assert_eq!(first[0].envelope.id, batch[0].message_id());
    assert_eq!(first[0].envelope.body, b"m0");
    assert_eq!((first[0].transport.as_str(), first[0].destination.as_str()), ("queue", "orders"));
}

/// DSP-6: tripped destinations are left out of claims.
#[tokio::test]
async fn claims_skip_tripped_destinations() {
    let (db, client) = setup().await;
    let batch = vec![message(0), NewMessage::new("queue", "payments", b"p".to_vec()), message(1)];
    writer(&db).enqueue(&client, &batch).await.unwrap();
    let statements = OutboxStatements::new(db.namespace());
    let tripped = vec![("queue".to_owned(), "orders".to_owned())];
    let claimed = statements.claim_due(&client, Uuid::new_v4(), CLAIM, 10, &tripped).await.unwrap().messages;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].destination, "payments");
}

/// DSP-3, DSP-5: one completion deletes accepted rows, releases failed ones with attempts and
/// error, moves poison to dead, defers unsent ones; a stale token changes nothing.
#[tokio::test]
async fn completion_is_per_message_and_fenced_by_the_claim_token() {
    let (db, client) = setup().await;
    writer(&db).enqueue(&client, &(0..4).map(message).collect::<Vec<_>>()).await.unwrap();
    let statements = OutboxStatements::new(db.namespace());
    let token = Uuid::new_v4();
    let claimed = statements.claim_due(&client, token, CLAIM, 10, &[]).await.unwrap().messages;
    let seqs: Vec<i64> = claimed.iter().map(|m| m.seq).collect();

    let mut stale = Completion::new();
    stale.accept(seqs[0]);
    let report = statements.complete(&client, Uuid::new_v4(), &stale).await.unwrap();
    assert_eq!((report.deleted, report.fenced_out), (0, 1), "a stale claim deletes nothing");

    let mut completion = Completion::new();
    completion.accept(seqs[0]);
    completion.retry(seqs[1], "transient send failure: broker down", Duration::from_secs(3600));
    completion.bury(seqs[2], "permanent send failure: refused");
    completion.defer(seqs[3], Duration::ZERO);
    let report = statements.complete(&client, token, &completion).await.unwrap();
    assert_eq!(
        (report.deleted, report.released, report.dead, report.deferred, report.fenced_out),
        (1, 1, 1, 1, 0)
    );

    let outbox = db.namespace().table("outbox");
    let rows = client
        .query(
            &format!("SELECT seq, attempts, last_error, claim_token IS NULL FROM {outbox} ORDER BY seq"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].get::<_, i64>(0), seqs[1]);
    assert_eq!(rows[0].get::<_, i32>(1), 1);
    assert_eq!(rows[0].get::<_, Option<String>>(2).as_deref(), Some("transient send failure: broker down"));
    assert!(rows[0].get::<_, bool>(3));
    assert_eq!(
        (rows[1].get::<_, i64>(0), rows[1].get::<_, i32>(1)),
        (seqs[3], 0),
        "deferred: no attempt counted"
    );
    let dead = client
        .query_one(&format!("SELECT seq, attempts, last_error FROM {}", db.namespace().table("dead")), &[])
        .await
        .unwrap();
    assert_eq!((dead.get::<_, i64>(0), dead.get::<_, i32>(1)), (seqs[2], 1));
    // The deferred row is claimable again at once; the retried one is not yet due.
    let again = statements.claim_due(&client, Uuid::new_v4(), CLAIM, 10, &[]).await.unwrap().messages;
    assert_eq!(again.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![seqs[3]]);
}

/// DSP-1: an expired claim can be retaken, and the first claimer's completion is then fenced out.
#[tokio::test]
async fn an_expired_claim_is_retaken_and_the_old_owner_is_fenced_out() {
    let (db, client) = setup().await;
    writer(&db).enqueue(&client, &[message(0)]).await.unwrap();
    let statements = OutboxStatements::new(db.namespace());
    let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
    let claimed =
        statements.claim_due(&client, old, Duration::from_millis(1), 1, &[]).await.unwrap().messages;
    assert_eq!(claimed.len(), 1);
    let mut retaken = Vec::new();
    for _ in 0..300 {
        retaken = statements.claim_due(&client, new, CLAIM, 1, &[]).await.unwrap().messages;
        if !retaken.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(retaken.len(), 1);
    let mut completion = Completion::new();
    completion.accept(claimed[0].seq);
    assert_eq!(statements.complete(&client, old, &completion).await.unwrap().fenced_out, 1);
    assert_eq!(count(&client, &db, "outbox").await, 1);
    assert_eq!(statements.complete(&client, new, &completion).await.unwrap().deleted, 1);
    assert_eq!(count(&client, &db, "outbox").await, 0);
}

/// LAN-1, LAN-3: one owner per lane; the head is the lowest seq; accepted heads advance the lane.
#[tokio::test]
async fn lanes_have_one_owner_and_advance_head_by_head() {
    let (db, client) = setup().await;
    let batch = vec![message(0).lane("a"), message(1).lane("b"), message(2).lane("a"), message(3)];
    let written = writer(&db).enqueue(&client, &batch).await.unwrap();
    let lanes = LaneStatements::new(db.namespace());
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    assert_eq!(
        lanes.claim(&client, a, CLAIM, 10, "", 40, &[]).await.unwrap().lanes,
        vec!["a".to_owned(), "b".to_owned()]
    );
    assert!(
        lanes.claim(&client, b, CLAIM, 10, "", 40, &[]).await.unwrap().lanes.is_empty(),
        "lanes are held"
    );
    assert_eq!(lanes.head(&client, "a", b, CLAIM).await.unwrap(), LaneHead::Lost);

    let LaneHead::Due(head) = lanes.head(&client, "a", a, CLAIM).await.unwrap() else { panic!("head due") };
    assert_eq!(head.seq, written[0].seq);
    assert!(!lanes.accept_head(&client, "a", b, head.seq).await.unwrap(), "fenced");
    assert!(lanes.accept_head(&client, "a", a, head.seq).await.unwrap());
    let LaneHead::Due(head) = lanes.head(&client, "a", a, CLAIM).await.unwrap() else { panic!("head due") };
    assert_eq!(head.seq, written[2].seq);
    assert!(lanes.accept_head(&client, "a", a, head.seq).await.unwrap());
    assert_eq!(lanes.head(&client, "a", a, CLAIM).await.unwrap(), LaneHead::Empty);
    lanes.release_claim(&client, "a", a).await.unwrap();
    lanes.release_claim(&client, "b", a).await.unwrap();
    // b is free again; a is empty and forgotten.
    assert_eq!(lanes.claim(&client, b, CLAIM, 10, "", 40, &[]).await.unwrap().lanes, vec!["b".to_owned()]);
    assert_eq!(count(&client, &db, "lanes").await, 1);
}

/// LAN-2, LAN-5: a failed head blocks; a parked lane stays parked until released or its head
/// skipped, each recorded in the audit table.
#[tokio::test]
async fn parked_lanes_block_until_released_or_skipped_with_an_audit_record() {
    let (db, client) = setup().await;
    let batch = vec![message(0).lane("a"), message(1).lane("a")];
    let written = writer(&db).enqueue(&client, &batch).await.unwrap();
    let lanes = LaneStatements::new(db.namespace());
    let token = Uuid::new_v4();
    assert_eq!(lanes.claim(&client, token, CLAIM, 10, "", 40, &[]).await.unwrap().lanes.len(), 1);
    assert!(
        lanes
            .fail_head(
                &client,
                "a",
                token,
                written[0].seq,
                HeadFailure::Retry { error: "boom", after: Duration::from_secs(3600) }
            )
            .await
            .unwrap()
    );
    assert_eq!(lanes.head(&client, "a", token, CLAIM).await.unwrap(), LaneHead::NotDue, "the lane blocks");
    assert!(
        lanes
            .fail_head(&client, "a", token, written[0].seq, HeadFailure::Park { error: "boom again" })
            .await
            .unwrap()
    );
    assert_eq!(lanes.head(&client, "a", token, CLAIM).await.unwrap(), LaneHead::Lost, "parked");
    assert!(
        lanes.claim(&client, Uuid::new_v4(), CLAIM, 10, "", 40, &[]).await.unwrap().lanes.is_empty(),
        "parked lanes are not claimed"
    );
    let parked = lanes.parked_lanes(&client).await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(
        (parked[0].parked_seq, parked[0].reason.as_deref()),
        (Some(written[0].seq), Some("boom again"))
    );

    assert_eq!(lanes.release_lane(&client, "a", "alice").await.unwrap(), Some(Some(written[0].seq)));
    assert_eq!(lanes.release_lane(&client, "a", "alice").await.unwrap(), None, "not parked any more");
    let attempts: i32 = client
        .query_one(
            &format!("SELECT attempts FROM {} WHERE seq = $1", db.namespace().table("outbox")),
            &[&written[0].seq],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 0, "a released head is tried again in full (LAN-2)");
    let token = Uuid::new_v4();
    assert_eq!(
        lanes.claim(&client, token, CLAIM, 10, "", 40, &[]).await.unwrap().lanes.len(),
        1,
        "released head is due at once"
    );
    assert!(
        lanes
            .fail_head(&client, "a", token, written[0].seq, HeadFailure::Park { error: "still broken" })
            .await
            .unwrap()
    );

    assert_eq!(lanes.skip_lane_head(&client, "a", "bob").await.unwrap(), Some(written[0].seq));
    assert_eq!(lanes.skip_lane_head(&client, "a", "bob").await.unwrap(), None);
    assert_eq!(count(&client, &db, "dead").await, 1);
    let token = Uuid::new_v4();
    assert_eq!(lanes.claim(&client, token, CLAIM, 10, "", 40, &[]).await.unwrap().lanes.len(), 1);
    let LaneHead::Due(head) = lanes.head(&client, "a", token, CLAIM).await.unwrap() else {
        panic!("head due")
    };
    assert_eq!(head.seq, written[1].seq, "the row behind the skipped head flows");
    let audit = client
        .query(
            &format!("SELECT actor, action, subject FROM {} ORDER BY id", db.namespace().table("audit")),
            &[],
        )
        .await
        .unwrap();
    let audit: Vec<(String, String, String)> = audit.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        audit,
        vec![
            ("alice".to_owned(), "lane.release".to_owned(), "a".to_owned()),
            ("bob".to_owned(), "lane.skip_head".to_owned(), "a".to_owned())
        ]
    );
}

/// The lane `a` of two rows written by the real writer, its head parked by its owner as the
/// dispatcher parks it; returns the rows' `seq`s.
async fn parked_lane(db: &TestDb, client: &tokio_postgres::Client, lanes: &LaneStatements) -> Vec<i64> {
    let batch = vec![message(0).lane("a"), message(1).lane("a")];
    let written = writer(db).enqueue(client, &batch).await.unwrap();
    let token = Uuid::new_v4();
    assert_eq!(lanes.claim(client, token, CLAIM, 10, "", 40, &[]).await.unwrap().lanes, vec!["a".to_owned()]);
    let park = HeadFailure::Park { error: "poison" };
    assert!(lanes.fail_head(client, "a", token, written[0].seq, park).await.unwrap());
    written.iter().map(|w| w.seq).collect()
}

/// A pool of the dispatcher's kind: `synchronous_commit = off` on every session.
async fn asynchronous_pool(db: &TestDb) -> relayer_postgres::PgPool {
    relayer_postgres::connect_pool(relayer_postgres::asynchronous_commit(db.config()), 1).await.unwrap()
}

/// Opens a transaction on `client`, checked to commit asynchronously so far.
async fn begin_asynchronous(client: &tokio_postgres::Client) {
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(synchronous_commit(client).await, "off", "the session commits asynchronously");
}

/// The statement just run made its transaction commit durably (`what`), and only it: after
/// the commit the session is asynchronous again.
async fn commits_durably_this_transaction_only(client: &tokio_postgres::Client, what: &str) {
    assert_eq!(synchronous_commit(client).await, "on", "{what}");
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(synchronous_commit(client).await, "off", "for that transaction only");
}

async fn synchronous_commit(client: &tokio_postgres::Client) -> String {
    client.query_one("SELECT current_setting('synchronous_commit')", &[]).await.unwrap().get(0)
}

/// LAN-2: a release commits durably on the dispatcher's asynchronous-commit connection —
/// an operator trusts an action that returned.
#[tokio::test]
async fn lane_release_commits_durably_on_an_asynchronous_commit_connection() {
    let (db, client) = setup().await;
    let lanes = LaneStatements::new(db.namespace());
    let seqs = parked_lane(&db, &client, &lanes).await;
    let pool = asynchronous_pool(&db).await;
    let connection = pool.get().await.unwrap();
    begin_asynchronous(&connection).await;
    assert_eq!(lanes.release_lane(&*connection, "a", "alice").await.unwrap(), Some(Some(seqs[0])));
    commits_durably_this_transaction_only(&connection, "the release's transaction commits durably").await;
}

/// LAN-5: a skip commits durably on the dispatcher's asynchronous-commit connection.
#[tokio::test]
async fn lane_skip_commits_durably_on_an_asynchronous_commit_connection() {
    let (db, client) = setup().await;
    let lanes = LaneStatements::new(db.namespace());
    let seqs = parked_lane(&db, &client, &lanes).await;
    let pool = asynchronous_pool(&db).await;
    let connection = pool.get().await.unwrap();
    begin_asynchronous(&connection).await;
    assert_eq!(lanes.skip_lane_head(&*connection, "a", "bob").await.unwrap(), Some(seqs[0]));
    commits_durably_this_transaction_only(&connection, "the skip's transaction commits durably").await;
}

/// LAN-1: an accepted head's delete commits durably on the dispatcher's asynchronous-commit
/// connection: lost, it would replay the head after later heads of its lane were sent.
#[tokio::test]
async fn lane_head_accept_commits_durably_on_an_asynchronous_commit_connection() {
    let (db, client) = setup().await;
    let written = writer(&db).enqueue(&client, &[message(0).lane("a"), message(1).lane("a")]).await.unwrap();
    let lanes = LaneStatements::new(db.namespace());
    let token = Uuid::new_v4();
    let pool = asynchronous_pool(&db).await;
    let connection = pool.get().await.unwrap();
    begin_asynchronous(&connection).await;
    assert_eq!(lanes.claim(&*connection, token, CLAIM, 10, "", 40, &[]).await.unwrap().lanes.len(), 1);
    let LaneHead::Due(head) = lanes.head(&*connection, "a", token, CLAIM).await.unwrap() else {
        panic!("head due")
    };
    assert_eq!(head.seq, written[0].seq);
    assert_eq!(synchronous_commit(&connection).await, "off", "claiming and reading stay asynchronous");
    assert!(lanes.accept_head(&*connection, "a", token, head.seq).await.unwrap());
    commits_durably_this_transaction_only(&connection, "the head's delete commits durably").await;
}

/// SWP-4: the sweeper's rows are held by its transaction's locks instead of a written
/// claim. Locking is as conditional as claiming (live claims, lane rows, future schedules
/// and rows another transaction holds are skipped), and the locked completion deletes,
/// retries and buries exactly the rows it names.
#[tokio::test]
async fn locked_recovery_skips_held_rows_and_completes_in_its_transaction() {
    let (db, mut client) = setup().await;
    let other = db.connect().await;
    let mut batch: Vec<NewMessage> = (0..6).map(message).collect();
    batch.push(message(6).lane("l"));
    batch.push(message(7).delivery(Delivery::After(Duration::from_secs(3600))));
    let written = writer(&db).enqueue(&client, &batch).await.unwrap();
    let seqs: Vec<i64> = written.iter().map(|w| w.seq).collect();
    let statements = OutboxStatements::new(db.namespace());
    // Row 0 is under a live claim; row 1 is locked by another open transaction.
    assert_eq!(
        statements.claim_seqs(&client, Uuid::new_v4(), CLAIM, &seqs[..1]).await.unwrap().messages.len(),
        1
    );
    other.batch_execute("BEGIN").await.unwrap();
    let outbox = db.namespace().table("outbox");
    other.execute(&format!("SELECT 1 FROM {outbox} WHERE seq = $1 FOR UPDATE"), &[&seqs[1]]).await.unwrap();

    let tx = client.transaction().await.unwrap();
    let request = PageRequest {
        plan: PassPlan::CaptureBoundary,
        recovery_delay: Duration::ZERO,
        limit: 100,
        leader: None,
    };
    let found = RecoveryStatements::new(db.namespace()).lock_page(&tx, &request).await.unwrap().unwrap();
    assert_eq!(found.window.map(|w| w.up_to), Some(seqs[7]), "the boundary: the highest unordered row");
    assert_eq!(found.page.eligible, seqs[1..6].to_vec(), "the page: due, unordered, no live claim");
    let got: Vec<i64> = found.locked.iter().map(|m| m.seq).collect();
    assert_eq!(got, seqs[2..6].to_vec(), "locked: the page's rows no other transaction holds");
    let mut completion = Completion::new();
    completion.accept(seqs[2]);
    completion.accept(seqs[3]);
    completion.retry(seqs[4], "broker down", Duration::from_secs(60));
    completion.bury(seqs[5], "refused");
    let report = PgStore::new(&tx, &statements).complete_locked(&completion).await.unwrap();
    assert_eq!((report.deleted, report.released, report.dead, report.fenced_out), (2, 1, 1, 0));
    tx.commit().await.unwrap();
    other.batch_execute("ROLLBACK").await.unwrap();

    assert_eq!(count(&client, &db, "outbox").await, 5, "claimed, locked-elsewhere, retried, lane, scheduled");
    assert_eq!(count(&client, &db, "dead").await, 1);
    let retried: (i32, Option<String>) = client
        .query_one(
            &format!("SELECT attempts, last_error FROM {} WHERE seq = $1", db.namespace().table("outbox")),
            &[&seqs[4]],
        )
        .await
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    assert_eq!(retried, (1, Some("broker down".to_owned())));
}

/// LAN-1: writers of one lane serialize until commit, so a lane's seq order is its commit
/// order — a later write cannot commit (and be sent) before an earlier, still-open one.
/// Writers of other lanes, and unordered writers, do not wait.
#[tokio::test]
async fn concurrent_writers_of_one_lane_commit_in_seq_order_lan_1() {
    let (db, mut first) = setup().await;
    let second = db.connect().await;
    let other = db.connect().await;
    let second_pid: i32 = second.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);

    let tx = first.transaction().await.unwrap();
    let earlier = writer(&db).enqueue(&tx, &[message(0).lane("order-7")]).await.unwrap();
    // Another lane and an unordered message go through while the first writer is open.
    relayer_test_support::within(writer(&db).enqueue(&other, &[message(1).lane("order-8"), message(2)]))
        .await
        .unwrap();

    let later = tokio::spawn({
        let writer = writer(&db);
        async move {
            second.batch_execute("BEGIN").await.unwrap();
            let written = writer.enqueue(&second, &[message(3).lane("order-7")]).await.unwrap();
            second.batch_execute("COMMIT").await.unwrap();
            written
        }
    });
    // The second writer of the lane waits on the lane's advisory lock…
    relayer_test_support::eventually("the second writer of the lane waits for the first", || {
        let other = &other;
        async move {
            let row = other
                .query_one(
                    "SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' AND wait_event IS NOT DISTINCT FROM 'advisory' \
                     FROM pg_stat_activity WHERE pid = $1",
                    &[&second_pid],
                )
                .await
                .unwrap();
            row.get::<_, bool>(0)
        }
    })
    .await;
    assert!(!later.is_finished());
    // …until the first commits; then it draws a later seq and commits after it.
    tx.commit().await.unwrap();
    let later = relayer_test_support::within(later).await.unwrap();
    assert!(earlier[0].seq < later[0].seq);
    assert_eq!(count(&first, &db, "outbox").await, 4);
}

/// LAN-1 at scale: a lane claim visits at most its cap of lanes, so lanes that cannot be
/// claimed (here: heads scheduled an hour ahead) cost a bounded walk per pass, and the
/// claim resumes where the walk stopped until it reaches the due lane behind them.
#[tokio::test]
async fn a_lane_claim_visits_at_most_its_cap_and_resumes_after_it() {
    let (db, client) = setup().await;
    let later = Delivery::After(Duration::from_secs(3600));
    let mut batch: Vec<NewMessage> =
        (0..30).map(|n| message(n).lane(format!("a{n:02}")).delivery(later)).collect();
    batch.push(message(99).lane("z"));
    writer(&db).enqueue(&client, &batch).await.unwrap();
    let lanes = LaneStatements::new(db.namespace());

    let first = lanes.claim(&client, Uuid::new_v4(), CLAIM, 10, "", 8, &[]).await.unwrap();
    assert!(first.lanes.is_empty());
    assert_eq!(first.resume_after, "a07", "the walk stopped at its cap of 8 lanes");
    let mut after = first.resume_after;
    let mut claims = 1;
    let claimed = loop {
        let claim = lanes.claim(&client, Uuid::new_v4(), CLAIM, 10, &after, 8, &[]).await.unwrap();
        claims += 1;
        if !claim.lanes.is_empty() {
            break claim;
        }
        assert!(claim.resume_after > after, "the walk moves on");
        after = claim.resume_after;
    };
    assert_eq!(claimed.lanes, vec!["z".to_owned()]);
    assert_eq!(claimed.resume_after, "", "the end of the lanes wraps to the start");
    assert_eq!(claims, 4, "31 lanes, 8 per claim");
}

/// SPEC §15: headers go in and come back through the one codec (`relayer_core::postgres`)
/// unchanged, and are stored as the plain jsonb object of strings older rows have.
#[tokio::test]
async fn written_headers_read_back_identical_and_are_stored_as_a_jsonb_object_of_strings() {
    let (db, client) = setup().await;
    let tricky = [
        ("content-type", "application/json; charset=\"utf-8\""),
        ("x-escapes", "back\\slash \"quote\" tab\t newline\n"),
        ("x-unicode", "zoë — 東京 🚀"),
        ("x-empty", ""),
        ("a", "shortest name first in jsonb, not in a BTreeMap"),
    ];
    let with_headers = tricky.iter().fold(message(0), |m, (name, value)| m.header(*name, *value));
    let messages = vec![with_headers, message(1)];
    writer(&db).enqueue(&client, &messages).await.unwrap();

    let claimed =
        OutboxStatements::new(db.namespace()).claim_due(&client, Uuid::new_v4(), CLAIM, 10, &[]).await;
    let claimed = claimed.unwrap();
    assert!(claimed.undecodable.is_empty());
    assert_eq!(claimed.messages.len(), 2);
    for (read, written) in claimed.messages.iter().zip(&messages) {
        assert_eq!(&read.envelope.headers, written.header_map());
    }
    // The stored value equals the object a JSON encoder of the same map gives.
    let expected: serde_json::Value =
        tricky.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
    let outbox = db.namespace().table("outbox");
    let row = client
        .query_one(
            &format!(
                "SELECT headers = $1::jsonb, (SELECT bool_and(jsonb_typeof(value) = 'string') \
                                               FROM jsonb_each(headers)), \
                        (SELECT headers FROM {outbox} ORDER BY seq OFFSET 1) = '{{}}'::jsonb \
                 FROM {outbox} ORDER BY seq LIMIT 1"
            ),
            &[&expected],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0) && row.get::<_, bool>(1) && row.get::<_, bool>(2));
}

/// DSP-6d: a breaker that closes makes the destination's unclaimed waiting rows due at
/// once — never before their `deliver_at` (a row held past it goes to it), never a row under
/// a live claim, never a row merely scheduled, never another destination's.
#[tokio::test]
async fn a_release_frees_held_rows_but_never_before_deliver_at_nor_a_claimed_or_scheduled_row_dsp_6() {
    let (db, client) = setup().await;
    let outbox = db.namespace().table("outbox");
    let down = |n: usize| NewMessage::new("queue", "down", format!("d{n}").into_bytes());
    let rows = writer(&db)
        .enqueue(
            &client,
            &[
                down(0),
                down(1).delivery(Delivery::After(Duration::from_secs(120))),
                down(2),
                down(3).delivery(Delivery::After(Duration::from_secs(30))),
                NewMessage::new("queue", "other", b"o".to_vec()),
            ],
        )
        .await
        .unwrap();
    let seqs: Vec<i64> = rows.iter().map(|row| row.seq).collect();
    let statements = OutboxStatements::new(db.namespace());
    // d0 held, d1 only scheduled (2 min, past the cool-down), d2 then taken by a live
    // claim, d3 held past its deliver_at (30 s), `other` waiting (another destination).
    let held = statements.hold_back(&client, "queue", "down", Duration::from_secs(60)).await.unwrap();
    assert_eq!(held, 3, "d0, d2 and d3: due within the cool-down");
    client
        .execute(
            &format!(
                "UPDATE {outbox} SET claim_token = gen_random_uuid(), visible_at = now() + interval '5 minutes' \
                 WHERE seq = $1"
            ),
            &[&seqs[2]],
        )
        .await
        .unwrap();
    client
        .execute(
            &format!("UPDATE {outbox} SET visible_at = now() + interval '90 seconds' WHERE seq = ANY($1)"),
            &[&vec![seqs[3], seqs[4]]],
        )
        .await
        .unwrap();
    let before: Vec<(i64, std::time::SystemTime)> = client
        .query(&format!("SELECT seq, visible_at FROM {outbox} ORDER BY seq"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();

    let released = statements.release_held(&client, "queue", "down", Duration::from_secs(600)).await.unwrap();
    assert_eq!(released, 2, "d0 and d3");
    let after = client
        .query(
            &format!(
                "SELECT seq, visible_at, visible_at <= now(), visible_at = deliver_at FROM {outbox} ORDER BY seq"
            ),
            &[],
        )
        .await
        .unwrap();
    let due: Vec<bool> = after.iter().map(|row| row.get(2)).collect();
    assert_eq!(due, [true, false, false, false, false], "only d0 is due at once");
    assert_eq!(after[3].get::<_, Option<bool>>(3), Some(true), "d3 waits for its deliver_at, no longer");
    for i in [1, 2, 4] {
        assert_eq!(after[i].get::<_, std::time::SystemTime>(1), before[i].1, "row {i} untouched");
    }
}
