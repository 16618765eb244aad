//! [`RabbitMqOptions`]: name, exchange, batch limit, confirm deadline, channel pool size
//! and the CA files `amqps://` verifies the broker against.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use relayer_core::DispatcherOptions;

/// The longest confirm deadline accepted.
const MAX_CONFIRM_TIMEOUT: Duration = Duration::from_secs(3600);

/// How a [`RabbitMqTransport`](crate::RabbitMqTransport) publishes. [`Default`] gives the
/// values documented on each `with_` setter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RabbitMqOptions {
    name: String,
    exchange: String,
    batch_limit: NonZeroUsize,
    confirm_timeout: Duration,
    channels: NonZeroUsize,
    ca_files: Vec<PathBuf>,
}

impl Default for RabbitMqOptions {
    fn default() -> Self {
        RabbitMqOptions {
            name: "rabbitmq".to_owned(),
            exchange: String::new(),
            batch_limit: NonZeroUsize::new(256).expect("256 is not zero"),
            confirm_timeout: Duration::from_secs(5),
            channels: channels_for(&DispatcherOptions::default()),
            ca_files: Vec::new(),
        }
    }
}

impl RabbitMqOptions {
    /// The name messages select the transport by. Default `rabbitmq`.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The exchange messages are published to; their destination is the routing key.
    /// Default `""`, the default exchange (routing key = queue name).
    pub fn with_exchange(mut self, exchange: impl Into<String>) -> Self {
        self.exchange = exchange.into();
        self
    }

    /// The most messages published per send (and awaiting confirms on one channel).
    /// Default 256.
    pub fn with_batch_limit(mut self, limit: NonZeroUsize) -> Self {
        self.batch_limit = limit;
        self
    }

    /// How long one send — taking a channel, publishing, and every confirm — may take
    /// before what is unconfirmed fails transiently. Default 5s; positive, at most 1h.
    pub fn with_confirm_timeout(mut self, timeout: Duration) -> Self {
        self.confirm_timeout = timeout;
        self
    }

    /// Channels in the pool: sends that may run at once. Default: sized for the default
    /// dispatcher, as [`with_channels_for`](Self::with_channels_for) does (4).
    pub fn with_channels(mut self, channels: NonZeroUsize) -> Self {
        self.channels = channels;
        self
    }

    /// Sizes the channel pool for a dispatcher running with `dispatcher`: one channel for
    /// each of its `concurrency` unordered loops, one for its ordered-lanes loop, and one
    /// for a recovery sweeper sending through the same transport. A pass that claims rows
    /// for several routing keys sends to them side by side, so a pool this size can still
    /// make one of those sends wait for a channel; raise it with
    /// [`with_channels`](Self::with_channels) when messages fan out over many keys.
    pub fn with_channels_for(self, dispatcher: &DispatcherOptions) -> Self {
        self.with_channels(channels_for(dispatcher))
    }

    /// Trusts the CA certificates (PEM) in `file` for `amqps://`: the broker's certificate
    /// must chain to one of them and name the URI's host. Once any is given, these files
    /// are the only trusted roots (the system's are not added); without one, `amqps`
    /// verifies against the system's trusted roots. May be called more than once. A CA
    /// file under a plain `amqp://` URI is refused: TLS is never optional once asked for.
    pub fn with_ca_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.ca_files.push(file.into());
        self
    }

    /// The transport's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The exchange.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The batch limit.
    pub fn batch_limit(&self) -> NonZeroUsize {
        self.batch_limit
    }

    /// The confirm deadline of one send.
    pub fn confirm_timeout(&self) -> Duration {
        self.confirm_timeout
    }

    /// The channel pool's size.
    pub fn channels(&self) -> NonZeroUsize {
        self.channels
    }

    /// The CA files `amqps` verifies the broker against (empty: the system's roots).
    pub fn ca_files(&self) -> &[PathBuf] {
        &self.ca_files
    }

    /// Checks every field, naming the first one refused.
    pub(crate) fn validate(&self) -> Result<(), OptionError> {
        if self.name.trim().is_empty() {
            return Err(OptionError { field: "name", problem: "is empty".to_owned() });
        }
        if self.exchange.len() > 255 {
            return Err(OptionError {
                field: "exchange",
                problem: format!("is {} bytes long; AMQP allows 255", self.exchange.len()),
            });
        }
        if self.confirm_timeout.is_zero() || self.confirm_timeout > MAX_CONFIRM_TIMEOUT {
            return Err(OptionError {
                field: "confirm_timeout",
                problem: format!("is {:?}; it must be positive and at most 1h", self.confirm_timeout),
            });
        }
        Ok(())
    }
}

/// The pool that serves `dispatcher`'s loops and one sweeper at once.
fn channels_for(dispatcher: &DispatcherOptions) -> NonZeroUsize {
    let loops = usize::try_from(dispatcher.concurrency()).unwrap_or(usize::MAX);
    NonZeroUsize::new(loops.saturating_add(2)).expect("loops + 2 is not zero")
}

/// A [`RabbitMqOptions`] field out of range, or an address that is not an AMQP URI.
///
/// Its message shows the broker URI only redacted: user info and secret query values
/// (`token`, `auth`, `password`, …) are replaced by `***`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("RabbitMQ transport option `{field}` {problem}")]
pub struct OptionError {
    pub(crate) field: &'static str,
    pub(crate) problem: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_fields_are_named() {
        RabbitMqOptions::default().validate().unwrap();
        let zero = RabbitMqOptions::default().with_confirm_timeout(Duration::ZERO).validate().unwrap_err();
        assert_eq!(
            zero.to_string(),
            "RabbitMQ transport option `confirm_timeout` is 0ns; it must be positive and at most 1h"
        );
        let long = RabbitMqOptions::default().with_exchange("x".repeat(256)).validate().unwrap_err();
        assert_eq!(
            long.to_string(),
            "RabbitMQ transport option `exchange` is 256 bytes long; AMQP allows 255"
        );
    }

    #[test]
    fn the_pool_is_sized_for_the_dispatchers_loops_and_a_sweeper() {
        assert_eq!(RabbitMqOptions::default().channels().get(), 4, "2 loops, lanes, a sweeper");
        let eight = DispatcherOptions::builder().concurrency(8).build().unwrap();
        assert_eq!(RabbitMqOptions::default().with_channels_for(&eight).channels().get(), 10);
    }
}
