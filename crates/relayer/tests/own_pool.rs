//! A host on a pool the application created (LIF-1, LIF-2).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer::postgres::connect_pool;
use relayer::{CleanupOptions, Relayer};
use relayer_test_support::{TestDb, eventually};

/// The host runs its passes on the application's pool, opens no pool of its own for them,
/// and leaves that pool open and usable after shutdown.
#[tokio::test]
async fn a_host_on_the_applications_pool_uses_it_and_leaves_it_open_lif_1() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    // The application's pool and the builder's config are told apart by application_name.
    let app_name = format!("app-{}", db.schema());
    let mut app_config = db.config();
    app_config.application_name(&app_name);
    let pool = connect_pool(app_config, 1).await.unwrap();

    let cleanup = CleanupOptions::builder().cleanup_interval(Duration::from_millis(50)).build().unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .pool(pool.clone())
        .cleanup(cleanup)
        .start()
        .await
        .unwrap();
    let leases = format!("SELECT count(*) FROM {} WHERE job = 'cleanup'", db.namespace().table("leases"));
    eventually("cleanup has passed", || async {
        client.query_one(&leases, &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    let sessions = |name: String| {
        let client = &client;
        async move {
            let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";
            client.query_one(sql, &[&name]).await.unwrap().get::<_, i64>(0)
        }
    };
    // Every connection the host used came from the lent pool of one.
    assert_eq!(sessions(db.schema().to_owned()).await, 1, "only this test's own client uses the config");
    assert_eq!(sessions(app_name.clone()).await, 1);

    host.shutdown().await;
    drop(host);
    let connection = pool.get().await.unwrap();
    let answer: i32 = connection.query_one("SELECT 7", &[]).await.unwrap().get(0);
    assert_eq!(answer, 7, "the application's pool still works after the host shut down");
    assert_eq!(sessions(app_name).await, 1);
}
