//! The RabbitMQ transport against a real broker (TRN-1, TRN-2, TRN-3, TRN-5, DSP-6).
//! Messages enter through relayer's writer and leave through a dispatcher; the test reads
//! its own queue with `basic.get`. Without a reachable broker each test reports itself as
//! skipped by name (see `relayer_test_support::broker_or_skip`).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use relayer::dispatcher::Dispatcher;
use relayer::postgres::{OutboxWriter, PgNotifications, PgSource, asynchronous_commit};
use relayer::{DispatcherOptions, Envelope, NewMessage, Relayer, SendOutcome, Transport, TransportRegistry};
use relayer_rabbitmq::{RabbitMqOptions, RabbitMqTransport};
use relayer_test_support::broker_scenarios::{self, Outbox, Pass, envelope, outage_options, stall_options};
use relayer_test_support::{
    Broker, TcpProxy, TestCertificates, TestDb, TlsStart, TlsTerminator, broker_or_skip, eventually,
    stop_rabbitmq_or_skip,
};
use tokio_postgres::Client;

/// What a test holds of the broker: shared with the binary's other tests, or the broker to
/// itself (a test that restarts it). Under `cargo test` the tests of this binary are
/// threads of one process, kept apart by this lock; under nextest, processes, kept apart by
/// the workspace's `.config/nextest.toml` (one test of this binary at a time).
static BROKER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A test's own database schema and RabbitMQ queue (named after the schema).
struct Fixture {
    db: TestDb,
    client: Client,
    broker: SocketAddr,
    _connection: Connection,
    channel: Channel,
    queue: String,
    _broker_use: BrokerUse,
}

enum BrokerUse {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'static, ()>),
}

/// A message as the test's queue holds it.
struct Received {
    properties: BasicProperties,
    body: Vec<u8>,
}

impl Fixture {
    async fn new(test: &str) -> Option<Fixture> {
        Fixture::holding(test, BrokerUse::Shared(BROKER.read().await)).await
    }

    /// A fixture for a test that stops and starts the broker: no other test of this binary
    /// runs meanwhile.
    async fn exclusive(test: &str) -> Option<Fixture> {
        Fixture::holding(test, BrokerUse::Exclusive(BROKER.write().await)).await
    }

    async fn holding(test: &str, broker_use: BrokerUse) -> Option<Fixture> {
        let broker = broker_or_skip(Broker::RabbitMq, test).await?;
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
        let (connection, channel) = open_channel(broker).await;
        let queue = db.schema().to_owned();
        let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(&queue, durable, FieldTable::default()).await.unwrap();
        Some(Fixture { db, client, broker, _connection: connection, channel, queue, _broker_use: broker_use })
    }

    /// A new connection and channel for reading the queue, after a broker restart closed
    /// the first ones.
    async fn reconnect(&mut self) {
        let (connection, channel) = open_channel(self.broker).await;
        self._connection = connection;
        self.channel = channel;
    }

    /// Everything in the queue, taken off it.
    async fn received(&self) -> Vec<Received> {
        let mut received = Vec::new();
        let take = BasicGetOptions { no_ack: true };
        while let Some(message) = self.channel.basic_get(&self.queue, take).await.unwrap() {
            received.push(Received { properties: message.delivery.properties, body: message.delivery.data });
        }
        received
    }

    fn outbox(&self) -> Outbox<'_> {
        Outbox::new(&self.client, self.db.namespace())
    }

    /// One pass of `dispatcher`, as the shared scenarios read it.
    async fn pass(&self, dispatcher: &Dispatcher<PgSource>) -> Pass {
        let report = dispatcher.run_once().await.unwrap();
        Pass { claimed: report.claimed, sent: report.sent, failed: report.failed }
    }

    async fn dispatcher(
        &self,
        transport: Arc<dyn Transport>,
        options: DispatcherOptions,
    ) -> Dispatcher<PgSource> {
        let registry = Arc::new(TransportRegistry::new().with(transport).unwrap());
        let pool = relayer::postgres::connect_pool(asynchronous_commit(self.db.config()), 1).await.unwrap();
        let source = PgSource::new(pool, self.db.namespace()).with_transports(registry.names());
        Dispatcher::new(source, self.db.namespace().clone(), options, registry)
            .unwrap()
            .listening(PgNotifications::outbox(self.db.config(), self.db.namespace()))
    }

    fn messages(&self, count: u8) -> Vec<NewMessage> {
        (0..count).map(|n| NewMessage::new("rabbitmq", self.queue.as_str(), vec![n])).collect()
    }

    async fn finish(self) {
        self.channel.queue_delete(&self.queue, QueueDeleteOptions::default()).await.unwrap();
    }
}

