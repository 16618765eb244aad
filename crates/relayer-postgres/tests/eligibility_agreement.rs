//! The SQL and the pure rules agree (SPEC §16): on generated rows — expired and live
//! claims, future schedules, lane rows, old and young rows, exact boundary ties — the
//! recovery and retention statements select exactly the rows that `relayer_core`'s pure
//! eligibility functions call eligible.
//!
//! Rows are written by hand here: old timestamps and expired claims are states the
//! writer cannot produce on demand.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use relayer_core::RetentionTable;
use relayer_core::duration::Retention;
use relayer_core::eligibility::{OutboxRow, dead_row_expired, inbox_row_expired, recovery_eligible};
use relayer_core::store::PageRequest;
use relayer_core::{PassPlan, ScanWindow, Timestamp, Uuid};
use relayer_postgres::migrate;
use relayer_postgres::recovery::RecoveryStatements;
use relayer_postgres::retention::RetentionStatements;
use relayer_test_support::TestDb;

/// Offsets are whole seconds in a narrow range so that exact ties with the cut-offs
/// (`visible_at = now`, `created_at = now - delay`) are generated often.
#[derive(Clone, Debug)]
struct GeneratedOutboxRow {
    created_secs: i64,
    visible_secs: i64,
    lane: Option<&'static str>,
    claimed: bool,
}

