//! The fixture's own tests, on a real PostgreSQL server.

use std::str::FromStr;

use super::*;
use crate::server::Sources;

/// A connection that is not one of the test's own (its `application_name` differs), so
/// it survives the schema drop and can watch it.
async fn observer(db: &TestDb) -> tokio_postgres::Client {
    let mut config = db.config();
    config.application_name("observer");
    client::connect(&config).await.expect("observer connects")
}

async fn schema_exists(client: &tokio_postgres::Client, schema: &str) -> bool {
    let row = client
        .query_one("SELECT count(*) FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .expect("pg_namespace is readable");
    row.get::<_, i64>(0) == 1
}

#[tokio::test]
async fn two_test_dbs_get_different_random_schemas() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    assert_ne!(a.schema(), b.schema());
    for db in [&a, &b] {
        let hex = db.schema().strip_prefix("t_").expect("schema starts with t_");
        assert_eq!(hex.len(), 16);
        assert!(hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{hex}");
        assert_eq!(db.namespace().schema(), db.schema());
        assert_eq!(db.namespace().prefix(), "relayer_");
    }
}

#[tokio::test]
async fn the_schema_exists_while_the_test_db_lives_and_is_dropped_with_it() {
    let db = TestDb::new().await;
    let schema = db.schema().to_owned();
    let watcher = observer(&db).await;
    assert!(schema_exists(&watcher, &schema).await);

    // Something in the schema, and a session still holding a lock in it: the drop must
    // get through both.
    let client = db.connect().await;
    let table = db.namespace().table("things");
    client.batch_execute(&format!("CREATE TABLE {table} (id bigint)")).await.expect("create table");
    let holder = db.connect().await;
    holder.batch_execute(&format!("BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")).await.expect("lock");

    drop(db);
    assert!(!schema_exists(&watcher, &schema).await, "schema {schema} survived the TestDb");
    drop((client, holder));
}

#[tokio::test]
async fn config_url_connect_and_pool_all_reach_the_test_database_under_the_schema_name() {
    let db = TestDb::new().await;
    assert_eq!(db.config().get_application_name(), Some(db.schema()));

    let from_url = tokio_postgres::Config::from_str(&db.url()).expect("url parses");
    assert!(db.url().starts_with("postgres://"), "{}", db.url());
    assert_eq!(from_url.get_application_name(), Some(db.schema()));
    let client = client::connect(&from_url).await.expect("url connects");
    let name: String =
        client.query_one("SELECT current_setting('application_name')", &[]).await.expect("query").get(0);
    assert_eq!(name, db.schema());

    let pool = db.pool(2).await;
    let conn = pool.get().await.expect("pooled connection");
    let one: i32 = conn.query_one("SELECT 1", &[]).await.expect("query").get(0);
    assert_eq!(one, 1);
}

#[tokio::test]
async fn terminate_backends_kills_the_named_sessions_and_only_those() {
    let db = TestDb::new().await;
    let name = format!("{}_victim", db.schema());
    let mut config = db.config();
    config.application_name(&name);
    let victim = client::connect(&config).await.expect("victim connects");
    victim.simple_query("SELECT 1").await.expect("victim works before");
    let bystander = db.connect().await;

    assert_eq!(db.terminate_backends(&name).await, 1);

    assert!(victim.simple_query("SELECT 1").await.is_err(), "the victim's next query must fail");
    bystander.simple_query("SELECT 1").await.expect("other sessions are untouched");
    assert_eq!(db.terminate_backends(&name).await, 0);
}

/// Forces step (3) of the search order: a throwaway `initdb` cluster, shared by the
/// `TestDb`s alive at the same time, stopped and deleted with the last of them.
#[tokio::test]
async fn a_throwaway_cluster_starts_answers_and_is_stopped_after_the_last_drop() {
    let first = TestDb::from_sources(Sources::ClusterOnly).await;
    let dir = first.server.cluster_dir().expect("a throwaway cluster").to_owned();
    assert!(dir.join("data").join("PG_VERSION").is_file());
    let config = first.config();
    let port = config.get_ports()[0];

    let client = first.connect().await;
    let one: i32 = client.query_one("SELECT 1", &[]).await.expect("SELECT 1").get(0);
    assert_eq!(one, 1);
    let watcher = observer(&first).await;
    assert!(schema_exists(&watcher, first.schema()).await);

    let second = TestDb::from_sources(Sources::ClusterOnly).await;
    assert_eq!(second.config().get_ports(), &[port], "live TestDbs share one cluster");
    drop(second);
    client.simple_query("SELECT 1").await.expect("the cluster outlives all but the last TestDb");

    drop((client, watcher));
    drop(first);
    assert!(!dir.exists(), "{} was not deleted", dir.display());
    let mut probe = config;
    probe.connect_timeout(std::time::Duration::from_secs(2));
    assert!(client::connect(&probe).await.is_err(), "the cluster still answers on port {port}");
}

/// A test's own cluster crashes and comes back on its port with everything committed, and
/// commits durably; it is deleted with the last of it and its `TestDb`s.
#[tokio::test]
async fn an_owned_cluster_restarts_on_its_port_and_keeps_what_was_committed() {
    let cluster = OwnedCluster::start().await;
    let db = cluster.test_db().await;
    let dir = db.server.cluster_dir().expect("a throwaway cluster").to_owned();
    let port = db.config().get_ports()[0];
    assert_eq!(cluster.config().get_ports(), &[port]);

    let client = db.connect().await;
    let durable: String = client.query_one("SHOW synchronous_commit", &[]).await.expect("SHOW").get(0);
    assert_eq!(durable, "on", "an acknowledged commit must survive the restart");
    let table = db.namespace().table("kept");
    client
        .batch_execute(&format!("CREATE TABLE {table} (id int); INSERT INTO {table} VALUES (7)"))
        .await
        .expect("committed before the crash");

    cluster.stop_immediately().await;
    assert!(client.simple_query("SELECT 1").await.is_err(), "a session survived the immediate stop");
    cluster.start_again().await;

    let client = db.connect().await;
    assert_eq!(db.config().get_ports(), &[port]);
    let kept: i32 = client.query_one(&format!("SELECT id FROM {table}"), &[]).await.expect("row").get(0);
    assert_eq!(kept, 7);

    cluster.restart_immediately().await;
    let client = db.connect().await;
    client.simple_query("SELECT 1").await.expect("answers after restart_immediately");

    drop(client);
    drop(cluster);
    assert!(dir.exists(), "the cluster went away while a TestDb on it lived");
    drop(db);
    assert!(!dir.exists(), "{} was not deleted", dir.display());
}