/// The test's own connection to the broker, and a channel on it.
async fn open_channel(broker: SocketAddr) -> (Connection, Channel) {
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current());
    let connection = Connection::connect(&uri(broker), properties).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

fn uri(address: SocketAddr) -> String {
    format!("amqp://guest:guest@{address}/%2f")
}

fn transport(address: SocketAddr, confirm_timeout: Duration) -> RabbitMqTransport {
    RabbitMqTransport::new(&uri(address), RabbitMqOptions::default().with_confirm_timeout(confirm_timeout))
        .unwrap()
}

fn header(received: &Received, name: &str) -> Option<String> {
    match received.properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(value) => Some(value.to_string()),
        other => panic!("header {name} is {other:?}"),
    }
}

fn ids(received: &[Received]) -> BTreeSet<String> {
    received.iter().map(|r| r.properties.message_id().as_ref().unwrap().to_string()).collect()
}

/// Sends one message until it is accepted, so the transport holds an open connection and
/// channel (a short confirm timeout may expire while a loaded machine connects), then
/// empties the queue.
async fn connect(fixture: &Fixture, rabbitmq: &RabbitMqTransport) {
    eventually("the transport connects and delivers", || async {
        rabbitmq.send(&fixture.queue, &[envelope(9)]).await.ok() == Some(vec![SendOutcome::Accepted])
    })
    .await;
    fixture.received().await;
}

