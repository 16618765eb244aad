//! Bounds against a silent network on relayer's own connections (RES-5), against a real
//! PostgreSQL: a statement without an answer in time, and idle transactions.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::time::Duration;

use relayer_core::session::{Session, StoreSource};
use relayer_postgres::{Connector, Executor, PgSource, connect_pool};
use relayer_test_support::{TestDb, eventually, within};

/// RES-5: a statement that gets no answer within the pool's statement timeout fails (as a
/// transient error, without SQLSTATE) instead of waiting, its connection is closed and
/// discarded, and the pool lends a fresh one next.
#[tokio::test]
async fn a_statement_without_an_answer_in_time_fails_and_its_connection_is_discarded_res_5() {
    let db = TestDb::new().await;
    let connector = Connector::new(db.config()).with_statement_timeout(Duration::from_millis(300));
    let pool = connect_pool(connector, 1).await.unwrap();
    let first_pid: i32 = {
        let connection = pool.get().await.unwrap();
        assert_eq!(connection.statement_timeout(), Some(Duration::from_millis(300)));
        let pid = connection.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
        let error = within(connection.rows("SELECT pg_sleep(5)", &[])).await.unwrap_err();
        assert!(error.code().is_none(), "{error}");
        assert!(connection.is_discarded(), "a timed-out connection is never lent again");
        pid
    };
    let connection = within(pool.get()).await.unwrap();
    assert!(!connection.is_discarded());
    let pid: i32 = connection.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_ne!(pid, first_pid, "a new connection, not the timed-out one");
}

/// RES-5: a statement given up at its client-side bound is cancelled on the server too, so
/// it stops holding its backend (and locks) instead of running on behind a closed socket.
#[tokio::test]
async fn a_statement_given_up_at_its_timeout_is_cancelled_on_the_server_res_5() {
    let db = TestDb::new().await;
    let connector = Connector::new(db.config()).with_statement_timeout(Duration::from_millis(300));
    let pool = connect_pool(connector, 1).await.unwrap();
    let pid: i32 = {
        let connection = pool.get().await.unwrap();
        let pid = connection.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
        // Far longer than the test's patience: only a cancel ends it in time.
        let error = within(connection.rows("SELECT pg_sleep(600)", &[])).await.unwrap_err();
        assert!(error.code().is_none(), "{error}");
        pid
    };
    let observer = db.connect().await;
    eventually("the given-up statement no longer runs on the server", || async {
        let running: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' \
                 AND query LIKE 'SELECT pg_sleep(600)%'",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        running == 0
    })
    .await;
}

/// RES-5: a store session's transaction carries the connector's idle-transaction bound, so
/// the server ends one whose client went silent; without the setting it keeps the server's.
#[tokio::test]
async fn store_transactions_carry_the_idle_transaction_bound_res_5() {
    let db = TestDb::new().await;
    let show = "SELECT current_setting('idle_in_transaction_session_timeout')";
    let bounded = Connector::new(db.config()).with_transaction_idle_timeout(Duration::from_secs(3));
    let source = PgSource::new(connect_pool(bounded, 1).await.unwrap(), db.namespace());
    let mut session = source.open().await.unwrap();
    session.begin().await.unwrap();
    let setting: String = session.connection().query_one(show, &[]).await.unwrap().get(0);
    assert_eq!(setting, "3s");
    session.rollback().await.unwrap();

    let plain = PgSource::new(connect_pool(db.config(), 1).await.unwrap(), db.namespace());
    let mut session = plain.open().await.unwrap();
    session.begin().await.unwrap();
    let setting: String = session.connection().query_one(show, &[]).await.unwrap().get(0);
    assert_eq!(setting, "0", "the server's own setting");
    session.rollback().await.unwrap();
}

/// RES-5: while a store session's transaction lasts — a consumer's inbox transaction idles
/// for as long as its handler runs — the server probes the connection with the client's
/// keepalive and user-timeout settings, so a silent client's locks are freed within that
/// bound rather than the server's 2-hour keepalive default; after it, the session's
/// settings are the server's again (`SET LOCAL`: nothing leaks to the next borrower, nor
/// through a transaction-mode pooler to another client).
#[tokio::test]
async fn store_transactions_make_the_server_probe_a_silent_client_res_5() {
    let db = TestDb::new().await;
    let mut config = db.config();
    config
        .keepalives_idle(Duration::from_secs(7))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(4);
    config.tcp_user_timeout(Duration::from_millis(15_000));
    let source = PgSource::new(connect_pool(config, 1).await.unwrap(), db.namespace());
    let show = "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), \
                current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout')";
    let read = |row: tokio_postgres::Row| (0..4).map(|i| row.get::<_, String>(i)).collect::<Vec<_>>();
    let mut session = source.open().await.unwrap();
    let before = read(session.connection().query_one(show, &[]).await.unwrap());
    session.begin().await.unwrap();
    let during = read(session.connection().query_one(show, &[]).await.unwrap());
    assert_eq!(during, ["7", "2", "4", "15000"]);
    session.commit().await.unwrap();
    let after = read(session.connection().query_one(show, &[]).await.unwrap());
    assert_eq!(after, before, "SET LOCAL ends with the transaction");
    assert_ne!(before, during);
}
