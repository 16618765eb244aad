//! One envelope as AMQP properties: message id, persistence, timestamp, headers and
//! creation context.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use relayer_core::context_headers::{context_headers, is_context_header};
use relayer_core::{Envelope, TransportError};

/// `delivery_mode` 2: the broker writes the message to disk in a durable queue.
const PERSISTENT: u8 = 2;

/// AMQP short strings (routing keys, header names) hold at most 255 bytes.
const MAX_SHORT_STRING: usize = 255;

/// The properties of `envelope`'s publish with `routing_key`. A routing key or a header
/// name longer than AMQP allows is a permanent failure of that message, naming it: lapin
/// would write a malformed frame, the broker close the channel, and every retry do the
/// same (the outbox accepts destinations up to 1024 bytes for other transports).
pub(crate) fn properties(envelope: &Envelope, routing_key: &str) -> Result<BasicProperties, TransportError> {
    if routing_key.len() > MAX_SHORT_STRING {
        return Err(TransportError::permanent(format!(
            "message {}: routing key (destination) {:?} is {} bytes long; an AMQP routing key holds {MAX_SHORT_STRING}",
            envelope.id,
            relayer_core::BoundedText::from_external(routing_key, 40).as_str(),
            routing_key.len()
        )));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use relayer_core::{Headers, MessageId, Timestamp};

    fn header(properties: &BasicProperties, name: &str) -> Option<String> {
        match properties.headers().as_ref()?.inner().get(name)? {
            AMQPValue::LongString(value) => Some(value.to_string()),
            other => panic!("header {name} is {other:?}"),
        }
    }

    #[test]
    fn id_persistence_timestamp_headers_and_context_travel_in_the_properties_swp_5() {
        let mut caller = Headers::new();
        caller.insert("content-type".to_owned(), "application/json".to_owned());
        caller.insert("relayer-created-at".to_owned(), "forged".to_owned());
        let envelope = Envelope {
            id: MessageId::new(),
            body: b"{}".to_vec(),
            headers: caller,
            created_at: Timestamp::from_micros(86_400_000_001),
            trace_context: Some("00-trace-01".to_owned()),
            lane: Some("order-7".to_owned()),
            attempts: 1,
        };
        let sent = properties(&envelope, "orders").unwrap();
        assert_eq!(sent.message_id().as_ref().map(ToString::to_string), Some(envelope.id.to_string()));
        assert_eq!(*sent.delivery_mode(), Some(PERSISTENT));
        assert_eq!(*sent.timestamp(), Some(86_400));
        assert_eq!(header(&sent, "content-type").as_deref(), Some("application/json"));
        assert_eq!(header(&sent, "relayer-created-at").as_deref(), Some("1970-01-02T00:00:00.000001Z"));
        assert_eq!(header(&sent, "relayer-trace-context").as_deref(), Some("00-trace-01"));
        assert_eq!(header(&sent, "relayer-lane").as_deref(), Some("order-7"));

        let mut long = envelope;
        long.headers.insert("x".repeat(256), "v".to_owned());
        let error = properties(&long, "orders").unwrap_err();
        assert!(!error.is_transient() && error.to_string().contains("256 bytes long"), "{error}");

        long.headers.clear();
        let error = properties(&long, &"k".repeat(256)).unwrap_err();
        assert!(!error.is_transient(), "{error}");
        assert!(error.to_string().contains("routing key (destination) \"kkk"), "{error}");
        assert!(error.to_string().contains("is 256 bytes long; an AMQP routing key holds 255"), "{error}");
        assert!(properties(&long, &"k".repeat(255)).is_ok());
    }
}
