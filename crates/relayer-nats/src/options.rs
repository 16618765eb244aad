//! [`NatsOptions`]: the transport's name, batch limit and acknowledgement deadline.

use std::num::NonZeroUsize;
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
}

impl Default for NatsOptions {
    fn default() -> Self {
        NatsOptions {
            name: "nats".to_owned(),
            batch_limit: NonZeroUsize::new(256).expect("256 is not zero"),
            ack_timeout: Duration::from_secs(5),
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

/// A [`NatsOptions`] field out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NATS transport option `{field}` {problem}")]
pub struct OptionError {
    field: &'static str,
    problem: String,
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
