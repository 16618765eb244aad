//! The versioned schema against a real PostgreSQL (NS-1..3, NS-5).

use relayer_core::Namespace;
use relayer_core::namespace::LONGEST_OBJECT_SUFFIX;
use relayer_postgres::{
    SCHEMA_VERSION, StorageErrorKind, TABLES, current_version, migrate, schema_sql, verify_schema,
};
use relayer_test_support::TestDb;

/// The schema steps this build ships.
const STEPS: &[i32] = &[1, 2, 3, 4, 5, 6];

#[tokio::test]
async fn migrate_creates_every_table_and_a_second_run_applies_nothing() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let ns = db.namespace();

    let first = migrate(&mut client, ns).await.unwrap();
    assert_eq!((first.from, first.to, first.applied.clone()), (0, SCHEMA_VERSION, STEPS.to_vec()));
    for table in TABLES {
        let found: bool =
            client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&ns.table(table)]).await.unwrap().get(0);
        assert!(found, "table {table} missing");
    }
    let second = migrate(&mut client, ns).await.unwrap();
    assert_eq!((second.from, second.applied), (SCHEMA_VERSION, vec![]));
    assert_eq!(verify_schema(&client, ns).await.unwrap(), SCHEMA_VERSION);
}

/// NS-3: replicas starting together migrate under an advisory lock; each step runs once.
#[tokio::test]
async fn concurrent_migrations_apply_each_step_exactly_once() {
    let db = TestDb::new().await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let mut client = db.connect().await;
        let ns = db.namespace().clone();
        tasks.push(tokio::spawn(async move { migrate(&mut client, &ns).await }));
    }
    let mut applied = Vec::new();
    for task in tasks {
        applied.extend(task.await.unwrap().unwrap().applied);
    }
    assert_eq!(applied, STEPS.to_vec(), "every step applied exactly once across replicas");
    let client = db.connect().await;
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {}", db.namespace().table("schema_version")), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, i64::try_from(STEPS.len()).unwrap());
}

/// Concurrent migrations of two namespaces sharing one brand-new schema do not race on
/// `CREATE SCHEMA`.
#[tokio::test]
async fn namespaces_sharing_a_new_schema_migrate_concurrently() {
    let db = TestDb::new().await;
    let schema = format!("{}_shared", db.schema());
    let mut tasks = Vec::new();
    for prefix in ["a_", "b_", "c_"] {
        let mut client = db.connect().await;
        let ns = Namespace::new(schema.clone(), prefix).unwrap();
        tasks.push(tokio::spawn(async move { migrate(&mut client, &ns).await.map(|_| ns) }));
    }
    let client = db.connect().await;
    for task in tasks {
        let ns = task.await.unwrap().unwrap();
        verify_schema(&client, &ns).await.unwrap();
    }
    client.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).await.unwrap();
}

#[tokio::test]
async fn workers_get_a_clear_error_when_the_schema_is_missing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let err = verify_schema(&client, db.namespace()).await.unwrap_err();
    assert_eq!(err.kind(), &StorageErrorKind::SchemaMissing);
    let text = err.to_string();
    assert!(text.contains(db.schema()) && text.contains("relayer schema apply"), "{text}");
    assert_eq!(current_version(&client, db.namespace()).await.unwrap(), None);
}

#[tokio::test]
async fn a_newer_schema_is_refused_by_migrate_but_accepted_by_workers() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let ns = db.namespace();
    migrate(&mut client, ns).await.unwrap();
    client
        .execute(
            &format!(
                "INSERT INTO {} (version, description) VALUES (99, 'future')",
                ns.table("schema_version")
            ),
            &[],
        )
        .await
        .unwrap();
    let err = migrate(&mut client, ns).await.unwrap_err();
    assert_eq!(err.kind(), &StorageErrorKind::SchemaTooNew { found: 99, known: SCHEMA_VERSION });
    assert!(err.to_string().contains("upgrade relayer"), "{err}");
    assert_eq!(verify_schema(&client, ns).await.unwrap(), 99);
}

/// NS-2: every object the schema creates is named `{prefix}…` and fits PostgreSQL's
/// 63-byte limit for the longest prefix a namespace accepts.
#[tokio::test]
async fn every_object_name_fits_the_longest_allowed_prefix() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let prefix = "p".repeat(relayer_core::namespace::MAX_PREFIX_LEN);
    let ns = Namespace::new(db.schema(), prefix.clone()).unwrap();
    migrate(&mut client, &ns).await.unwrap();
    let names: Vec<String> = client
        .query(
            "SELECT relname::text FROM pg_class WHERE relnamespace = $1::text::regnamespace \
             UNION ALL SELECT conname::text FROM pg_constraint WHERE connamespace = $1::text::regnamespace AND contype IN ('p', 'u', 'c', 'f', 'x')",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(names.len() > TABLES.len(), "{names:?}");
    for name in names {
        // PostgreSQL would have truncated a longer name silently, breaking the prefix.
        assert!(name.starts_with(&prefix), "{name} does not carry the prefix");
        assert!(name.len() - prefix.len() <= LONGEST_OBJECT_SUFFIX, "{name} has a suffix over the bound");
    }
}

/// `schema print` output applies cleanly with psql-style execution and passes the check.
#[tokio::test]
async fn printed_schema_applies_and_passes_the_version_check() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let ns = Namespace::new(db.schema(), "printed_").unwrap();
    client.batch_execute(&schema_sql(&ns)).await.unwrap();
    assert_eq!(verify_schema(&client, &ns).await.unwrap(), SCHEMA_VERSION);
    // The default namespace of the same database is untouched.
    assert_eq!(
        current_version(&client, &Namespace::new(db.schema(), "other_").unwrap()).await.unwrap(),
        None
    );
}

/// RES-5: a migration never waits on a lock without bound. While another session holds the
/// migration lock, each try gives up after `MIGRATION_LOCK_TIMEOUT` and is tried again (said
/// at WARN); once the lock is free, the next try migrates.
#[tokio::test]
async fn a_migration_waiting_on_a_lock_times_out_and_tries_again_res_5() {
    let db = TestDb::new().await;
    let ns = db.namespace().clone();
    let key = relayer_core::advisory_lock_key(&relayer_postgres::migration_lock_resource(&ns));
    let holder = db.connect().await;
    holder.execute("SELECT pg_advisory_lock($1)", &[&key]).await.unwrap();

    let warnings = relayer_test_support::Warnings::default();
    let _capture = warnings.capture();
    let mut client = db.connect().await;
    let migrating = tokio::spawn(async move { migrate(&mut client, &ns).await });
    relayer_test_support::eventually("a try's lock wait timed out and is tried again", || async {
        warnings.text().contains("a migration lock wait timed out")
    })
    .await;
    assert!(!migrating.is_finished(), "one timed-out try is not the answer");

    holder.execute("SELECT pg_advisory_unlock($1)", &[&key]).await.unwrap();
    let report = relayer_test_support::within(migrating).await.unwrap().unwrap();
    assert_eq!(report.applied, STEPS.to_vec());
}
