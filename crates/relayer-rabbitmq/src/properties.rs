//! One envelope as AMQP properties: message id, persistence, timestamp, headers and
//! creation context.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use relayer_core::context_headers::{context_headers, is_context_header};
use relayer_core::{Envelope, TransportError};

/// `delivery_mode` 2: the broker writes the message to disk in a durable queue.
const PERSISTENT: u8 = 2;

/// AMQP short strings (header names) hold at most 255 bytes.
const MAX_SHORT_STRING: usize = 255;

/// The properties of `envelope`'s publish. A header name longer than AMQP allows is a
/// permanent failure of that message, naming the header.
pub(crate) fn properties(envelope: &Envelope) -> Result<BasicProperties, TransportError> {
    let mut headers = FieldTable::default();
    let mut insert = |name: &str, value: &str| {
        if name.len() > MAX_SHORT_STRING {
            return Err(TransportError::permanent(format!(
                "message {}: header {name:?} is {} bytes long; an AMQP header name holds {MAX_SHORT_STRING}",
                envelope.id,
                name.len()
            )));
        }
        headers.insert(ShortString::from(name), AMQPValue::LongString(LongString::from(value)));
        Ok(())
    };
    for (name, value) in envelope.headers.iter().filter(|(name, _)| !is_context_header(name)) {
        insert(name, value)?;
    }
    for (name, value) in context_headers(envelope) {
        insert(name, &value)?;
    }
    let seconds = envelope.created_at.as_micros().div_euclid(1_000_000);
    Ok(BasicProperties::default()
        .with_message_id(ShortString::from(envelope.id.to_string()))
        .with_delivery_mode(PERSISTENT)
        .with_timestamp(u64::try_from(seconds).unwrap_or(0))
        .with_headers(headers))
}
