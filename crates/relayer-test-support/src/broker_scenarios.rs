//! The scenarios every broker transport's tests run the same way, whatever the broker:
//! the broker goes away and comes back (DSP-6, TRN-2), and the broker takes the connection
//! but never answers (TRN-5). Each test file keeps what is its broker's own — the fixture,
//! the transport, reading what the broker received — and passes the scenario a dispatcher
//! pass and a [`TcpProxy`] between the transport and the broker.

use std::cell::Cell;
use std::num::NonZeroU32;
use std::time::Duration;

use relayer_core::{
    DispatcherOptions, DispatcherOptionsBuilder, Envelope, Headers, MessageId, Namespace, Timestamp,
};
use tokio_postgres::Client;

use crate::proxy::TcpProxy;
use crate::wait::eventually;

/// One dispatcher pass, as the scenarios read its report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Rows claimed.
    pub claimed: u64,
    /// Rows the transport accepted.
    pub sent: u64,
    /// Rows whose send failed.
    pub failed: u64,
}

/// A test's outbox table, read the way the scenarios check it.
#[derive(Debug)]
pub struct Outbox<'a> {
    client: &'a Client,
    table: String,
}

impl<'a> Outbox<'a> {
    /// The outbox of `namespace`, read through `client`.
    pub fn new(client: &'a Client, namespace: &Namespace) -> Self {
        Outbox { client, table: namespace.table("outbox") }
    }

    /// Rows not delivered yet.
    pub async fn pending(&self) -> i64 {
        self.count("").await
    }

    /// Rows a pass may claim now (not held back by a retry delay or a tripped breaker).
    pub async fn due(&self) -> i64 {
        self.count("WHERE visible_at <= now()").await
    }

    async fn count(&self, filter: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {} {filter}", self.table);
        self.client.query_one(&sql, &[]).await.expect("count the outbox rows").get(0)
    }

    /// Each row's `attempts` and `last_error` (empty when none).
    pub async fn attempts(&self) -> Vec<(i32, String)> {
        let sql = format!("SELECT attempts, coalesce(last_error, '') FROM {} ORDER BY seq", self.table);
        let rows = self.client.query(&sql, &[]).await.expect("read the outbox rows");
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    }
}

/// Retries come at once, so a scenario waits on the breaker and the broker, not on backoff.
pub fn quick_retries() -> DispatcherOptionsBuilder {
    DispatcherOptions::builder().retry_base(Duration::from_millis(10)).retry_max(Duration::from_millis(10))
}

/// An envelope as a transport receives it, with body `[n]` and a fresh id.
pub fn envelope(n: u8) -> Envelope {
    Envelope {
        id: MessageId::new(),
        body: vec![n],
        headers: Headers::new(),
        created_at: Timestamp::from_micros(0),
        trace_context: None,
        lane: None,
        attempts: 0,
    }
}

/// The dispatcher options [`outage`] expects: quick retries, a breaker that trips after two
/// failed sends and stays tripped for 3 s.
pub fn outage_options() -> DispatcherOptions {
    quick_retries()
        .breaker_threshold(NonZeroU32::new(2).expect("2 is not zero"))
        .breaker_cool_down(Duration::from_secs(3))
        .build()
        .expect("valid outage options")
}

/// DSP-6, TRN-2: while the broker is unreachable (`proxy` cut: connections closed, new ones
/// refused, as in a restart) the `rows` pending rows stay, each send fails transiently,
/// and the destination's breaker trips ([`outage_options`]); once `proxy` is restored the
/// same transport — no process restart — delivers every row. `pass` runs one dispatcher
/// pass. What the broker received is the caller's to check afterwards.
pub async fn outage(outbox: &Outbox<'_>, proxy: &TcpProxy, rows: i64, pass: impl AsyncFn() -> Pass) {
    outage_between(outbox, rows, async || proxy.cut(), async || proxy.restore(), pass).await;
}

/// [`outage`] with any way to take the broker away and bring it back: `down` runs once
/// the rows are written (a proxy cut, a real broker stop), `up` once the breaker tripped.
pub async fn outage_between(
    outbox: &Outbox<'_>,
    rows: i64,
    down: impl AsyncFnOnce(),
    up: impl AsyncFnOnce(),
    pass: impl AsyncFn() -> Pass,
) {
    assert_eq!(outbox.pending().await, rows, "the rows are written before the outage");
    down().await;
    let failed = Cell::new(0);
    eventually("two failed sends trip the breaker", || async {
        // Once the breaker trips, the destination's rows are held back for its cool-down
        // (DSP-6): none is due, none is claimed, every one is kept.
        let held_back = outbox.pending().await - outbox.due().await;
        let report = pass().await;
        assert_eq!(report.sent, 0, "nothing is delivered during the outage");
        failed.set(failed.get() + report.failed);
        failed.get() >= 2 * rows.unsigned_abs() && held_back == rows && report.claimed == 0
    })
    .await;
    assert_eq!(outbox.pending().await, rows, "every row is kept");
    let fewest = outbox.attempts().await.iter().map(|(attempts, _)| *attempts).min();
    assert!(fewest >= Some(2), "each row failed twice before the trip, got {fewest:?}");

    up().await;
    eventually("every row is delivered after the broker is back", || async {
        pass().await;
        outbox.pending().await == 0
    })
    .await;
}

/// The dispatcher options [`stall`] expects: quick retries, a breaker that never trips, and
/// `send_timeout` when given (the dispatcher's own send deadline, TRN-5).
pub fn stall_options(send_timeout: Option<Duration>) -> DispatcherOptions {
    quick_retries()
        .breaker_threshold(NonZeroU32::new(1000).expect("1000 is not zero"))
        .send_timeout(send_timeout)
        .build()
        .expect("valid stall options")
}

/// TRN-5: a broker that took the connection and never answers (`proxy` stalled). One pass
/// claims the `rows` pending rows and fails every one transiently at a deadline — the
/// transport's own, or the dispatcher's `send_timeout` ([`stall_options`]) — with
/// `expected_error` in each row's `last_error`; the rows are kept with one attempt. Once
/// `proxy` is restored, passes deliver every row. `pass` runs one dispatcher pass.
pub async fn stall(
    outbox: &Outbox<'_>,
    proxy: &TcpProxy,
    rows: i64,
    expected_error: &str,
    pass: impl AsyncFn() -> Pass,
) {
    let count = rows.unsigned_abs();
    proxy.stall();
    let report = pass().await;
    assert_eq!(report, Pass { claimed: count, sent: 0, failed: count }, "the deadline failed the batch");
    let kept = outbox.attempts().await;
    assert_eq!(kept.len(), usize::try_from(count).expect("a small count"), "the rows are kept for a retry");
    for (attempts, last_error) in kept {
        assert_eq!(attempts, 1);
        assert!(last_error.contains(expected_error), "{last_error}");
    }

    proxy.restore();
    eventually("the retried rows are delivered", || async {
        pass().await;
        outbox.pending().await == 0
    })
    .await;
}
