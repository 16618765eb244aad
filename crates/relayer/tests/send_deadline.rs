//! The host refuses a dispatcher send deadline that does not fit the sweeper's lease (TRN-5).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use relayer::{DispatcherOptions, Relayer, StartError, SweeperOptions};
use relayer_test_support::TestDb;

/// TRN-5, OPT-5: options valid alone but not together — a `send_timeout` longer than half
/// the sweeper's lease — are refused at start with both fields named, and nothing starts.
#[tokio::test]
async fn a_send_timeout_that_does_not_fit_the_sweeper_lease_is_refused_at_start_trn_5() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let dispatcher =
        DispatcherOptions::builder().send_timeout(Some(Duration::from_secs(12))).build().unwrap();
    let sweeper = SweeperOptions::builder().lease_duration(Duration::from_secs(20)).build().unwrap();
    let error = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dispatcher(dispatcher)
        .sweeper(sweeper)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, StartError::Options(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "relayer setup: dispatcher.send_timeout: 12s must be at most half of sweeper.lease_duration (20s)"
    );
}

/// LDR-2 (issue 21, item 5): dead letters enabled with the default options (interval
/// 15m, lease_duration 30s) start under lease election, and the lease their first pass
/// takes lasts past the next pass (`interval + lease_duration`), so it never lapses
/// between passes; an interval of hours starts too, under the lease and under the
/// advisory lock (the default).
#[tokio::test]
async fn dead_letters_with_the_default_options_start_under_lease_election_and_their_lease_covers_the_interval_ldr_2()
 {
    use relayer::{
        DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, LeaderElection, Led,
    };
    use relayer_test_support::eventually;

    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let policies = || {
        DeadLetterPolicies::new([DeadLetterRule::queue(
            "orders",
            "orders.dead",
            DeadLetterPolicy::expire(Duration::from_secs(3_600)),
        )])
        .unwrap()
    };
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dead_letters(policies(), Led::new(DeadLetterOptions::default(), LeaderElection::Lease))
        .start()
        .await
        .unwrap();
    let leases = db.namespace().table("leases");
    let lasts = format!(
        "SELECT extract(epoch FROM expires_at - renewed_at)::float8 FROM {leases} WHERE job = 'dead_letters'"
    );
    eventually("the first dead-letter pass takes its lease", || async {
        !client.query(&lasts, &[]).await.unwrap().is_empty()
    })
    .await;
    let lasts: f64 = client.query_one(&lasts, &[]).await.unwrap().get(0);
    assert!((lasts - 930.0).abs() < 1.0, "interval 15m + lease_duration 30s, not 30s: {lasts}");
    host.shutdown().await;

    let hours = DeadLetterOptions::builder().interval(Duration::from_secs(2 * 3_600)).build().unwrap();
    for election in [LeaderElection::Lease, LeaderElection::AdvisoryLock] {
        let host = Relayer::builder(db.config(), db.namespace().clone())
            .queue_transport()
            .dead_letters(policies(), Led::new(hours.clone(), election))
            .start()
            .await
            .unwrap();
        host.shutdown().await;
    }
}
