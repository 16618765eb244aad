//! The NATS JetStream transport against a real nats-server (TRN-1, TRN-2, TRN-3, TRN-5,
//! DSP-6). Messages enter through relayer's writer and leave through a dispatcher; a
//! JetStream consumer reads what the stream stored. Without a reachable server each test
//! reports itself as skipped by name (see `relayer_test_support::broker_or_skip`).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt;
use relayer::dispatcher::Dispatcher;
use relayer::postgres::{OutboxWriter, PgNotifications, PgSource, asynchronous_commit};
use relayer::{
    DispatcherOptions, Envelope, NewMessage, Relayer, SendOutcome, Transport, TransportError,
    TransportRegistry, async_trait,
};
use relayer_nats::{NatsOptions, NatsTransport};
use relayer_test_support::broker_scenarios::{
    self, Outbox, Pass, envelope, outage_options, quick_retries, stall_options,
};
use relayer_test_support::{
    Broker, TcpProxy, TestCertificates, TestDb, TlsStart, TlsTerminator, broker_or_skip, eventually,
    own_nats_server_or_skip,
};
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

    /// `count` messages to the subject `name`, with bodies `[0]`, `[1]` …
    fn messages(&self, name: &str, count: u8) -> Vec<NewMessage> {
        (0..count).map(|n| NewMessage::new("nats", self.subject(name), vec![n])).collect()
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

    async fn finish(self) {
        self.jetstream.delete_stream(&self.stream).await.unwrap();
    }
}

fn options(ack_timeout: Duration) -> NatsOptions {
    NatsOptions::default().with_ack_timeout(ack_timeout)
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

    eventually("the outbox row is deleted", || async { fixture.outbox().pending().await == 0 }).await;
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
    let dispatcher = fixture.dispatcher(Arc::new(nats), outage_options()).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages("outage", 5)).await.unwrap();

    broker_scenarios::outage(&fixture.outbox(), &proxy, 5, async || fixture.pass(&dispatcher).await).await;
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
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages("replay", 3)).await.unwrap();

    let first = dispatcher.run_once().await.unwrap();
    assert_eq!((first.claimed, first.failed), (3, 3), "the outcome was lost: the rows stay");
    assert_eq!(fixture.stored().await, 3, "yet the stream stored them");
    eventually("the replay completes the rows", || async {
        dispatcher.run_once().await.unwrap();
        fixture.outbox().pending().await == 0
    })
    .await;
    assert_eq!(transport.crashes.load(Ordering::SeqCst), 0);
    let received = fixture.received().await;
    assert_eq!(received.len(), 3, "the replayed publishes were dropped as duplicates");
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    fixture.finish().await;
}

/// TRN-5: a server that took the connection and never answers fails the send transiently
/// once the transport's ack timeout passes; the rows are kept and retried, and delivered
/// once it answers.
#[tokio::test]
async fn a_server_that_never_acknowledges_fails_the_send_at_the_ack_timeout_trn_5() {
    let test = "a_server_that_never_acknowledges_fails_the_send_at_the_ack_timeout_trn_5";
    stalled(test, Duration::from_millis(300), None, "no acknowledgement in time").await;
}

/// TRN-5: with an ack timeout longer than the dispatcher's `send_timeout`, the dispatcher's
/// send deadline abandons the send to a silent server; the rows are retried and delivered.
#[tokio::test]
async fn a_server_that_never_acknowledges_hits_the_dispatchers_send_deadline_trn_5() {
    let test = "a_server_that_never_acknowledges_hits_the_dispatchers_send_deadline_trn_5";
    let deadline = Some(Duration::from_millis(500));
    stalled(test, Duration::from_secs(60), deadline, "did not answer within the send timeout").await;
}

async fn stalled(test: &str, ack_timeout: Duration, send_timeout: Option<Duration>, expected_error: &str) {
    let Some(fixture) = Fixture::new(test).await else { return };
    let proxy = TcpProxy::start(fixture.nats).await;
    let nats = NatsTransport::connect(&proxy.address().to_string(), options(ack_timeout)).await.unwrap();
    let dispatcher = fixture.dispatcher(Arc::new(nats), stall_options(send_timeout)).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages("silent", 4)).await.unwrap();

    let pass = async || fixture.pass(&dispatcher).await;
    broker_scenarios::stall(&fixture.outbox(), &proxy, 4, expected_error, pass).await;
    let received = fixture.received().await;
    assert_eq!(ids(&received), written.iter().map(|w| w.id.to_string()).collect());
    assert_eq!(received.len(), 4, "publishes the stall held back were deduplicated");
    fixture.finish().await;
}

