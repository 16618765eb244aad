//! [`NatsTransport`]: pipelined, acknowledged JetStream publishes.

use std::num::NonZeroUsize;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::{Client, ConnectOptions};
use relayer_core::transport::{Published, publish_then_await};
use relayer_core::{Capabilities, Envelope, SendOutcome, Transport, TransportError, async_trait};

use crate::classify::{classify, fails_the_connection};
use crate::options::{NatsOptions, OptionError};
use crate::publish::publish_message;
use crate::servers::{Credentials, Servers};

/// The longest pause between reconnection attempts: a relay should notice a server that
/// came back within a second or two.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// How long [`NatsTransport::connect`] (and each reconnection attempt) may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes to NATS JetStream; see the [crate docs](crate) for the model.
pub struct NatsTransport {
    options: NatsOptions,
    jetstream: jetstream::Context,
}

impl std::fmt::Debug for NatsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTransport").field("options", &self.options).finish_non_exhaustive()
    }
}

/// The transport could not be set up. Neither its `Display` nor its `Debug` shows a
/// server URL's user info or secret query values: they read `***`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// An option is out of range, a server URL does not parse, or a CA file is unusable.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The first connection to the server failed.
    #[error("cannot connect to NATS at {url} ({security})")]
    Connect {
        /// The server addresses, redacted.
        url: String,
        /// Whether TLS is required and what it verifies, in words.
        security: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
}

impl NatsTransport {
    /// Connects to the server at `url` (`nats://host:4222`, or several separated by
    /// commas). The first connection must succeed within [`CONNECT_TIMEOUT`]; later
    /// losses are reconnected in the background, retrying every ≤ 2 s forever.
    ///
    /// **Credentials** in the URL are used and never shown: `nats://user:password@host`
    /// authenticates with user and password, `nats://token@host` with a token (every
    /// server of the list must carry the same ones). They are taken out of the addresses
    /// the client keeps, and every message shows the URL redacted (`***`).
    ///
    /// **TLS.** `tls://host:4222` requires TLS of that server; so do
    /// [`NatsOptions::with_ca_file`] and [`NatsOptions::with_tls_first`] of every server; a
    /// server whose `INFO` says it requires TLS gets it too. TLS always verifies the
    /// server's chain and host name — against the CA files when given, else the system's
    /// trusted roots — and a server that cannot complete that handshake is refused, never
    /// spoken to in plaintext. The NATS protocol starts in plaintext (the server's `INFO`)
    /// and upgrades; with `with_tls_first` the handshake comes first instead (the server's
    /// `handshake_first`).
    pub async fn connect(url: &str, options: NatsOptions) -> Result<Self, ConnectError> {
        options.validate()?;
        let servers = Servers::parse(url)?;
        let (tls, verifies) = crate::tls::client_config(options.ca_files())?;
        // A `tls://` server requires TLS of every server, discovered ones included (a mixed
        // list is refused): async-nats's per-address scheme does not cover servers it learns.
        let requires_tls = options.requires_tls() || servers.tls_required()?;
        let security = if requires_tls {
            format!("TLS required, {verifies}")
        } else {
            format!("TLS when the server requires it, {verifies}")
        };
        let mut connect = ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .reconnect_delay_callback(reconnect_delay)
            .tls_client_config(tls)
            .require_tls(requires_tls);
        if options.tls_first() {
            connect = connect.tls_first();
        }
        connect = match servers.credentials {
            Some(Credentials::UserPassword { user, password }) => connect.user_and_password(user, password),
            Some(Credentials::Token(token)) => connect.token(token),
            None => connect,
        };
        let client = connect.connect(servers.addresses).await.map_err(|source| ConnectError::Connect {
            url: servers.redacted,
            security,
            source,
        })?;
        Ok(NatsTransport::over(client, options))
    }

    /// A transport over a client you built yourself (credentials, TLS, …). The ack
    /// timeout of `options` bounds every publish and acknowledgement wait. Options about
    /// connecting ([`NatsOptions::with_ca_file`], [`NatsOptions::with_tls_first`]) are
    /// refused here, naming the field: the client is connected already, with its own TLS
    /// settings (`ConnectOptions::add_root_certificates`, `require_tls`, `tls_first`).
    pub fn new(client: Client, options: NatsOptions) -> Result<Self, ConnectError> {
        options.validate()?;
        if let Some(field) = options.connecting_field() {
            return Err(OptionError::new(
                field,
                "applies to NatsTransport::connect only: a client built yourself carries its own TLS \
                 settings (async_nats::ConnectOptions::add_root_certificates, require_tls, tls_first)"
                    .to_owned(),
            )
            .into());
        }
        Ok(NatsTransport::over(client, options))
    }

    /// The transport over a connected client, `options` valid.
    fn over(client: Client, options: NatsOptions) -> Self {
        let mut jetstream = jetstream::new(client);
        jetstream.set_timeout(options.ack_timeout());
        NatsTransport { options, jetstream }
    }

