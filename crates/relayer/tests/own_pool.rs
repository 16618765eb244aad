//! A host on a pool the application created (LIF-1, LIF-2).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer::postgres::connect_pool;
use relayer::{CleanupOptions, Relayer};
use relayer_test_support::{TestDb, Warnings, eventually};

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
    // Every connection the host used came from the lent pool of one: the host opened no
    // pool of its own, whose sessions would be named `{schema}/{pool}`.
    let own = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '/%'";
    let own_sessions: i64 = client.query_one(own, &[&db.schema()]).await.unwrap().get(0);
    assert_eq!(own_sessions, 0, "the host opened a pool of its own");
    assert_eq!(sessions(app_name.clone()).await, 1);

    host.shutdown().await;
    drop(host);
    let connection = pool.get().await.unwrap();
    let answer: i32 = connection.query_one("SELECT 7", &[]).await.unwrap().get(0);
    assert_eq!(answer, 7, "the application's pool still works after the host shut down");
    assert_eq!(sessions(app_name).await, 1);
}

/// LIF-1b with every worker that runs on the maintenance pool, and a dispatcher: the host
/// opens no maintenance pool of its own (no session is named `…/maintenance`), leads the
/// sweeper, cleanup and the dead-letter policies on the lent pool, and neither a refused
/// start nor a shutdown closes it.
#[tokio::test]
async fn a_host_on_the_applications_pool_opens_no_maintenance_pool_and_never_closes_it_lif_1() {
    use relayer::{
        DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, DispatcherOptions,
        LeaderElection, Led, Namespace, StartError, SweeperOptions,
    };

    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let app_name = format!("app-{}", db.schema());
    let mut app_config = db.config();
    app_config.application_name(&app_name);
    let pool = connect_pool(app_config, 3).await.unwrap();
    let answers = |pool: relayer::postgres::PgPool| async move {
        let connection = pool.get().await.unwrap();
        connection.query_one("SELECT 7", &[]).await.unwrap().get::<_, i32>(0)
    };

    // Refused after the lent pool was taken: the namespace has no schema.
    let unmigrated = Namespace::new(db.schema(), "unmigrated_").unwrap();
    let error =
        Relayer::builder(db.config(), unmigrated).pool(pool.clone()).cleanup(CleanupOptions::default());
    let error = error.start().await.unwrap_err();
    assert!(matches!(error, StartError::Schema(_)), "{error:?}");
    assert_eq!(answers(pool.clone()).await, 7, "a refused start leaves the pool open");

    let ms = Duration::from_millis;
    let policies = DeadLetterPolicies::new([DeadLetterRule::queue(
        "orders",
        "orders.dead",
        DeadLetterPolicy::expire(Duration::from_secs(3_600)),
    )])
    .unwrap();
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .pool(pool.clone())
        .queue_transport()
        .dispatcher(DispatcherOptions::builder().poll_interval(ms(100)).build().unwrap())
        .sweeper(SweeperOptions::builder().sweep_interval(ms(100)).build().unwrap())
        .cleanup(CleanupOptions::builder().cleanup_interval(ms(100)).build().unwrap())
        .dead_letters(
            policies,
            Led::new(DeadLetterOptions::builder().interval(ms(100)).build().unwrap(), LeaderElection::Lease),
        )
        .start()
        .await
        .unwrap();
    let leases = format!("SELECT count(*) FROM {} WHERE owner = $1", db.namespace().table("leases"));
    eventually("the sweeper, cleanup and the dead-letter policies lead on the lent pool", || async {
        client.query_one(&leases, &[&host.lease_owner()]).await.unwrap().get::<_, i64>(0) == 3
    })
    .await;
    let named = |name: String| {
        let client = &client;
        async move {
            let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";
            client.query_one(sql, &[&name]).await.unwrap().get::<_, i64>(0)
        }
    };
    assert_eq!(named(format!("{}/maintenance", db.schema())).await, 0, "the host opened a maintenance pool");
    assert!(named(format!("{}/dispatcher", db.schema())).await >= 1, "the dispatcher keeps its own pool");
    let lent_sessions = named(app_name.clone()).await;
    assert!((1..=3).contains(&lent_sessions), "{lent_sessions} sessions of the lent pool of 3");

    host.shutdown().await;
    drop(host);
    assert_eq!(answers(pool.clone()).await, 7, "the application's pool still works after the host shut down");
    assert!(named(app_name).await >= lent_sessions, "a connection of the lent pool was closed");
}

