//! [`NatsOptions`]: the transport's name, batch limit, acknowledgement deadline and TLS.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

/// The longest acknowledgement deadline accepted.
const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(3600);

/// How a [`NatsTransport`](crate::NatsTransport) publishes. [`Default`] gives the values
/// documented on each `with_` setter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsOptions {
    name: String,
    batch_limit: NonZeroUsize,
    ack_timeout: Duration,
    ca_files: Vec<PathBuf>,
    tls_first: bool,
}

impl Default for NatsOptions {
    fn default() -> Self {
        NatsOptions {
            name: "nats".to_owned(),
            batch_limit: NonZeroUsize::new(256).expect("256 is not zero"),
            ack_timeout: Duration::from_secs(5),
            ca_files: Vec::new(),
            tls_first: false,
        }
    }
}

impl NatsOptions {
    /// The name messages select the transport by. Default `nats`.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The most messages published (and in flight) per send. Default 256.
    pub fn with_batch_limit(mut self, limit: NonZeroUsize) -> Self {
        self.batch_limit = limit;
        self
    }

    /// How long one publish, and then its acknowledgement, may take before it fails
    /// transiently. Default 5s; positive, at most 1h.
    pub fn with_ack_timeout(mut self, timeout: Duration) -> Self {
        self.ack_timeout = timeout;
        self
    }

    /// Trusts the CA certificates (PEM) in `file` and requires TLS of every server: its
    /// certificate must chain to one of these CAs and name the host connected to. Once any
    /// is given, these files are the only trusted roots (the system's are not added).
    /// May be called more than once. Without one, TLS — asked for by a `tls://` URL, by
    /// [`with_tls_first`](Self::with_tls_first), or by a server that requires it — is
    /// verified against the system's trusted roots. Applies to
    /// [`NatsTransport::connect`](crate::NatsTransport::connect) (a client you build
    /// yourself carries its own TLS settings).
    pub fn with_ca_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.ca_files.push(file.into());
        self
    }

    /// Starts TLS before the server's first message (the server's `handshake_first`
    /// option), instead of upgrading after the plaintext `INFO` the NATS protocol begins
    /// with. TLS is then required. Default off.
    pub fn with_tls_first(mut self, tls_first: bool) -> Self {
        self.tls_first = tls_first;
        self
    }

    /// The transport's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The batch limit.
    pub fn batch_limit(&self) -> NonZeroUsize {
        self.batch_limit
    }

    /// The acknowledgement deadline.
    pub fn ack_timeout(&self) -> Duration {
        self.ack_timeout
    }

    /// The CA files TLS verifies servers against (empty: the system's roots).
    pub fn ca_files(&self) -> &[PathBuf] {
        &self.ca_files
    }

    /// Whether TLS starts before the server's first message.
    pub fn tls_first(&self) -> bool {
        self.tls_first
    }

    /// Whether every connection must be TLS, whatever the URL's scheme says.
    pub(crate) fn requires_tls(&self) -> bool {
        self.tls_first || !self.ca_files.is_empty()
    }

    /// The first option set that only [`NatsTransport::connect`](crate::NatsTransport::connect)
    /// can apply, if any.
    pub(crate) fn connecting_field(&self) -> Option<&'static str> {
        if !self.ca_files.is_empty() {
            Some("ca_file")
        } else if self.tls_first {
            Some("tls_first")
        } else {
            None
        }
    }

    /// Checks every field, naming the first one refused.
    pub(crate) fn validate(&self) -> Result<(), OptionError> {
        if self.name.trim().is_empty() {
            return Err(OptionError { field: "name", problem: "is empty".to_owned() });
        }
        if self.ack_timeout.is_zero() || self.ack_timeout > MAX_ACK_TIMEOUT {
            return Err(OptionError {
                field: "ack_timeout",
                problem: format!("is {:?}; it must be positive and at most 1h", self.ack_timeout),
            });
        }
        Ok(())
    }
}

/// A [`NatsOptions`] field out of range, a server URL that does not parse, or a CA file
/// that cannot be used. A server URL is shown only redacted: user info and secret query
/// values read `***`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NATS transport option `{field}` {problem}")]
pub struct OptionError {
    field: &'static str,
    problem: String,
}

impl OptionError {
    pub(crate) fn new(field: &'static str, problem: String) -> Self {
        OptionError { field, problem }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_fields_are_named() {
        NatsOptions::default().validate().unwrap();
        let zero = NatsOptions::default().with_ack_timeout(Duration::ZERO).validate().unwrap_err();
        assert_eq!(
            zero.to_string(),
            "NATS transport option `ack_timeout` is 0ns; it must be positive and at most 1h"
        );
        let blank = NatsOptions::default().with_name(" ").validate().unwrap_err();
        assert_eq!(blank.to_string(), "NATS transport option `name` is empty");
    }
}