    /// The options this transport runs with.
    pub fn options(&self) -> &NatsOptions {
        &self.options
    }
}

/// Reconnection backoff: 0, 100 ms, 200 ms, 400 ms … capped at [`MAX_RECONNECT_DELAY`].
fn reconnect_delay(attempts: usize) -> Duration {
    let exponent = u32::try_from(attempts.saturating_sub(1)).unwrap_or(u32::MAX).min(8);
    if attempts == 0 {
        Duration::ZERO
    } else {
        (Duration::from_millis(100) * 2u32.pow(exponent)).min(MAX_RECONNECT_DELAY)
    }
}

#[async_trait]
impl Transport for NatsTransport {
    fn name(&self) -> &str {
        self.options.name()
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.options.batch_limit()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE.with_deduplication()
    }

    async fn send(&self, subject: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        if let Some(problem) = subject_problem(subject) {
            return Err(TransportError::permanent(format!("invalid NATS subject {subject:?}: {problem}")));
        }
        // Publish everything first (pipelined on the connection), then await the acks
        // together: one round trip's wait per batch, not per message.
        let publish = |envelope| async move {
            let message = match publish_message(envelope) {
                Ok(message) => message,
                Err(error) => return Published::Failed(error),
            };
            // The client waits without a bound for a free in-flight slot before its own
            // timeout starts: the ack timeout covers that wait too.
            let publish = self.jetstream.send_publish(subject.to_owned(), message);
            let sent = tokio::time::timeout(self.options.ack_timeout(), publish)
                .await
                .unwrap_or_else(|_| Err(PublishError::new(PublishErrorKind::TimedOut)));
            match sent {
                Ok(ack) => Published::Awaiting(ack),
                Err(error) if fails_the_connection(&error) => Published::Broke(classify(subject, error)),
                Err(error) => Published::Failed(classify(subject, error)),
            }
        };
        let await_ack = |ack: PublishAckFuture| async move {
            match ack.await {
                // A duplicate inside the window is stored already: delivered.
                Ok(_) => SendOutcome::Accepted,
                Err(error) => SendOutcome::Failed(classify(subject, error)),
            }
        };
        Ok(publish_then_await(batch, publish, await_ack).await.outcomes)
    }
}

/// Why `subject` cannot be published to, if it cannot: empty, white space, or an empty
/// token (`a..b`, a leading or trailing dot). Wildcards are for subscribers only.
fn subject_problem(subject: &str) -> Option<&'static str> {
    if subject.chars().any(char::is_whitespace) {
        Some("it contains white space")
    } else if subject.split('.').any(str::is_empty) {
        Some("it has an empty token")
    } else if subject.split('.').any(|token| token == "*" || token == ">") {
        Some("wildcards cannot be published to")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_that_cannot_be_published_to_are_named() {
        assert_eq!(subject_problem("orders.created"), None);
        assert_eq!(subject_problem("orders created"), Some("it contains white space"));
        for empty in ["", ".a", "a.", "a..b"] {
            assert_eq!(subject_problem(empty), Some("it has an empty token"), "{empty:?}");
        }
        assert_eq!(subject_problem("orders.>"), Some("wildcards cannot be published to"));
    }

    #[test]
    fn reconnect_delay_grows_and_is_capped() {
        let delays: Vec<_> = [0, 1, 2, 3, 50].into_iter().map(reconnect_delay).collect();
        assert_eq!(delays[..4], [0, 100, 200, 400].map(Duration::from_millis));
        assert_eq!(delays[4], MAX_RECONNECT_DELAY);
    }
}

#[cfg(test)]
mod connect_tests {
    use super::*;

    /// A refused connection's error names the server and what TLS verifies, never the
    /// credentials, in `Display` and in `Debug`.
    #[tokio::test]
    async fn a_failed_connection_never_shows_the_urls_credentials_trn_3() {
        // Nothing listens on port 1.
        for url in ["nats://app:s3cret@127.0.0.1:1", "nats://s3cret@127.0.0.1:1?auth=s3cret"] {
            let error = NatsTransport::connect(url, NatsOptions::default()).await.unwrap_err();
            let mut chain = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                chain.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            let shown = format!("{chain} {error:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("cannot connect to NATS at nats://"), "{shown}");
            assert!(shown.contains("@127.0.0.1:1"), "{shown}");
        }
        let options = NatsOptions::default().with_ca_file("/nonexistent/ca.pem");
        let error = NatsTransport::connect("nats://app:s3cret@127.0.0.1:1", options).await.unwrap_err();
        let shown = error.to_string();
        assert!(
            shown.starts_with(
                "NATS transport option `ca_file` /nonexistent/ca.pem: cannot read CA certificates"
            ),
            "{shown}"
        );
    }
}
