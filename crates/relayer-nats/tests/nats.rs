//! The NATS JetStream transport against a real nats-server (TRN-1, TRN-2, TRN-3, TRN-5,
//! DSP-6). Messages enter through relayer's writer and leave through a dispatcher; a
//! JetStream consumer reads what the stream stored. Without a reachable server each test
//! reports itself as skipped by name (see `relayer_test_support::broker_or_skip`).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt;
use relayer::dispatcher::Dispatcher;
use relayer::{
    DispatcherOptions, Envelope, NewMessage, Relayer, SendOutcome, Transport, TransportError,
    TransportRegistry, async_trait,
};
use relayer_nats::{NatsOptions, NatsTransport};
use relayer_test_support::{Broker, TcpProxy, TestDb, broker_or_skip, eventually};
use tokio_postgres::Client;

/// A test's own database schema and JetStream stream (named after the schema), capturing
/// `<stream>.>`.
struct Fixture {
    db: TestDb,
    client: Client,
    nats: SocketAddr,
    jetstream: jetstream::Context,
    stream: String,
}

impl Fixture {
    async fn new(test: &str) -> Option<Fixture> {
        let nats = broker_or_skip(Broker::Nats, test).await?;
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
        let jetstream = jetstream::new(async_nats::connect(nats.to_string()).await.unwrap());
        let stream = db.schema().to_owned();
        jetstream
            .create_stream(stream::Config {
                name: stream.clone(),
                subjects: vec![format!("{stream}.>")],
                duplicate_window: Duration::from_secs(120),
                max_age: Duration::from_secs(3600),
                ..Default::default()
            })
            .await
            .unwrap();
        Some(Fixture { db, client, nats, jetstream, stream })
    }

    fn subject(&self, name: &str) -> String {
        format!("{}.{name}", self.stream)
    }

    /// Every message the stream stored, read by a fresh JetStream consumer from the start.
    async fn received(&self) -> Vec<jetstream::Message> {
        let stream = self.jetstream.get_stream(&self.stream).await.unwrap();
        let consumer = stream.create_consumer(pull::Config::default()).await.unwrap();
        let stored = self.stored().await;
        let mut received = Vec::new();
        while received.len() < stored {
            let mut batch = consumer
                .fetch()
                .max_messages(stored - received.len())
                .expires(Duration::from_secs(1))
                .messages()
                .await
                .unwrap();
            while let Some(message) = batch.next().await {
                received.push(message.unwrap());
            }
        }
        received
    }

    /// How many messages the stream holds.
    async fn stored(&self) -> usize {
        let mut stream = self.jetstream.get_stream(&self.stream).await.unwrap();
        usize::try_from(stream.info().await.unwrap().state.messages).unwrap()
    }

    async fn pending(&self) -> i64 {
        let sql = format!("SELECT count(*) FROM {}", self.db.namespace().table("outbox"));
        self.client.query_one(&sql, &[]).await.unwrap().get(0)
    }

    async fn due(&self) -> i64 {
        let sql =
            format!("SELECT count(*) FROM {} WHERE visible_at <= now()", self.db.namespace().table("outbox"));
        self.client.query_one(&sql, &[]).await.unwrap().get(0)
    }

    async fn dispatcher(&self, transport: Arc<dyn Transport>, options: DispatcherOptions) -> Dispatcher {
        let registry = Arc::new(TransportRegistry::new().with(transport).unwrap());
        let pool =
            relayer::postgres::connect_pool(relayer::dispatcher::asynchronous_commit(self.db.config()), 1)
                .await
                .unwrap();
        Dispatcher::new(pool, self.db.namespace().clone(), options, registry)
            .unwrap()
            .listening(self.db.config())
    }

    async fn finish(self) {
        self.jetstream.delete_stream(&self.stream).await.unwrap();
    }
}

fn options(ack_timeout: Duration) -> NatsOptions {
    NatsOptions::default().with_ack_timeout(ack_timeout)
}

/// Retries come at once, so a test waits on the breaker and the broker, not on backoff.
fn quick_retries() -> relayer::core::DispatcherOptionsBuilder {
    DispatcherOptions::builder().retry_base(Duration::from_millis(10)).retry_max(Duration::from_millis(10))
}

fn header<'a>(message: &'a jetstream::Message, name: &str) -> Option<&'a str> {
    message.headers.as_ref()?.get(name).map(|value| value.as_str())
}

fn ids(messages: &[jetstream::Message]) -> BTreeSet<String> {
    messages.iter().map(|m| header(m, "Nats-Msg-Id").unwrap().to_owned()).collect()
}

