//! [`RabbitMqTransport`]: confirmed, persistent, mandatory publishes.

use std::num::NonZeroUsize;

use lapin::options::BasicPublishOptions;
use lapin::publisher_confirm::{Confirmation, PublisherConfirm};
use relayer_core::transport::{Published, publish_then_await};
use relayer_core::{Envelope, SendOutcome, Transport, TransportError, async_trait};
use tokio::time::{Instant, timeout_at};

use crate::address::Address;
use crate::channels::Channels;
use crate::classify::classify;
use crate::options::{OptionError, RabbitMqOptions};
use crate::properties::properties;
use crate::tls::Security;

/// Publishes to RabbitMQ; see the [crate docs](crate) for the model.
pub struct RabbitMqTransport {
    options: RabbitMqOptions,
    channels: Channels,
}

impl std::fmt::Debug for RabbitMqTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqTransport")
            .field("uri", &self.channels.address())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RabbitMqTransport {
    /// A transport publishing to the broker at `uri`
    /// (`amqp://user:password@host:5672/vhost`, the vhost `/` written `%2f`; a host may be
    /// an IP literal, `[::1]` for IPv6). Nothing is connected yet: the first send
    /// connects, and every send after the connection closed reconnects.
    ///
    /// `amqps://` (port 5671 by default) is TLS, always verified: the broker's certificate
    /// must chain to a CA of [`RabbitMqOptions::with_ca_file`] (else to the system's
    /// trusted roots) and name the URI's host; a broker that does not complete that
    /// handshake is refused, never spoken to in plaintext. No message or `Debug` output
    /// shows the URI's user info or secret query values.
    pub fn new(uri: &str, options: RabbitMqOptions) -> Result<Self, OptionError> {
        options.validate()?;
        let address = Address::parse(uri)?;
        let security = Security::new(address.is_tls(), &options)?;
        let channels = Channels::new(address, security, options.channels().get());
        Ok(RabbitMqTransport { options, channels })
    }

    /// The broker's URI as messages show it: user info and secret query values replaced by
    /// `***`.
    pub fn redacted_uri(&self) -> &str {
        &self.channels.address().redacted
    }

    /// The options this transport runs with.
    pub fn options(&self) -> &RabbitMqOptions {
        &self.options
    }

    fn confirm_missing(&self, routing_key: &str) -> TransportError {
        TransportError::transient(format!(
            "no publisher confirm within {:?} for routing key {routing_key:?}",
            self.options.confirm_timeout()
        ))
    }
}

#[async_trait]
impl Transport for RabbitMqTransport {
    fn name(&self) -> &str {
        self.options.name()
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.options.batch_limit()
    }

    async fn send(&self, routing_key: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let exchange = self.options.exchange();
        // Waiting for a free channel (and reconnecting) has its own deadline, so a busy
        // pool does not eat into the time the broker gets to confirm.
        let mut pooled = self.channels.take(Instant::now() + self.options.confirm_timeout()).await?;
        let deadline = Instant::now() + self.options.confirm_timeout();
        let mandatory = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };

        // Publish the whole batch, then await the confirms together. Any failed publish
        // breaks the batch: lapin fails a publish only when its channel or connection is
        // gone, and one that timed out leaves the channel in an unknown state.
        let channel = pooled.channel();
        let publish = |envelope| async move {
            let properties = match properties(envelope, routing_key) {
                Ok(properties) => properties,
                Err(error) => return Published::Failed(error),
            };
            let publish = channel.basic_publish(exchange, routing_key, mandatory, &envelope.body, properties);
            match timeout_at(deadline, publish).await {
                Ok(Ok(confirm)) => Published::Awaiting(confirm),
                Ok(Err(error)) => Published::Broke(classify(exchange, routing_key, error)),
                Err(_) => Published::Broke(self.confirm_missing(routing_key)),
            }
        };
        let await_confirm = |confirm: PublisherConfirm| async move {
            let error = match timeout_at(deadline, confirm).await {
                Ok(Ok(Confirmation::Ack(None))) => return SendOutcome::Accepted,
                Ok(Ok(Confirmation::Ack(Some(returned)))) => TransportError::permanent(format!(
                    "unroutable: exchange {exchange:?} has no queue bound for routing key {routing_key:?} \
                     (returned {} {})",
                    returned.reply_code, returned.reply_text
                )),
                Ok(Ok(Confirmation::Nack(_))) => TransportError::transient(format!(
                    "the broker refused the message (basic.nack) for routing key {routing_key:?}"
                )),
                Ok(Ok(Confirmation::NotRequested)) => {
                    TransportError::transient("the channel was not in confirm mode")
                }
                Ok(Err(error)) => classify(exchange, routing_key, error),
                Err(_) => self.confirm_missing(routing_key),
            };
            SendOutcome::Failed(error)
        };
        let sent = publish_then_await(batch, publish, await_confirm).await;
        if sent.broken.is_none()
            && !sent
                .outcomes
                .iter()
                .any(|outcome| matches!(outcome, SendOutcome::Failed(e) if e.is_transient()))
        {
            // Every confirm arrived: the channel is reusable. Otherwise (and when this send
            // is abandoned at the caller's deadline) it is closed, confirms outstanding.
            pooled.keep();
        }
        Ok(sent.outcomes)
    }
}
