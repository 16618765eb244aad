//! The send path on its own: deadlines (TRN-5), circuit breakers (DSP-6) and the retry
//! decision (DSP-3, DSP-5), with in-process transports. Time is tokio's paused clock, so
//! a transport that never answers costs no wall time and nothing is timed.
#![allow(clippy::unwrap_used)]

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use relayer_core::breaker::DEFAULT_TRACKED_DESTINATIONS;
use relayer_core::{
    Capabilities, ClaimedMessage, DispatcherOptions, Envelope, MessageId, SendOutcome, Timestamp, Transport,
    TransportError, TransportRegistry, async_trait,
};
use relayer_delivery::{HeadOutcome, SendPath};
use relayer_test_support::Warnings;
use tokio::time::Instant;

/// Answers never (`hang`), or fails every send, or accepts every send.
struct Scripted {
    name: &'static str,
    hang: bool,
    fail: bool,
    limit: usize,
}

/// A [`Scripted`] transport declaring broker-side deduplication by message id.
struct Deduplicating(Scripted);

#[async_trait]
impl Transport for Deduplicating {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.0.batch_limit()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE.with_deduplication()
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        self.0.send(destination, batch).await
    }
}

#[async_trait]
impl Transport for Scripted {
    fn name(&self) -> &str {
        self.name
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.limit).unwrap()
    }

    async fn send(&self, _destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        if self.fail {
            return Err(TransportError::transient("broker down"));
        }
        Ok(vec![SendOutcome::Accepted; batch.len()])
    }
}

fn path(transport: impl Transport + 'static, options: DispatcherOptions) -> SendPath {
    let registry = TransportRegistry::new().with(Arc::new(transport)).unwrap();
    SendPath::new(Arc::new(registry), options)
}

fn claimed(seq: i64, transport: &str, destination: &str) -> ClaimedMessage {
    ClaimedMessage {
        seq,
        transport: transport.to_owned(),
        destination: destination.to_owned(),
        envelope: Envelope {
            id: MessageId::default(),
            body: b"{}".to_vec(),
            headers: Default::default(),
            created_at: Timestamp::EPOCH,
            trace_context: None,
            lane: None,
            attempts: 0,
        },
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3_600)
}

#[tokio::test(start_paused = true)]
async fn a_send_that_never_answers_fails_each_message_of_its_batch_at_the_send_timeout_trn_5() {
    let options = DispatcherOptions::builder().send_timeout(Some(Duration::from_secs(5))).build().unwrap();
    let send = path(Scripted { name: "hung", hang: true, fail: false, limit: 10 }, options);
    let rows = (1..=3).map(|seq| claimed(seq, "hung", "orders")).collect();
    let tally = send.send(rows, far()).await;
    assert_eq!((tally.accepted, tally.failed, tally.timed_out), (0, 3, 1));
    let columns = tally.completion.columns();
    assert_eq!(columns.failed_seq, &[1, 2, 3]);
    assert!(columns.failed_error.iter().all(|e| e.contains("did not answer within the send timeout")));
    assert!(columns.failed_dead.iter().all(|dead| !dead), "a timeout is transient: retried");
}