#[tokio::test]
async fn an_enqueued_message_reaches_the_queue_persistent_with_its_id_body_and_headers_trn_3() {
    let Some(fixture) =
        Fixture::new("an_enqueued_message_reaches_the_queue_persistent_with_its_id_body_and_headers_trn_3")
            .await
    else {
        return;
    };
    let host = Relayer::builder(fixture.db.config(), fixture.db.namespace().clone())
        .transport(Arc::new(transport(fixture.broker, Duration::from_secs(5))))
        .dispatcher(DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build().unwrap())
        .start()
        .await
        .unwrap();
    let mut client = fixture.db.connect().await;
    let message = NewMessage::new("rabbitmq", fixture.queue.as_str(), br#"{"order":7}"#.to_vec())
        .header("content-type", "application/json")
        .trace_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let id = message.message_id();
    let tx = client.transaction().await.unwrap();
    host.writer().enqueue(&tx, &[message]).await.unwrap();
    tx.commit().await.unwrap();

    eventually("the outbox row is deleted", || async { fixture.outbox().pending().await == 0 }).await;
    host.shutdown().await;
    let received = fixture.received().await;
    assert_eq!(received.len(), 1);
    let message = &received[0];
    assert_eq!(message.body, br#"{"order":7}"#);
    assert_eq!(message.properties.message_id().as_ref().map(|id| id.to_string()), Some(id.to_string()));
    assert_eq!(*message.properties.delivery_mode(), Some(2), "persistent");
    assert_eq!(header(message, "content-type").as_deref(), Some("application/json"));
    assert_eq!(
        header(message, "relayer-trace-context").as_deref(),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    assert!(header(message, "relayer-created-at").unwrap().ends_with('Z'));
    fixture.finish().await;
}

#[tokio::test]
async fn an_unroutable_message_and_a_missing_exchange_are_permanent_failures_trn_2() {
    let Some(fixture) =
        Fixture::new("an_unroutable_message_and_a_missing_exchange_are_permanent_failures_trn_2").await
    else {
        return;
    };
    let rabbitmq = transport(fixture.broker, Duration::from_secs(5));
    let envelopes: Vec<Envelope> = (0..3).map(envelope).collect();
    let nowhere = format!("{}_nowhere", fixture.queue);
    for outcome in rabbitmq.send(&nowhere, &envelopes).await.unwrap() {
        let SendOutcome::Failed(error) = outcome else { panic!("an unroutable message was accepted") };
        assert!(!error.is_transient(), "{error}");
        assert!(error.chain().contains("unroutable") && error.chain().contains("312"), "{}", error.chain());
    }
    // The channel stays usable after a return: the next batch is delivered.
    let outcomes = rabbitmq.send(&fixture.queue, &envelopes).await.unwrap();
    assert_eq!(outcomes, vec![SendOutcome::Accepted; 3]);
    assert_eq!(ids(&fixture.received().await), envelopes.iter().map(|e| e.id.to_string()).collect());

    let missing = RabbitMqOptions::default().with_exchange(format!("{}_missing", fixture.queue));
    let missing = RabbitMqTransport::new(&uri(fixture.broker), missing).unwrap();
    for outcome in missing.send(&fixture.queue, &envelopes[..1]).await.unwrap() {
        let SendOutcome::Failed(error) = outcome else { panic!("a missing exchange accepted a message") };
        assert!(!error.is_transient(), "{}", error.chain());
    }
    fixture.finish().await;
}

/// The channel pool: more concurrent sends than channels wait for a free channel (within
/// their deadline) and all complete.
#[tokio::test]
async fn concurrent_sends_beyond_the_channel_pool_wait_their_turn_and_all_complete() {
    let Some(fixture) =
        Fixture::new("concurrent_sends_beyond_the_channel_pool_wait_their_turn_and_all_complete").await
    else {
        return;
    };
    let options = RabbitMqOptions::default().with_channels(NonZeroUsize::new(2).unwrap());
    let rabbitmq = Arc::new(RabbitMqTransport::new(&uri(fixture.broker), options).unwrap());
    let batches: Vec<Vec<Envelope>> =
        (0..8u8).map(|n| (0..10u8).map(|m| envelope(n * 10 + m)).collect()).collect();
    let sends = batches.iter().map(|batch| {
        let (rabbitmq, queue) = (Arc::clone(&rabbitmq), fixture.queue.clone());
        let batch = batch.clone();
        tokio::spawn(async move { rabbitmq.send(&queue, &batch).await.unwrap() })
    });
    for outcomes in futures_join(sends).await {
        assert_eq!(outcomes, vec![SendOutcome::Accepted; 10]);
    }
    let expected: BTreeSet<String> = batches.iter().flatten().map(|e| e.id.to_string()).collect();
    assert_eq!(ids(&fixture.received().await), expected);
    fixture.finish().await;
}

async fn futures_join<T>(tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut done = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        done.push(task.await.unwrap());
    }
    done
}

/// DSP-6, TRN-2: while the broker is away (its connection closed, new ones refused, as in a
/// restart) the rows stay, failures are transient and the breaker trips; once it is back
/// the same transport reconnects by itself and delivers every row.
#[tokio::test]
async fn a_broker_restart_keeps_the_rows_trips_the_breaker_and_the_transport_reconnects_dsp_6() {
    let Some(fixture) =
        Fixture::new("a_broker_restart_keeps_the_rows_trips_the_breaker_and_the_transport_reconnects_dsp_6")
            .await
    else {
        return;
    };
    let proxy = TcpProxy::start(fixture.broker).await;
    let rabbitmq = Arc::new(transport(proxy.address(), Duration::from_secs(2)));
    // Connected before the outage, so recovering means reconnecting.
    connect(&fixture, &rabbitmq).await;
    let dispatcher = fixture.dispatcher(rabbitmq, outage_options()).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages(5)).await.unwrap();

    broker_scenarios::outage(&fixture.outbox(), &proxy, 5, async || fixture.pass(&dispatcher).await).await;
    let received = fixture.received().await;
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    assert_eq!(received.len(), 5);
    fixture.finish().await;
}

/// DSP-6, TRN-2 against a real restart of the broker (`rabbitmqctl stop_app`, then
/// `start_app`), not a cut connection: the rows stay while it is down, the breaker trips,
/// and the same transport reconnects by itself once the broker is back and delivers every
/// row — persistent, to the durable queue, which survived the restart.
#[tokio::test]
async fn a_real_broker_restart_keeps_the_rows_and_the_same_transport_reconnects_and_delivers_dsp_6() {
    let test = "a_real_broker_restart_keeps_the_rows_and_the_same_transport_reconnects_and_delivers_dsp_6";
    let Some(mut fixture) = Fixture::exclusive(test).await else {
        return;
    };
    let rabbitmq = Arc::new(transport(fixture.broker, Duration::from_secs(2)));
    // Connected before the restart, so recovering means reconnecting.
    connect(&fixture, &rabbitmq).await;
    let dispatcher = fixture.dispatcher(rabbitmq.clone(), outage_options()).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages(5)).await.unwrap();

    // One message left in the durable queue across the restart: persistent, it survives.
    let kept = envelope(7);
    let outcome = rabbitmq.send(&fixture.queue, std::slice::from_ref(&kept)).await.unwrap();
    assert_eq!(outcome, vec![SendOutcome::Accepted]);
    let Some(stopped) = stop_rabbitmq_or_skip(test).await else {
        fixture.finish().await; // reported by name: this process cannot restart the broker
        return;
    };
    let stopped = std::cell::Cell::new(Some(stopped));
    broker_scenarios::outage_between(
        &fixture.outbox(),
        5,
        async || {}, // stopped already
        async || {
            if let Some(broker) = stopped.take() {
                broker.start().await;
            }
        },
        async || fixture.pass(&dispatcher).await,
    )
    .await;
    fixture.reconnect().await;
    let received = fixture.received().await;
    let mut expected: BTreeSet<String> = written.iter().map(|w| w.id.to_string()).collect();
    expected.insert(kept.id.to_string());
    assert_eq!(ids(&received), expected, "the five rows, and the message published before the restart");
    assert_eq!(received.len(), 6);
    for message in &received {
        assert_eq!(message.properties.delivery_mode(), &Some(2), "persistent");
    }
    fixture.finish().await;
}