fn outbox_row() -> impl Strategy<Value = GeneratedOutboxRow> {
    (
        -60i64..=2,
        -30i64..=30,
        prop::option::weighted(0.25, prop::sample::select(vec!["a", "b"])),
        any::<bool>(),
    )
        .prop_map(|(created_secs, visible_secs, lane, claimed)| GeneratedOutboxRow {
            created_secs,
            visible_secs,
            lane,
            claimed,
        })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

fn ts(time: SystemTime) -> Timestamp {
    Timestamp::from_system_time(time)
}

#[test]
fn recovery_sql_selects_exactly_the_pure_eligible_rows() {
    let rt = runtime();
    let db = rt.block_on(TestDb::new());
    let client = rt.block_on(db.connect());
    rt.block_on(migrate(&mut rt.block_on(db.connect()), db.namespace())).unwrap();
    let statements = RecoveryStatements::new(db.namespace());
    let outbox = db.namespace().table("outbox");

    let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
    let strategy = (prop::collection::vec(outbox_row(), 0..40), 0u64..=45);
    runner
        .run(&strategy, |(rows, delay_secs)| {
            rt.block_on(async {
                // A transaction pins now(): SQL and the pure rules see one instant.
                client.batch_execute("BEGIN").await.unwrap();
                let tx = &client;
                for row in &rows {
                    tx.execute(
                        &format!(
                            "INSERT INTO {outbox} (message_id, transport, destination, body, lane, \
                             created_at, visible_at, claim_token) \
                             VALUES ($1, 't', 'd', '', $2, now() + $3 * interval '1 second', \
                             now() + $4 * interval '1 second', $5)"
                        ),
                        &[
                            &Uuid::new_v4(),
                            &row.lane,
                            &(row.created_secs as f64),
                            &(row.visible_secs as f64),
                            &row.claimed.then(Uuid::new_v4),
                        ],
                    )
                    .await
                    .unwrap();
                }
                let stored = tx
                    .query(
                        &format!("SELECT seq, created_at, visible_at, lane, claim_token, attempts, now() FROM {outbox}"),
                        &[],
                    )
                    .await
                    .unwrap();
                let delay = Duration::from_secs(delay_secs);
                let mut expected = Vec::new();
                let mut highest_unordered = None;
                for r in &stored {
                    let now = ts(r.get(6));
                    let row = OutboxRow {
                        seq: r.get(0),
                        created_at: ts(r.get(1)),
                        visible_at: ts(r.get(2)),
                        lane: r.get(3),
                        claim_token: r.get(4),
                        attempts: r.get(5),
                    };
                    if row.lane.is_none() {
                        highest_unordered = highest_unordered.max(Some(row.seq));
                    }
                    if recovery_eligible(&row, now, delay) {
                        expected.push(row.seq);
                    }
                }
                expected.sort_unstable();
                let request = PageRequest {
                    plan: PassPlan::CaptureBoundary,
                    recovery_delay: delay,
                    limit: 10_000,
                    leader: None,
                };
                let found = statements.lock_page(tx, &request).await.unwrap().unwrap();
                tx.batch_execute("ROLLBACK").await.unwrap();
                let locked: Vec<i64> = found.locked.iter().map(|m| m.seq).collect();
                prop_assert_eq!(&found.page.eligible, &expected);
                prop_assert_eq!(locked, expected, "nobody else holds a row: every eligible row is locked");
                prop_assert_eq!(found.window.map(|w| w.up_to), highest_unordered);
                Ok(())
            })
        })
        .unwrap();
}

#[test]
fn retention_sql_deletes_exactly_the_pure_expired_rows() {
    let rt = runtime();
    let db = rt.block_on(TestDb::new());
    let client = rt.block_on(db.connect());
    rt.block_on(migrate(&mut rt.block_on(db.connect()), db.namespace())).unwrap();
    let statements = RetentionStatements::new(db.namespace());
    let (dead, inbox) = (db.namespace().table("dead"), db.namespace().table("inbox"));

    let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
    let strategy = (
        prop::collection::vec(-100i64..=5, 0..40),
        prop::collection::vec(-100i64..=5, 0..40),
        prop_oneof![
            Just(Retention::Keep),
            (0u64..=90).prop_map(|s| Retention::After(Duration::from_secs(s)))
        ],
    );
    runner
        .run(&strategy, |(dead_ages, inbox_ages, retention)| {
            rt.block_on(async {
                // A transaction pins now(): SQL and the pure rules see one instant.
                client.batch_execute("BEGIN").await.unwrap();
                let tx = &client;
                for (seq, secs) in (0i64..).zip(&dead_ages) {
                    tx.execute(
                        &format!(
                            "INSERT INTO {dead} (seq, message_id, transport, destination, body, created_at, \
                             failed_at, attempts) VALUES ($1, $2, 't', 'd', '', now(), \
                             now() + $3 * interval '1 second', 1)"
                        ),
                        &[&seq, &Uuid::new_v4(), &(*secs as f64)],
                    )
                    .await
                    .unwrap();
                }
                for secs in &inbox_ages {
                    tx.execute(
                        &format!(
                            "INSERT INTO {inbox} (consumer, message_id, processed_at) \
                             VALUES ('c', $1, now() + $2 * interval '1 second')"
                        ),
                        &[&Uuid::new_v4(), &(*secs as f64)],
                    )
                    .await
                    .unwrap();
                }
                let now = ts(tx.query_one("SELECT now()", &[]).await.unwrap().get(0));
                let times = |sql: String| async move {
                    let rows = tx.query(&sql, &[]).await.unwrap();
                    let mut times: Vec<Timestamp> = rows.iter().map(|r| ts(r.get(0))).collect();
                    times.sort_unstable();
                    times
                };
                let dead_before = times(format!("SELECT failed_at FROM {dead}")).await;
                let inbox_before = times(format!("SELECT processed_at FROM {inbox}")).await;
                // Keep (`infinite`) never reaches SQL: the worker skips the table (RET-3).
                if let Some(keep) = retention.duration() {
                    statements
                        .delete_expired(tx, RetentionTable::Dead, keep, 10_000, None)
                        .await
                        .unwrap()
                        .unwrap();
                    statements
                        .delete_expired(tx, RetentionTable::Inbox, keep, 10_000, None)
                        .await
                        .unwrap()
                        .unwrap();
                }
                let dead_after = times(format!("SELECT failed_at FROM {dead}")).await;
                let inbox_after = times(format!("SELECT processed_at FROM {inbox}")).await;
                tx.batch_execute("ROLLBACK").await.unwrap();
                let kept_dead: Vec<_> =
                    dead_before.into_iter().filter(|t| !dead_row_expired(*t, now, retention)).collect();
                let kept_inbox: Vec<_> =
                    inbox_before.into_iter().filter(|t| !inbox_row_expired(*t, now, retention)).collect();
                prop_assert_eq!(dead_after, kept_dead);
                prop_assert_eq!(inbox_after, kept_inbox);
                Ok(())
            })
        })
        .unwrap();
}

/// the empty-table plan trap (docs/performance.md, "Raw limits"): a "take a batch of n" statement first run against an empty table
/// must still take at most n rows once the table is full.
#[tokio::test]
async fn a_retention_batch_never_exceeds_its_limit_even_after_an_empty_first_run() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let statements = RetentionStatements::new(db.namespace());
    let week = Duration::from_secs(7 * 86_400);
    assert_eq!(
        statements.delete_expired(&client, RetentionTable::Inbox, week, 100, None).await.unwrap().unwrap(),
        0
    );
    client
        .execute(
            &format!(
                "INSERT INTO {} (consumer, message_id, processed_at) \
                 SELECT 'c', gen_random_uuid(), now() - interval '30 days' FROM generate_series(1, 2000)",
                db.namespace().table("inbox")
            ),
            &[],
        )
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            statements
                .delete_expired(&client, RetentionTable::Inbox, week, 100, None)
                .await
                .unwrap()
                .unwrap(),
            100
        );
    }
}

