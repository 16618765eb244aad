//! A custom transport: each message is an HTTP `POST` to `http://<endpoint><destination>`.
//!
//! Everything a transport must do is in [`Transport::send`]: deliver a batch to one
//! destination and say, per message, whether it was accepted — and if not, whether a retry
//! can help (TRN-2). relayer does the rest: claims, retries with backoff, circuit
//! breakers, poison handling.
//!
//! The request carries the message id as `Webhook-Id` (the receiver deduplicates on it:
//! delivery is at least once), the message's headers, and its creation context
//! ([`relayer::core::context_headers`]). A 2xx response accepts the message; 408, 429 and
//! 5xx, a refused connection or no response within the timeout are transient; any other
//! 4xx is permanent (the endpoint refuses this message, retrying cannot help).

use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use futures_util::future::join_all;
use relayer::core::context_headers::{context_headers, is_context_header};
use relayer::{Envelope, SendOutcome, Transport, TransportError, async_trait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// POSTs messages to one HTTP endpoint; the destination is the request path.
#[derive(Debug)]
pub struct WebhookTransport {
    name: String,
    endpoint: SocketAddr,
    timeout: Duration,
}

impl WebhookTransport {
    /// A transport registered as `name`, posting to `endpoint`, with a 5 s timeout per request.
    pub fn new(name: impl Into<String>, endpoint: SocketAddr) -> Self {
        WebhookTransport { name: name.into(), endpoint, timeout: Duration::from_secs(5) }
    }

    /// Replaces the timeout of one request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn post(&self, path: &str, envelope: &Envelope) -> SendOutcome {
        let request = match request(self.endpoint, path, envelope) {
            Ok(request) => request,
            Err(error) => return SendOutcome::Failed(error),
        };
        let what = || format!("POST http://{}{path} (message {})", self.endpoint, envelope.id);
        match tokio::time::timeout(self.timeout, exchange(self.endpoint, &request)).await {
            Err(_) => SendOutcome::Failed(TransportError::transient(format!(
                "{}: no response within {:?}",
                what(),
                self.timeout
            ))),
            Ok(Err(error)) => SendOutcome::Failed(TransportError::transient(what()).with_source(error)),
            Ok(Ok(status)) => match status {
                200..=299 => SendOutcome::Accepted,
                408 | 429 | 500..=599 => {
                    SendOutcome::Failed(TransportError::transient(format!("{}: status {status}", what())))
                }
                _ => SendOutcome::Failed(TransportError::permanent(format!("{}: status {status}", what()))),
            },
        }
    }
}

#[async_trait]
impl Transport for WebhookTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::new(32).expect("32 is not zero")
    }

    async fn send(&self, path: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            // The destination itself is wrong: every message of the batch fails the same way.
            return Err(TransportError::permanent(format!(
                "webhook destination {path:?} is not a request path"
            )));
        }
        // The messages of a batch are posted side by side, each on its own connection.
        Ok(join_all(batch.iter().map(|envelope| self.post(path, envelope))).await)
    }
}

/// The request bytes; a header that cannot travel in HTTP/1.1 fails that message
/// permanently.
fn request(endpoint: SocketAddr, path: &str, envelope: &Envelope) -> Result<Vec<u8>, TransportError> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\nConnection: close\r\nContent-Length: {}\r\nWebhook-Id: {}\r\n",
        envelope.body.len(),
        envelope.id
    );
    let caller = envelope.headers.iter().filter(|(name, _)| !is_context_header(name));
    let caller = caller.map(|(name, value)| (name.clone(), value.clone()));
    let context = context_headers(envelope).map(|(name, value)| (name.to_owned(), value));
    for (name, value) in caller.chain(context) {
        if value.chars().any(|c| c == '\r' || c == '\n') {
            return Err(TransportError::permanent(format!(
                "message {}: header {name:?} has a line break, which HTTP/1.1 cannot carry",
                envelope.id
            )));
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&envelope.body);
    Ok(bytes)
}

/// Sends `request` and returns the response's status code.
async fn exchange(endpoint: SocketAddr, request: &[u8]) -> io::Result<u16> {
    let mut stream = TcpStream::connect(endpoint).await?;
    stream.write_all(request).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?; // `Connection: close`: the server ends it
    let status_line = response.split(|&b| b == b'\n').next().unwrap_or_default();
    let status = std::str::from_utf8(status_line).ok().and_then(|line| line.split_whitespace().nth(1));
    status
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "the response has no HTTP status line"))
}
