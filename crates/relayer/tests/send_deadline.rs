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

/// LDR-2, OPT-5: a dead-letter pass led by a lease that does not outlive its interval is
/// refused at start, naming both options; the same options under the advisory lock (the
/// default, no lease) are valid, an interval of hours included.
#[tokio::test]
async fn a_dead_letter_lease_not_longer_than_its_interval_is_refused_at_start_under_a_lease_ldr_2() {
    use relayer::{
        DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, LeaderElection, Led,
    };

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
    let hours = DeadLetterOptions::builder().interval(Duration::from_secs(2 * 3_600)).build().unwrap();
    let error = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dead_letters(policies(), Led::new(hours.clone(), LeaderElection::Lease))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, StartError::Options(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "relayer setup: dead_letter.lease_duration: 30s must be greater than dead_letter.interval (2h) when the \
         dead-letter pass is led by a lease (it would lapse between passes); raise lease_duration, lower \
         interval, or lead it by the advisory lock (the default)"
    );
    let host = Relayer::builder(db.config(), db.namespace().clone())
        .queue_transport()
        .dead_letters(policies(), hours)
        .start()
        .await
        .unwrap();
    host.shutdown().await;
}