/// A writer for `dispatcher`'s namespace accepting exactly its transports.
fn writer(dispatcher: &Dispatcher<PgSource>) -> OutboxWriter {
    OutboxWriter::for_registry(dispatcher.namespace(), dispatcher.send_path().transports())
}

/// Writes one message through relayer's writer and delivers it with a dispatcher sending
/// through `nats`; the stream then holds exactly it.
async fn deliver_one(fixture: &Fixture, nats: NatsTransport) {
    let dispatcher = fixture.dispatcher(Arc::new(nats), DispatcherOptions::default()).await;
    let written = writer(&dispatcher).enqueue(&fixture.client, &fixture.messages("tls", 1)).await.unwrap();
    eventually("the outbox row is delivered", || async {
        fixture.pass(&dispatcher).await;
        fixture.outbox().pending().await == 0
    })
    .await;
    assert_eq!(ids(&fixture.received().await), written.iter().map(|w| w.id.to_string()).collect());
}

/// A connection refused at set-up: its message with every cause, and its `Debug`.
async fn refused(url: &str, options: NatsOptions) -> String {
    let error = NatsTransport::connect(url, options).await.unwrap_err();
    let mut shown = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        shown.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    format!("{shown} {error:?}")
}

/// TRN-3: `tls://` with the NATS protocol's own upgrade (plaintext `INFO` saying TLS is
/// required, then the handshake), through a TLS terminator in front of the local server,
/// verified against the CA file: an outbox row is delivered end to end. The URL's
/// credentials are used (the local server takes any) and never shown.
#[tokio::test]
async fn tls_after_the_servers_info_delivers_an_outbox_row_verified_trn_3() {
    let Some(fixture) =
        Fixture::new("tls_after_the_servers_info_delivers_an_outbox_row_verified_trn_3").await
    else {
        return;
    };
    let certificates = TestCertificates::make().unwrap();
    let terminator = TlsTerminator::start(fixture.nats, &certificates, TlsStart::AfterNatsInfo).await;
    let options = NatsOptions::default().with_ca_file(certificates.ca());
    let url = format!("tls://localhost:{}", terminator.port());
    let nats = NatsTransport::connect(&url, options).await.unwrap();
    deliver_one(&fixture, nats).await;
    fixture.finish().await;
}

/// TRN-3: `tls_first` — the handshake before the server's first message (its
/// `handshake_first`), which a plain TLS terminator serves: delivered end to end.
#[tokio::test]
async fn tls_first_delivers_an_outbox_row_verified_trn_3() {
    let Some(fixture) = Fixture::new("tls_first_delivers_an_outbox_row_verified_trn_3").await else {
        return;
    };
    let certificates = TestCertificates::make().unwrap();
    let terminator = TlsTerminator::start(fixture.nats, &certificates, TlsStart::Immediate).await;
    let options = NatsOptions::default().with_ca_file(certificates.ca()).with_tls_first(true);
    let nats =
        NatsTransport::connect(&format!("nats://localhost:{}", terminator.port()), options).await.unwrap();
    deliver_one(&fixture, nats).await;
    fixture.finish().await;
}