#[tokio::test]
async fn an_enqueued_message_reaches_a_stream_subscriber_with_its_id_body_and_headers_trn_3() {
    let Some(fixture) =
        Fixture::new("an_enqueued_message_reaches_a_stream_subscriber_with_its_id_body_and_headers_trn_3")
            .await
    else {
        return;
    };
    let nats = NatsTransport::connect(&fixture.nats.to_string(), NatsOptions::default()).await.unwrap();
    assert!(nats.capabilities().deduplicates_by_id, "TRN-1: broker-side deduplication is declared");
    let host = Relayer::builder(fixture.db.config(), fixture.db.namespace().clone())
        .transport(Arc::new(nats))
        .dispatcher(DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap())
        .start()
        .await
        .unwrap();

    let mut client = fixture.db.connect().await;
    let message = NewMessage::new("nats", fixture.subject("orders.created"), br#"{"order":7}"#.to_vec())
        .header("content-type", "application/json")
        .trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let id = message.message_id();
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[message]).await.unwrap();
    tx.commit().await.unwrap();

    eventually("the outbox row is deleted", || async { fixture.pending().await == 0 }).await;
    host.shutdown().await;
    let received = fixture.received().await;
    assert_eq!(received.len(), 1);
    let message = &received[0];
    assert_eq!(message.subject.as_str(), fixture.subject("orders.created"));
    assert_eq!(message.payload.as_ref(), br#"{"order":7}"#);
    assert_eq!(header(message, "Nats-Msg-Id"), Some(id.to_string().as_str()));
    assert_eq!(header(message, "content-type"), Some("application/json"));
    assert_eq!(
        header(message, "relayer-trace-context"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    let created_at = header(message, "relayer-created-at").unwrap();
    assert!(created_at.ends_with('Z') && created_at.len() == 27, "{created_at}");
    fixture.finish().await;
}

#[tokio::test]
async fn a_batch_is_accepted_per_message_and_a_subject_without_a_stream_is_permanent_trn_2() {
    let Some(fixture) =
        Fixture::new("a_batch_is_accepted_per_message_and_a_subject_without_a_stream_is_permanent_trn_2")
            .await
    else {
        return;
    };
    let nats = NatsTransport::connect(&fixture.nats.to_string(), NatsOptions::default()).await.unwrap();
    let envelopes: Vec<Envelope> = (0..20u8).map(envelope).collect();
    let outcomes = nats.send(&fixture.subject("batch"), &envelopes).await.unwrap();
    assert_eq!(outcomes, vec![SendOutcome::Accepted; 20]);
    assert_eq!(ids(&fixture.received().await), envelopes.iter().map(|e| e.id.to_string()).collect());

    let nowhere = format!("{}_nowhere.orders", fixture.stream);
    let outcomes = nats.send(&nowhere, &envelopes[..2]).await.unwrap();
    for outcome in outcomes {
        let SendOutcome::Failed(error) = outcome else {
            panic!("a subject without a stream accepted a message")
        };
        assert!(!error.is_transient(), "{error}");
        assert!(error.chain().contains("no JetStream stream captures subject"), "{}", error.chain());
    }
    let refused = nats.send("orders created", &envelopes[..1]).await.unwrap_err();
    assert!(!refused.is_transient() && refused.to_string().contains("white space"), "{refused}");
    fixture.finish().await;
}

fn envelope(n: u8) -> Envelope {
    Envelope {
        id: relayer::MessageId::new(),
        body: vec![n],
        headers: relayer::Headers::new(),
        created_at: relayer::Timestamp::from_micros(0),
        trace_context: None,
        lane: None,
        attempts: 0,
    }
}

/// DSP-6, TRN-2: while the server is unreachable the rows stay, failures are transient,
/// the destination's breaker trips; once the server is back the same transport (it
/// reconnects by itself) delivers every row, each once.
#[tokio::test]
async fn an_unreachable_server_keeps_the_rows_trips_the_breaker_and_delivers_once_back_dsp_6() {
    let Some(fixture) =
        Fixture::new("an_unreachable_server_keeps_the_rows_trips_the_breaker_and_delivers_once_back_dsp_6")
            .await
    else {
        return;
    };
    let proxy = TcpProxy::start(fixture.nats).await;
    let nats = NatsTransport::connect(&proxy.address().to_string(), options(Duration::from_millis(500)))
        .await
        .unwrap();
    let options = quick_retries()
        .breaker_threshold(NonZeroU32::new(2).unwrap())
        .breaker_cool_down(Duration::from_secs(3))
        .build()
        .unwrap();
    let dispatcher = fixture.dispatcher(Arc::new(nats), options).await;
    let messages: Vec<_> =
        (0..5u8).map(|n| NewMessage::new("nats", fixture.subject("outage"), vec![n])).collect();
    let written = dispatcher.writer().enqueue(&fixture.client, &messages).await.unwrap();

    proxy.cut();
    let failed = AtomicU64::new(0);
    eventually("two failed sends trip the breaker", || async {
        // Once the breaker trips, the destination's rows are held back for its cool-down
        // (DSP-6): none is due, none is claimed, every one is kept.
        let held_back = fixture.pending().await - fixture.due().await;
        let report = dispatcher.run_once(&fixture.client).await.unwrap();
        failed.fetch_add(report.failed, Ordering::SeqCst);
        assert_eq!(report.sent, 0);
        failed.load(Ordering::SeqCst) >= 10 && held_back == 5 && report.claimed == 0
    })
    .await;
    assert_eq!(fixture.pending().await, 5, "every row is kept");
    let attempts = format!("SELECT min(attempts) FROM {}", fixture.db.namespace().table("outbox"));
    let fewest: i32 = fixture.client.query_one(&attempts, &[]).await.unwrap().get(0);
    assert!(fewest >= 2, "each row failed twice before the trip, got {fewest}");

    proxy.restore();
    eventually("every row is delivered after the server is back", || async {
        dispatcher.run_once(&fixture.client).await.unwrap();
        fixture.pending().await == 0
    })
    .await;
    let received = fixture.received().await;
    assert_eq!(received.len(), 5, "publishes buffered during the outage were deduplicated");
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    fixture.finish().await;
}

/// A transport that publishes through NATS and then loses the outcome, like a process
/// killed after the stream stored its messages but before their rows were deleted.
struct CrashAfterPublish {
    nats: NatsTransport,
    crashes: AtomicU32,
}

#[async_trait]
impl Transport for CrashAfterPublish {
    fn name(&self) -> &str {
        self.nats.name()
    }
    fn batch_limit(&self) -> NonZeroUsize {
        self.nats.batch_limit()
    }
    async fn send(&self, subject: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let outcomes = self.nats.send(subject, batch).await?;
        if self.crashes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            assert_eq!(outcomes, vec![SendOutcome::Accepted; batch.len()]);
            return Err(TransportError::transient("the process died before completing the rows"));
        }
        Ok(outcomes)
    }
}

/// TRN-3: the replay of a send whose outcome was lost carries the same `Nats-Msg-Id`, so
/// the stream drops it inside its duplicate window and a subscriber sees each message once.
#[tokio::test]
async fn a_send_replayed_after_a_crash_is_dropped_by_jetstream_deduplication_trn_3() {
    let Some(fixture) =
        Fixture::new("a_send_replayed_after_a_crash_is_dropped_by_jetstream_deduplication_trn_3").await
    else {
        return;
    };
    let nats = NatsTransport::connect(&fixture.nats.to_string(), NatsOptions::default()).await.unwrap();
    let transport = Arc::new(CrashAfterPublish { nats, crashes: AtomicU32::new(1) });
    let dispatcher = fixture.dispatcher(transport.clone(), quick_retries().build().unwrap()).await;
    let messages: Vec<_> =
        (0..3u8).map(|n| NewMessage::new("nats", fixture.subject("replay"), vec![n])).collect();
    let written = dispatcher.writer().enqueue(&fixture.client, &messages).await.unwrap();

    let first = dispatcher.run_once(&fixture.client).await.unwrap();
    assert_eq!((first.claimed, first.failed), (3, 3), "the outcome was lost: the rows stay");
    assert_eq!(fixture.stored().await, 3, "yet the stream stored them");
    eventually("the replay completes the rows", || async {
        dispatcher.run_once(&fixture.client).await.unwrap();
        fixture.pending().await == 0
    })
    .await;
    assert_eq!(transport.crashes.load(Ordering::SeqCst), 0);
    let received = fixture.received().await;
    assert_eq!(received.len(), 3, "the replayed publishes were dropped as duplicates");
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    fixture.finish().await;
}

/// TRN-5: a server that took the connection and never answers fails the send transiently
/// once the ack timeout passes; the rows are kept and retried, and delivered once it answers.
#[tokio::test]
async fn a_server_that_never_acknowledges_fails_the_send_at_the_ack_timeout_trn_5() {
    let Some(fixture) =
        Fixture::new("a_server_that_never_acknowledges_fails_the_send_at_the_ack_timeout_trn_5").await
    else {
        return;
    };
    let proxy = TcpProxy::start(fixture.nats).await;
    let nats = NatsTransport::connect(&proxy.address().to_string(), options(Duration::from_millis(300)))
        .await
        .unwrap();
    let options = quick_retries().breaker_threshold(NonZeroU32::new(1000).unwrap()).build().unwrap();
    let dispatcher = fixture.dispatcher(Arc::new(nats), options).await;
    let messages: Vec<_> =
        (0..4u8).map(|n| NewMessage::new("nats", fixture.subject("silent"), vec![n])).collect();
    let written = dispatcher.writer().enqueue(&fixture.client, &messages).await.unwrap();

    proxy.stall();
    let report = dispatcher.run_once(&fixture.client).await.unwrap();
    assert_eq!((report.claimed, report.sent, report.failed), (4, 0, 4), "the ack deadline failed the batch");
    let sql = format!("SELECT attempts, last_error FROM {}", fixture.db.namespace().table("outbox"));
    let rows = fixture.client.query(&sql, &[]).await.unwrap();
    assert_eq!(rows.len(), 4, "the rows are kept for a retry");
    for row in rows {
        let (attempts, last_error): (i32, String) = (row.get(0), row.get(1));
        assert_eq!(attempts, 1);
        assert!(last_error.contains("no acknowledgement in time"), "{last_error}");
    }

    proxy.restore();
    eventually("the retried rows are delivered", || async {
        dispatcher.run_once(&fixture.client).await.unwrap();
        fixture.pending().await == 0
    })
    .await;
    let received = fixture.received().await;
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    assert_eq!(received.len(), 4);
    fixture.finish().await;
}