/// NS-5: a recovery page reads at most `SCAN_ROWS_PER_ELIGIBLE × limit` rows of its window.
/// A window full of pending rows that are not eligible (here: younger than the recovery
/// delay) yields no row but says how far it read, so the cursor moves past them.
#[tokio::test]
async fn a_recovery_page_reads_a_bounded_share_of_its_window() {
    use relayer_core::NewMessage;
    use relayer_postgres::recovery::SCAN_ROWS_PER_ELIGIBLE;

    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    let writer = relayer_postgres::OutboxWriter::new(db.namespace(), ["t"]);
    let messages: Vec<NewMessage> = (0u8..250).map(|n| NewMessage::new("t", "d", vec![n])).collect();
    let written = writer.enqueue(&client, &messages).await.unwrap();
    let statements = RecoveryStatements::new(db.namespace());
    let hour = Duration::from_secs(3600);
    let limit = 2u32;
    let cap = usize::try_from(SCAN_ROWS_PER_ELIGIBLE).unwrap() * limit as usize;

    let page = |after: i64, recovery_delay: Duration| {
        let request = PageRequest {
            plan: PassPlan::Scan(ScanWindow { after, up_to: i64::MAX }),
            recovery_delay,
            limit,
            leader: None,
        };
        let statements = &statements;
        let client = &client;
        async move { statements.lock_page(client, &request).await.unwrap().unwrap().page }
    };
    let young = page(0, hour).await;
    assert!(young.eligible.is_empty());
    assert_eq!(young.scanned_up_to, Some(written[cap - 1].seq), "stopped after {cap} rows");
    // From there, the rest of the window; the last share ends below the cap: no marker.
    let rest = page(written[cap - 1].seq, hour).await;
    assert_eq!(rest.scanned_up_to, Some(written[2 * cap - 1].seq));
    let last = page(written[2 * cap - 1].seq, hour).await;
    assert_eq!(last, relayer_core::RecoveryPage::default());
    // Eligible rows fill the batch before the cap: no marker either.
    let due = page(0, Duration::ZERO).await;
    assert_eq!(due.eligible, vec![written[0].seq, written[1].seq]);
    assert_eq!(due.scanned_up_to, None);
}
