//! Sizes, text and rows PostgreSQL or a hand-changed schema would make fail (SPEC §15):
//! each is a clear error or is bounded before it reaches a statement, never a panic.
#![allow(clippy::unwrap_used)]

use relayer_postgres::{migrate, namespace_status};
use relayer_test_support::TestDb;

async fn setup() -> (TestDb, tokio_postgres::Client) {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    migrate(&mut client, db.namespace()).await.unwrap();
    (db, client)
}

/// OBS-3, SPEC §15: `status` reads every column with `try_get`. A NULL where the schema
/// promises a value (a constraint dropped by hand) is an error naming what was read and
/// the column, never a panic in the CLI or a host.
#[tokio::test]
async fn status_reports_an_unreadable_column_by_name_instead_of_panicking_obs_3() {
    let (db, client) = setup().await;
    let dead = db.namespace().table("dead");
    // No component writes such a row: only a schema changed by hand allows it.
    client
        .batch_execute(&format!(
            "ALTER TABLE {dead} ALTER COLUMN destination DROP NOT NULL; \
             INSERT INTO {dead} (seq, message_id, transport, destination, body, created_at, attempts) \
             VALUES (1, gen_random_uuid(), 'queue', NULL, '\\x00', now(), 1)"
        ))
        .await
        .unwrap();
    let error = namespace_status(&client, db.namespace()).await.unwrap_err();
    assert_eq!(error.kind(), &relayer_postgres::StorageErrorKind::MalformedRow);
    assert!(error.to_string().starts_with("reading column 1 (destination) of the dead rows"), "{error}");
}