/// Writes one message through relayer's writer and delivers it with a dispatcher sending
/// through `rabbitmq`; the test's queue then holds exactly it.
async fn deliver_one(fixture: &Fixture, rabbitmq: RabbitMqTransport) {
    let dispatcher = fixture.dispatcher(Arc::new(rabbitmq), DispatcherOptions::default()).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages(1)).await.unwrap();
    eventually("the outbox row is delivered", || async {
        fixture.pass(&dispatcher).await;
        fixture.outbox().pending().await == 0
    })
    .await;
    assert_eq!(ids(&fixture.received().await), written.iter().map(|w| w.id.to_string()).collect());
}

/// The error of a send that could not connect, with its causes, and its `Debug`.
async fn connect_error(rabbitmq: &RabbitMqTransport) -> String {
    let error = rabbitmq.send("anywhere", &[envelope(1)]).await.unwrap_err();
    assert!(error.is_transient(), "{}", error.chain());
    format!("{} {error:?}", error.chain())
}

/// TRN-3: `amqps://` through a TLS terminator in front of the local broker, verified
/// against the CA file: an outbox row is delivered end to end; the URI shows redacted.
#[tokio::test]
async fn amqps_delivers_an_outbox_row_through_verified_tls_trn_3() {
    let Some(fixture) = Fixture::new("amqps_delivers_an_outbox_row_through_verified_tls_trn_3").await else {
        return;
    };
    let certificates = TestCertificates::make().unwrap();
    let terminator = TlsTerminator::start(fixture.broker, &certificates, TlsStart::Immediate).await;
    let uri = format!("amqps://guest:guest@localhost:{}/%2f", terminator.port());
    let options = RabbitMqOptions::default().with_ca_file(certificates.ca());
    let rabbitmq = RabbitMqTransport::new(&uri, options).unwrap();
    assert_eq!(rabbitmq.redacted_uri(), format!("amqps://guest:***@localhost:{}/%2f", terminator.port()));
    assert!(!format!("{rabbitmq:?}").contains("guest:guest"), "{rabbitmq:?}");
    deliver_one(&fixture, rabbitmq).await;
    fixture.finish().await;
}

