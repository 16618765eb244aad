//! `relayer demo --schema X` never drops a schema it did not create (issue 9, item 10).
#![allow(clippy::unwrap_used)]

use relayer_test_support::TestDb;

/// Run as a user would: the binary refuses, exits non-zero naming the schema, and the
/// schema keeps its table.
#[tokio::test]
async fn relayer_demo_refuses_a_schema_it_did_not_create_and_leaves_it_intact() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let precious = format!("\"{}\".precious", db.schema());
    client
        .batch_execute(&format!("CREATE TABLE {precious} (id int); INSERT INTO {precious} VALUES (7)"))
        .await
        .unwrap();

    // The binary ends by itself on refusal; nothing here needs the runtime meanwhile.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_relayer"))
        .args(["demo", "--database-url", &db.url(), "--schema", db.schema()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("schema {:?} exists and was not created by `relayer demo`", db.schema())),
        "{stderr}"
    );
    let kept: i32 = client.query_one(&format!("SELECT id FROM {precious}"), &[]).await.unwrap().get(0);
    assert_eq!(kept, 7);
}