/// DSP-7, TRN-1: a timed-out batch is retried, and the broker may still accept the first
/// send; the warning says whether consumers then see it twice, as the transport declares.
#[tokio::test(start_paused = true)]
async fn a_send_timeout_warning_says_whether_a_late_acceptance_reaches_consumers_twice_dsp_7() {
    let options = DispatcherOptions::builder().send_timeout(Some(Duration::from_secs(5))).build().unwrap();
    let hung = || Scripted { name: "hung", hang: true, fail: false, limit: 10 };
    let cases = [
        (path(hung(), options.clone()), "deduplicates_by_id=false", "reaches consumers twice"),
        (path(Deduplicating(hung()), options), "deduplicates_by_id=true", "the broker drops the repeat"),
    ];
    for (send, declared, repeat) in cases {
        let warnings = Warnings::default();
        let _capture = warnings.capture();
        let tally = send.send(vec![claimed(1, "hung", "orders")], far()).await;
        assert_eq!(tally.timed_out, 1);
        let text = warnings.text();
        assert_eq!(text.matches("send timed out").count(), 1, "{text}");
        assert!(text.contains(declared) && text.contains(repeat), "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn no_batch_outlives_the_step_deadline_and_unstarted_batches_are_released_unsent_trn_5() {
    // Batches of one, each hanging: the first is cut at the step deadline (sooner than its
    // send_timeout), the other two never start and are released without an attempt.
    let options = DispatcherOptions::builder().send_timeout(Some(Duration::from_secs(10))).build().unwrap();
    let send = path(Scripted { name: "hung", hang: true, fail: false, limit: 1 }, options);
    let rows = (1..=3).map(|seq| claimed(seq, "hung", "orders")).collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(4);
    let tally = send.send(rows, deadline).await;
    assert!(Instant::now() <= deadline + Duration::from_millis(1), "the step ended by its deadline");
    assert_eq!((tally.failed, tally.timed_out, tally.unsent), (1, 1, 2));
    let columns = tally.completion.columns();
    assert_eq!(columns.failed_seq, &[1]);
    assert_eq!(columns.deferred_seq, &[2, 3]);
    assert_eq!(columns.deferred_delay_us, &[0, 0], "released at once, no attempt counted");
}

#[tokio::test]
async fn a_tripped_destination_is_reported_once_and_its_later_rows_are_held_back_dsp_6() {
    let options = DispatcherOptions::builder()
        .breaker_threshold(NonZeroU32::new(1).unwrap())
        .max_attempts(NonZeroU32::new(1))
        .build()
        .unwrap();
    let send = path(Scripted { name: "down", hang: false, fail: true, limit: 1 }, options);
    let rows = (1..=3).map(|seq| claimed(seq, "down", "orders")).collect();
    let tally = send.send(rows, far()).await;
    assert_eq!(tally.tripped, vec![("down".to_owned(), "orders".to_owned())]);
    assert_eq!(tally.failed, 1, "one failure trips it; the rest are not sent");
    let columns = tally.completion.columns();
    assert_eq!(columns.failed_dead, &[true], "max_attempts 1: the failed row is buried");
    assert_eq!(columns.deferred_seq, &[2, 3]);
    assert!(send.breakers().is_tripped(&("down".to_owned(), "orders".to_owned())));
    let again = send.send(vec![claimed(4, "down", "orders")], far()).await;
    assert!(again.tripped.is_empty(), "already open: not reported again");
    assert_eq!(again.completion.columns().deferred_seq, &[4]);
}

#[tokio::test]
async fn a_hundred_thousand_distinct_failing_destinations_keep_the_breakers_bounded_dsp_6() {
    let options =
        DispatcherOptions::builder().breaker_threshold(NonZeroU32::new(1).unwrap()).build().unwrap();
    let send = path(Scripted { name: "down", hang: false, fail: true, limit: 100 }, options);
    for start in (0..100_000).step_by(1_000) {
        let rows = (start..start + 1_000).map(|n| claimed(n, "down", &format!("d-{n}"))).collect();
        let tally = send.send(rows, far()).await;
        assert_eq!(tally.failed, 1_000);
        assert!(send.breakers().len() <= DEFAULT_TRACKED_DESTINATIONS.get());
    }
    assert!(send.breakers().is_tripped(&("down".to_owned(), "d-99999".to_owned())), "recent ones are kept");
    assert!(send.breakers().tripped().len() <= DEFAULT_TRACKED_DESTINATIONS.get());
}

/// TRN-6: a row naming a transport this process lacks is released unsent — no attempt, no
/// error, not buried — out of claims for a cool-down, for an instance that has it; the
/// row beside it is sent.
#[tokio::test]
async fn a_missing_transport_releases_its_rows_without_an_attempt_trn_6() {
    let send =
        path(Scripted { name: "ok", hang: false, fail: false, limit: 10 }, DispatcherOptions::default());
    let tally = send.send(vec![claimed(1, "ok", "a"), claimed(2, "gone", "a")], far()).await;
    assert_eq!((tally.accepted, tally.failed, tally.unregistered), (1, 0, 1));
    let columns = tally.completion.columns();
    assert_eq!(columns.accepted, &[1]);
    assert!(columns.failed_seq.is_empty(), "no attempt is counted");
    assert_eq!(columns.deferred_seq, &[2]);
    let cool_down = i64::try_from(send.breakers().cool_down().as_micros()).unwrap();
    assert_eq!(columns.deferred_delay_us, &[cool_down]);
    let head = send.send_head("gone", "a", &claimed(3, "gone", "a").envelope).await;
    assert!(matches!(head, HeadOutcome::Unregistered), "{head:?}");
}