/// TRN-3: a certificate that does not chain to the configured CA, or that names another
/// host, is refused at connect naming the server, what was verified against which CA,
/// and why — never the credentials.
#[tokio::test]
async fn tls_refuses_an_untrusted_certificate_or_one_for_another_host_trn_3() {
    let Some(fixture) =
        Fixture::new("tls_refuses_an_untrusted_certificate_or_one_for_another_host_trn_3").await
    else {
        return;
    };
    let certificates = TestCertificates::make().unwrap();
    let terminator = TlsTerminator::start(fixture.nats, &certificates, TlsStart::AfterNatsInfo).await;
    let port = terminator.port();

    let stranger = NatsOptions::default().with_ca_file(certificates.other_ca());
    let shown = refused(&format!("tls://app:s3cret@localhost:{port}"), stranger).await;
    assert!(shown.contains(&format!("cannot connect to NATS at tls://app:***@localhost:{port}")), "{shown}");
    let against = format!("chain and host name verified against {}", certificates.other_ca().display());
    assert!(shown.contains(&against), "{shown}");
    assert!(shown.contains("UnknownIssuer"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");

    let trusted = NatsOptions::default().with_ca_file(certificates.ca());
    let shown = refused(&format!("tls://s3cret@127.0.0.1:{port}"), trusted).await;
    assert!(shown.contains("not valid for name \"127.0.0.1\""), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
    fixture.finish().await;
}

/// TRN-3: TLS required never falls back to plaintext: `tls://` to the plaintext server,
/// and a CA file with a `nats://` URL, are refused rather than connected in the clear.
#[tokio::test]
async fn required_tls_never_falls_back_to_plaintext_trn_3() {
    let Some(fixture) = Fixture::new("required_tls_never_falls_back_to_plaintext_trn_3").await else {
        return;
    };
    let certificates = TestCertificates::make().unwrap();
    let port = fixture.nats.port();
    let shown =
        refused(&format!("tls://localhost:{port}"), NatsOptions::default().with_ca_file(certificates.ca()))
            .await;
    assert!(
        shown.contains(&format!("cannot connect to NATS at tls://localhost:{port} (TLS required")),
        "{shown}"
    );
    let shown =
        refused(&format!("nats://localhost:{port}"), NatsOptions::default().with_ca_file(certificates.ca()))
            .await;
    assert!(shown.contains("(TLS required, chain and host name verified against"), "{shown}");

    // A server whose INFO requires TLS gets it, verified (here against the system's roots,
    // which do not hold the test CA) — not skipped because the URL says `nats://`.
    let terminator = TlsTerminator::start(fixture.nats, &certificates, TlsStart::AfterNatsInfo).await;
    let shown = refused(&format!("nats://localhost:{}", terminator.port()), NatsOptions::default()).await;
    assert!(
        shown.contains("(TLS when the server requires it, chain and host name verified against the system's"),
        "{shown}"
    );
    assert!(shown.contains("UnknownIssuer"), "{shown}");
    fixture.finish().await;
}

/// TRN-3: the URL's credentials authenticate (async-nats alone ignores a URL's user info):
/// a server of the test's own requiring a user and password, then one requiring a token,
/// accepts them from the URL, refuses wrong ones, and no message shows any of them.
#[tokio::test]
async fn the_urls_credentials_authenticate_and_are_never_shown_trn_3() {
    let test = "the_urls_credentials_authenticate_and_are_never_shown_trn_3";
    let Some(server) = own_nats_server_or_skip(test, &["--user", "app", "--pass", "s3/cret"]).await else {
        return;
    };
    let port = server.address().port();
    let nats =
        NatsTransport::connect(&format!("nats://app:s3%2Fcret@127.0.0.1:{port}"), NatsOptions::default())
            .await
            .unwrap();
    assert!(!format!("{nats:?}").contains("s3"), "{nats:?}");
    let shown = refused(&format!("nats://app:wr0ng@127.0.0.1:{port}"), NatsOptions::default()).await;
    assert!(shown.contains(&format!("cannot connect to NATS at nats://app:***@127.0.0.1:{port}")), "{shown}");
    assert!(shown.to_lowercase().contains("authorization"), "{shown}");
    assert!(!shown.contains("wr0ng"), "{shown}");
    drop(server);

    let Some(server) = own_nats_server_or_skip(test, &["--auth", "t0k3n"]).await else { return };
    let port = server.address().port();
    NatsTransport::connect(&format!("nats://t0k3n@127.0.0.1:{port}"), NatsOptions::default()).await.unwrap();
    let shown = refused(&format!("nats://wr0ng-t0k3n@127.0.0.1:{port}"), NatsOptions::default()).await;
    assert!(shown.contains(&format!("cannot connect to NATS at nats://***@127.0.0.1:{port}")), "{shown}");
    assert!(!shown.contains("t0k3n"), "{shown}");
}

/// TRN-3: a CA file or `tls_first` given with a client built elsewhere is refused naming
/// the field, not silently ignored: that client's TLS settings are its own.
#[tokio::test]
async fn connecting_options_given_with_a_client_built_elsewhere_are_refused_naming_them_trn_3() {
    let test = "connecting_options_given_with_a_client_built_elsewhere_are_refused_naming_them_trn_3";
    let Some(nats) = broker_or_skip(Broker::Nats, test).await else { return };
    let client = async_nats::connect(nats.to_string()).await.unwrap();
    let ca = NatsOptions::default().with_ca_file("/etc/ssl/nats-ca.pem");
    let refused = NatsTransport::new(client.clone(), ca).unwrap_err().to_string();
    assert!(
        refused.starts_with("NATS transport option `ca_file` applies to NatsTransport::connect only"),
        "{refused}"
    );
    let first = NatsOptions::default().with_tls_first(true);
    let refused = NatsTransport::new(client.clone(), first).unwrap_err().to_string();
    assert!(refused.starts_with("NATS transport option `tls_first` applies"), "{refused}");
    NatsTransport::new(client, NatsOptions::default()).unwrap();
}