/// TRN-3: a certificate that does not chain to the configured CA, or does not name the
/// host connected to, is refused: the send fails naming the address, what was verified
/// against which CA, and why — never the credentials — and nothing is published.
#[tokio::test]
async fn amqps_refuses_an_untrusted_certificate_or_one_for_another_host_trn_3() {
    let Some(fixture) =
        Fixture::new("amqps_refuses_an_untrusted_certificate_or_one_for_another_host_trn_3").await
    else {
        return;
    };
    let certificates = TestCertificates::make().unwrap();
    let terminator = TlsTerminator::start(fixture.broker, &certificates, TlsStart::Immediate).await;
    let port = terminator.port();

    let stranger = RabbitMqOptions::default().with_ca_file(certificates.other_ca());
    let rabbitmq =
        RabbitMqTransport::new(&format!("amqps://app:s3cret@localhost:{port}/%2f"), stranger).unwrap();
    let shown = connect_error(&rabbitmq).await;
    assert!(shown.contains(&format!("connect to RabbitMQ at localhost:{port}")), "{shown}");
    let against = format!("chain and host name verified against {}", certificates.other_ca().display());
    assert!(shown.contains(&against), "{shown}");
    assert!(shown.contains("UnknownIssuer"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");

    // The right CA, but the certificate names `localhost`, not 127.0.0.1.
    let trusted = RabbitMqOptions::default().with_ca_file(certificates.ca());
    let rabbitmq =
        RabbitMqTransport::new(&format!("amqps://app:s3cret@127.0.0.1:{port}/%2f"), trusted).unwrap();
    let shown = connect_error(&rabbitmq).await;
    assert!(shown.contains("certificate not valid for name \"127.0.0.1\""), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(fixture.received().await.is_empty());
    fixture.finish().await;
}

/// TRN-3: `amqps://` never speaks plaintext. A listener behind an `amqps` URI receives a
/// TLS handshake as its first bytes, not the AMQP protocol header; the plaintext broker
/// itself under `amqps` is refused.
#[tokio::test]
async fn amqps_never_falls_back_to_plaintext_trn_3() {
    let Some(fixture) = Fixture::new("amqps_never_falls_back_to_plaintext_trn_3").await else { return };
    let certificates = TestCertificates::make().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let first_bytes = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 8];
        socket.read_exact(&mut first).await.unwrap();
        first // dropped: the connection closes
    });
    let options = RabbitMqOptions::default().with_ca_file(certificates.ca());
    let rabbitmq =
        RabbitMqTransport::new(&format!("amqps://guest:guest@localhost:{port}/%2f"), options).unwrap();
    connect_error(&rabbitmq).await;
    let first = first_bytes.await.unwrap();
    assert_ne!(&first[..4], b"AMQP", "the plaintext AMQP header went out under amqps");
    assert_eq!(first[0], 0x16, "a TLS handshake record comes first: {first:?}");

    // The real broker, plaintext on its AMQP port, under amqps.
    let options = RabbitMqOptions::default().with_ca_file(certificates.ca());
    let uri = format!("amqps://guest:guest@localhost:{}/%2f", fixture.broker.port());
    let shown = connect_error(&RabbitMqTransport::new(&uri, options).unwrap()).await;
    assert!(shown.contains("TLS handshake refused"), "{shown}");
    assert!(fixture.received().await.is_empty());
    fixture.finish().await;
}

/// TRN-3: an IP-literal host is connected to as written (lapin's own parser turned every
/// IP into `localhost`): through a forwarder on `127.0.0.2`, and on `[::1]` when the
/// machine has IPv6, an outbox row is delivered.
#[tokio::test]
async fn an_ip_literal_host_is_connected_to_as_written_trn_3() {
    let Some(fixture) = Fixture::new("an_ip_literal_host_is_connected_to_as_written_trn_3").await else {
        return;
    };
    let v4 = TcpProxy::start_on("127.0.0.2".parse().unwrap(), fixture.broker).await.unwrap();
    let uri = format!("amqp://guest:guest@127.0.0.2:{}/%2f", v4.address().port());
    deliver_one(&fixture, RabbitMqTransport::new(&uri, RabbitMqOptions::default()).unwrap()).await;
    match TcpProxy::start_on("::1".parse().unwrap(), fixture.broker).await {
        Some(v6) => {
            let uri = format!("amqp://guest:guest@[::1]:{}/%2f", v6.address().port());
            deliver_one(&fixture, RabbitMqTransport::new(&uri, RabbitMqOptions::default()).unwrap()).await;
        }
        None => eprintln!("no IPv6 loopback here: only the IPv4 literal was tried"),
    }
    fixture.finish().await;
}

/// TRN-3: credentials never reach an error: a connection that fails shows the URI
/// redacted in the error's chain and `Debug`, and in the transport's `Debug`.
#[tokio::test]
async fn a_failed_connection_never_shows_the_uris_credentials_trn_3() {
    // Nothing listens on port 1.
    let rabbitmq =
        RabbitMqTransport::new("amqp://app:s3cret@127.0.0.1:1/%2f?token=t0k3n", RabbitMqOptions::default())
            .unwrap();
    let shown = format!("{} {rabbitmq:?}", connect_error(&rabbitmq).await);
    assert!(shown.contains("connect to RabbitMQ at 127.0.0.1:1 (plaintext (amqp://))"), "{shown}");
    assert!(!shown.contains("s3cret") && !shown.contains("t0k3n"), "{shown}");
    let invalid = RabbitMqTransport::new("amqp:app:s3cret@host", RabbitMqOptions::default()).unwrap_err();
    assert!(!format!("{invalid} {invalid:?}").contains("s3cret"), "{invalid:?}");
}

