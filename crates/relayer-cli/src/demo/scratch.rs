//! The demo's scratch schema: created, marked, and only ever dropped by the demo.
//!
//! Every run starts from an empty schema, so the demo drops the one of its last run. It
//! must never drop anything else — `--schema` could name a schema holding real data — so
//! a schema the demo creates carries a marker (its comment), and an existing schema is
//! dropped only when it carries that marker. Otherwise the demo stops before touching
//! anything and says why. The check and the drop run in one transaction under an
//! advisory lock, so two demos on one schema cannot interleave.

use relayer::Namespace;
use tokio_postgres::Client;

/// The comment on a schema the demo created; nothing else writes it.
pub(crate) const MARKER: &str =
    "relayer demo scratch schema: `relayer demo` drops and recreates it on every run";

/// What [`recreate`] found before it created the schema afresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No such schema.
    Nothing,
    /// A schema of an earlier demo run, now dropped.
    EarlierDemo,
}

/// Drops `namespace`'s schema if an earlier demo created it, then creates it empty with the
/// marker. Refuses, changing nothing, when the schema exists without the marker.
pub(crate) async fn recreate(client: &mut Client, namespace: &Namespace) -> Result<Found, String> {
    let schema = namespace.schema();
    let failed = |what: &str, e: tokio_postgres::Error| format!("{what} schema {schema:?}: {e}");
    let tx = client.transaction().await.map_err(|e| failed("preparing", e))?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended('relayer demo schema ' || $1, 0))", &[&schema])
        .await
        .map_err(|e| failed("locking", e))?;
    let existing = tx
        .query_opt(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .await
        .map_err(|e| failed("inspecting", e))?;
    let quoted = namespace.quoted_schema();
    let found = match existing {
        None => Found::Nothing,
        // An unreadable comment is not the marker: the schema is then refused, never dropped.
        Some(row) if row.try_get::<_, Option<String>>(0).ok().flatten().as_deref() == Some(MARKER) => {
            tx.batch_execute(&format!("DROP SCHEMA {quoted} CASCADE"))
                .await
                .map_err(|e| failed("dropping", e))?;
            Found::EarlierDemo
        }
        Some(_) => {
            return Err(format!(
                "schema {schema:?} exists and was not created by `relayer demo`; the demo drops and recreates \
                 its schema, so it will not touch this one. Choose another --schema (the default is \
                 relayer_demo), or, if it is a leftover of an older demo, drop it yourself: \
                 DROP SCHEMA {quoted} CASCADE"
            ));
        }
    };
    let marker = MARKER.replace('\'', "''");
    tx.batch_execute(&format!("CREATE SCHEMA {quoted}; COMMENT ON SCHEMA {quoted} IS '{marker}'"))
        .await
        .map_err(|e| failed("creating", e))?;
    tx.commit().await.map_err(|e| failed("committing", e))?;
    Ok(found)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use relayer_test_support::TestDb;

    use super::*;

    async fn table_exists(client: &Client, name: &str) -> bool {
        client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name]).await.unwrap().get(0)
    }

    /// The demo never drops a schema it did not create: one holding someone's table is
    /// refused with a message naming it, and left exactly as it was.
    #[tokio::test]
    async fn the_demo_refuses_to_drop_a_schema_it_did_not_create() {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        let precious = format!("\"{}\".precious", db.schema());
        client.batch_execute(&format!("CREATE TABLE {precious} (id int)")).await.unwrap();
        let ns = Namespace::new(db.schema(), "relayer_").unwrap();

        let refused = recreate(&mut client, &ns).await.unwrap_err();
        assert!(
            refused
                .contains(&format!("schema {:?} exists and was not created by `relayer demo`", db.schema()))
        );
        assert!(table_exists(&client, &precious).await, "nothing was dropped");

        client.batch_execute(&format!("COMMENT ON SCHEMA \"{}\" IS 'mine'", db.schema())).await.unwrap();
        assert!(recreate(&mut client, &ns).await.is_err(), "another comment is not the marker");
        assert!(table_exists(&client, &precious).await);
    }

    /// The demo recreates the schema of an earlier run: it creates it marked, and drops it
    /// (with what an earlier run left) only because of the marker.
    #[tokio::test]
    async fn the_demo_recreates_only_a_schema_it_created_and_marked() {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        let ns = Namespace::new(format!("{}_demo", db.schema()), "relayer_").unwrap();
        let leftover = format!("{}.leftover", ns.quoted_schema());

        assert_eq!(recreate(&mut client, &ns).await.unwrap(), Found::Nothing);
        client.batch_execute(&format!("CREATE TABLE {leftover} (id int)")).await.unwrap();
        assert_eq!(recreate(&mut client, &ns).await.unwrap(), Found::EarlierDemo);
        assert!(!table_exists(&client, &leftover).await, "an earlier run's schema starts empty");
        let marker: Option<String> = client
            .query_one("SELECT obj_description($1::text::regnamespace, 'pg_namespace')", &[&ns.schema()])
            .await
            .unwrap()
            .get(0);
        assert_eq!(marker.as_deref(), Some(MARKER));
        client.batch_execute(&format!("DROP SCHEMA {} CASCADE", ns.quoted_schema())).await.unwrap();
    }
}