/// LIF-2: the maintenance work holds at most one connection of a lent pool per led worker
/// plus one for the bookkeeping. A lent pool smaller than that is warned about once, at
/// start; one that large plus what the application holds runs every led worker while the
/// application keeps a connection of its own, without a warning.
#[tokio::test]
async fn a_lent_pool_too_small_for_the_led_workers_is_warned_about_lif_2() {
    use relayer::SweeperOptions;

    let warnings = Warnings::default();
    let _capture = warnings.capture();
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let ms = Duration::from_millis;
    let start = |pool: relayer::postgres::PgPool| {
        Relayer::builder(db.config(), db.namespace().clone())
            .pool(pool)
            .queue_transport()
            .sweeper(SweeperOptions::builder().sweep_interval(ms(50)).build().unwrap())
            .cleanup(CleanupOptions::builder().cleanup_interval(ms(50)).build().unwrap())
            .start()
    };

    // Sweeper and cleanup lead: 2 + 1 for the bookkeeping = 3.
    let host = start(connect_pool(db.config(), 2).await.unwrap()).await.unwrap();
    host.shutdown().await;
    let text = warnings.text();
    assert_eq!(text.matches("the lent pool is smaller").count(), 1, "{text}");
    assert!(text.contains("max_size=2") && text.contains("needed=3"), "{text}");

    let warned = warnings.text().len();
    let pool = connect_pool(db.config(), 4).await.unwrap();
    let held = pool.get().await.unwrap();
    let host = start(pool.clone()).await.unwrap();
    let leases = format!("SELECT count(*) FROM {} WHERE owner = $1", db.namespace().table("leases"));
    eventually("the sweeper and cleanup lead on the lent pool", || async {
        client.query_one(&leases, &[&host.lease_owner()]).await.unwrap().get::<_, i64>(0) == 2
    })
    .await;
    let answer: i32 = held.query_one("SELECT 7", &[]).await.unwrap().get(0);
    assert_eq!(answer, 7, "the application's own connection works meanwhile");
    host.shutdown().await;
    let text = warnings.text();
    assert_eq!(&text[warned..], "", "a sufficient lent pool was warned about");
}

/// DRV-1b: a lent pool whose statement mode contradicts the builder's `statement_mode`
/// (which the host's own pools follow) is refused, naming the setting and both modes.
#[tokio::test]
async fn a_lent_pool_in_another_statement_mode_than_the_builders_is_refused_drv_1b() {
    use relayer::StartError;
    use relayer::postgres::{StatementMode, connect_pool_with};

    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    for (lent, builder, expected) in [
        (StatementMode::Unnamed, StatementMode::Prepared, "is Prepared (the default), but the lent pool's"),
        (StatementMode::Prepared, StatementMode::Unnamed, "is Unnamed, but the lent pool's"),
    ] {
        let pool = connect_pool_with(db.config(), 2, lent).await.unwrap();
        let error = Relayer::builder(db.config(), db.namespace().clone())
            .pool(pool)
            .statement_mode(builder)
            .cleanup(CleanupOptions::default())
            .start()
            .await
            .unwrap_err();
        assert!(matches!(error, StartError::Setting { setting: "statement_mode", .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.starts_with("relayer setup: statement_mode: ") && text.contains(expected), "{text}");
    }
    for mode in [StatementMode::Prepared, StatementMode::Unnamed] {
        let pool = connect_pool_with(db.config(), 2, mode).await.unwrap();
        let host = Relayer::builder(db.config(), db.namespace().clone())
            .pool(pool)
            .statement_mode(mode)
            .cleanup(CleanupOptions::default())
            .start()
            .await
            .unwrap();
        host.shutdown().await;
    }
}
