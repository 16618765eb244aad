//! One envelope as a JetStream publish: id, body, headers and creation context.

use std::str::FromStr;

use async_nats::jetstream::message::PublishMessage;
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use relayer_core::context_headers::{context_headers, is_context_header};
use relayer_core::{Envelope, TransportError};

/// The header JetStream deduplicates by.
const MESSAGE_ID: &str = "Nats-Msg-Id";

/// The publish for `envelope`: its body and [`headers`].
pub(crate) fn publish_message(envelope: &Envelope) -> Result<PublishMessage, TransportError> {
    Ok(PublishMessage::build().payload(envelope.body.clone().into()).headers(headers(envelope)?))
}

/// The headers of `envelope`'s publish: the caller's headers, then the creation context,
/// then `Nats-Msg-Id` = message id (each replacing a caller header of the same name). A
/// header NATS cannot carry (a value with a line break, say) is a permanent failure of
/// that message, naming the header.
pub(crate) fn headers(envelope: &Envelope) -> Result<HeaderMap, TransportError> {
    let mut headers = HeaderMap::new();
    let mut insert = |name: &str, value: &str| {
        let refused = |problem: String| {
            TransportError::permanent(format!(
                "message {}: header {name:?} cannot travel as a NATS header: {problem}",
                envelope.id
            ))
        };
        let header = HeaderName::from_str(name).map_err(|e| refused(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| refused(e.to_string()))?;
        headers.insert(header, value);
        Ok::<(), TransportError>(())
    };
    for (name, value) in envelope.headers.iter().filter(|(name, _)| !is_context_header(name)) {
        insert(name, value)?;
    }
    for (name, value) in context_headers(envelope) {
        insert(name, &value)?;
    }
    insert(MESSAGE_ID, &envelope.id.to_string())?;
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use relayer_core::{Headers, MessageId, Timestamp};

    fn value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).map(HeaderValue::as_str)
    }

    #[test]
    fn the_id_and_the_creation_context_override_caller_headers_of_the_same_name_swp_5() {
        let mut caller = Headers::new();
        caller.insert("content-type".to_owned(), "application/json".to_owned());
        caller.insert("Nats-Msg-Id".to_owned(), "forged".to_owned());
        caller.insert("relayer-lane".to_owned(), "forged".to_owned());
        let envelope = Envelope {
            id: MessageId::new(),
            body: b"{}".to_vec(),
            headers: caller,
            created_at: Timestamp::from_micros(1),
            trace_context: Some("00-trace-01".to_owned()),
            lane: Some("order-7".to_owned()),
            attempts: 3,
        };
        let message = headers(&envelope).unwrap();
        assert_eq!(value(&message, "Nats-Msg-Id"), Some(envelope.id.to_string().as_str()));
        assert_eq!(value(&message, "content-type"), Some("application/json"));
        assert_eq!(value(&message, "relayer-created-at"), Some("1970-01-01T00:00:00.000001Z"));
        assert_eq!(value(&message, "relayer-trace-context"), Some("00-trace-01"));
        assert_eq!(value(&message, "relayer-lane"), Some("order-7"));

        let mut broken = envelope;
        broken.headers.insert("x-note".to_owned(), "two\r\nlines".to_owned());
        let error = headers(&broken).unwrap_err();
        assert!(!error.is_transient() && error.to_string().contains("\"x-note\""), "{error}");
    }
}