/// TRN-5: a broker that took the publishes and never confirms fails the send transiently
/// at the transport's confirm timeout; the rows are kept and retried, and delivered once it
/// answers.
#[tokio::test]
async fn a_broker_that_never_confirms_fails_the_send_at_the_confirm_timeout_trn_5() {
    let test = "a_broker_that_never_confirms_fails_the_send_at_the_confirm_timeout_trn_5";
    stalled(test, Duration::from_millis(500), None, "no publisher confirm within").await;
}

/// TRN-5: with a confirm timeout longer than the dispatcher's `send_timeout`, the
/// dispatcher's send deadline abandons the send to a silent broker (its channel is not
/// reused); the rows are retried and delivered.
#[tokio::test]
async fn a_broker_that_never_confirms_hits_the_dispatchers_send_deadline_trn_5() {
    let test = "a_broker_that_never_confirms_hits_the_dispatchers_send_deadline_trn_5";
    let deadline = Some(Duration::from_millis(500));
    stalled(test, Duration::from_secs(60), deadline, "did not answer within the send timeout").await;
}

async fn stalled(
    test: &str,
    confirm_timeout: Duration,
    send_timeout: Option<Duration>,
    expected_error: &str,
) {
    let Some(fixture) = Fixture::new(test).await else { return };
    let proxy = TcpProxy::start(fixture.broker).await;
    let rabbitmq = Arc::new(transport(proxy.address(), confirm_timeout));
    connect(&fixture, &rabbitmq).await; // the connection and a channel exist before the stall
    let dispatcher = fixture.dispatcher(rabbitmq, stall_options(send_timeout)).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages(4)).await.unwrap();

    let pass = async || fixture.pass(&dispatcher).await;
    broker_scenarios::stall(&fixture.outbox(), &proxy, 4, expected_error, pass).await;
    // RabbitMQ does not deduplicate: the stalled first publishes may arrive too (at least
    // once; the receiver's inbox deduplicates by message id).
    let received = fixture.received().await;
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    fixture.finish().await;
}

/// A writer for `dispatcher`'s namespace accepting exactly its transports.
fn writer(dispatcher: &Dispatcher<PgSource>) -> OutboxWriter {
    OutboxWriter::for_registry(dispatcher.namespace(), dispatcher.send_path().transports())
}

/// TRN-2, DSP-5, SPEC §15: a destination longer than an AMQP routing key (255 bytes) — the
/// outbox accepts up to 1024 for other transports — is a permanent failure naming it, so
/// the row is buried on its first attempt; before, lapin wrote a malformed frame and the
/// row was retried forever. The other messages of the pass are delivered.
#[tokio::test]
async fn a_routing_key_over_255_bytes_is_a_permanent_error_and_its_row_is_buried_trn_2() {
    let Some(fixture) =
        Fixture::new("a_routing_key_over_255_bytes_is_a_permanent_error_and_its_row_is_buried_trn_2").await
    else {
        return;
    };
    let rabbitmq = Arc::new(transport(fixture.broker, Duration::from_secs(5)));
    let options = DispatcherOptions::builder()
        .max_attempts(std::num::NonZeroU32::new(5))
        .retry_base(Duration::from_millis(10))
        .build()
        .unwrap();
    let dispatcher = fixture.dispatcher(rabbitmq, options).await;
    let long_key = format!("{}_{}", fixture.queue, "k".repeat(300));
    let mut messages = fixture.messages(2);
    messages.push(NewMessage::new("rabbitmq", long_key.as_str(), b"too long".to_vec()));
    writer(&dispatcher).enqueue(&fixture.client, &messages).await.unwrap();
    let dead = fixture.db.namespace().table("dead");
    eventually("the row is buried", || async {
        fixture.pass(&dispatcher).await;
        let sql = format!("SELECT count(*) FROM {dead}");
        fixture.client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    let row = fixture
        .client
        .query_one(&format!("SELECT attempts, last_error, destination FROM {dead}"), &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 1, "a permanent error buries at once");
    let error: String = row.get(1);
    assert!(
        error.contains(&format!("is {} bytes long; an AMQP routing key holds 255", long_key.len())),
        "{error}"
    );
    assert_eq!(row.get::<_, String>(2), long_key);
    assert_eq!(fixture.received().await.len(), 2, "the rest of the pass is delivered");
    fixture.finish().await;
}
