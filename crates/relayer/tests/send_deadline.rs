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
