//! One envelope as a JetStream publish: id, body, headers and creation context.

use std::str::FromStr;

use async_nats::jetstream::message::PublishMessage;
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use relayer_core::context_headers::{context_headers, is_context_header};
use relayer_core::{Envelope, TransportError};

/// The publish for `envelope`: `Nats-Msg-Id` = message id, the caller's headers, then the
/// creation context. A header NATS cannot carry (a value with a line break, say) is a
/// permanent failure of that message, naming the header.
pub(crate) fn publish_message(envelope: &Envelope) -> Result<PublishMessage, TransportError> {
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
    Ok(PublishMessage::build()
        .payload(envelope.body.clone().into())
        .headers(headers)
        .message_id(envelope.id.to_string()))
}
