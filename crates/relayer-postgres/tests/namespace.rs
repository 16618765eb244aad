//! Namespaces with unusual but valid names against a real PostgreSQL (NS-1, NS-2).

#![allow(clippy::unwrap_used)]

use relayer_core::{Namespace, NewMessage};
use relayer_postgres::{OutboxWriter, TABLES, migrate, verify_schema};
use relayer_test_support::TestDb;

/// NS-2: a schema whose name contains the schema template's placeholder text is a valid
/// identifier; relayer's tables land in exactly that schema, with exactly that prefix
/// (a chained rendering once put them in a schema named after the prefix).
#[tokio::test]
async fn a_schema_named_with_placeholder_text_migrates_into_itself_ns_2() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let ns = Namespace::new(format!("{}__PREFIX__", db.schema()), "p__SCHEMA__").unwrap();
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", ns.quoted_schema())).await.unwrap();

    let (checked, schema) = (ns.clone(), db.schema().to_owned());
    // In a task, so the extra schema is dropped whatever happens (TestDb drops only its own).
    let outcome = tokio::spawn(async move {
        let ns = checked;
        migrate(&mut client, &ns).await.unwrap();
        verify_schema(&client, &ns).await.unwrap();
        for table in TABLES {
            let found: bool = client
                .query_one(
                    "SELECT count(*) = 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2",
                    &[&ns.schema(), &ns.object_name(table)],
                )
                .await
                .unwrap()
                .get(0);
            assert!(found, "{} missing", ns.table(table));
        }
        let strays: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE schemaname LIKE $1 AND schemaname <> $2",
                &[&format!("{schema}%"), &ns.schema()],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(strays, 0, "no table in a mis-rendered schema");
        let written = OutboxWriter::new(&ns, ["queue"])
            .enqueue(&client, &[NewMessage::new("queue", "d", b"x".to_vec())])
            .await
            .unwrap();
        assert_eq!(written.len(), 1);
    })
    .await;
    let cleanup = db.connect().await;
    cleanup.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", ns.quoted_schema())).await.unwrap();
    if let Err(failed) = outcome {
        std::panic::resume_unwind(failed.into_panic());
    }
}
