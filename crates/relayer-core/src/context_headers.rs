//! How a broker transport carries an envelope's creation context (SWP-5) next to its own
//! headers.
//!
//! A broker message has one header map. relayer's shipped broker transports (NATS
//! JetStream, RabbitMQ) put the caller's headers in it as written, then these: when the
//! message was written on the database clock, the creation context recorded at enqueue
//! (a trace context, say), and the lane key of an ordered message. The message id travels
//! in the broker's own id field (`Nats-Msg-Id`, the AMQP `message-id` property), where the
//! broker's deduplication and the receiver's inbox look for it.
//!
//! A caller header with one of these names is replaced by relayer's value: the receiver can
//! trust them. Custom transports may use [`context_headers`] to do the same.
//!
//! ```
//! use relayer_core::context_headers::{CREATED_AT, context_headers};
//! use relayer_core::{Envelope, Headers, MessageId, Timestamp};
//!
//! let envelope = Envelope {
//!     id: MessageId::new(),
//!     body: b"{}".to_vec(),
//!     headers: Headers::new(),
//!     created_at: Timestamp::from_micros(1),
//!     trace_context: None,
//!     lane: None,
//!     attempts: 0,
//! };
//! let headers: Vec<_> = context_headers(&envelope).collect();
//! assert_eq!(headers, [(CREATED_AT, "1970-01-01T00:00:00.000001Z".to_owned())]);
//! ```

use crate::message::Envelope;

/// When the message was written, on the database clock, as RFC 3339 in UTC with
/// microseconds (`2026-12-02T19:13:00.000001Z`).
pub const CREATED_AT: &str = "relayer-created-at";

/// The creation context recorded at enqueue ([`NewMessage::trace_context`](crate::NewMessage::trace_context)),
/// present only when one was recorded.
pub const TRACE_CONTEXT: &str = "relayer-trace-context";

/// The lane key of an ordered message, present only for one.
pub const LANE: &str = "relayer-lane";

/// The creation-context headers of `envelope`, in a fixed order: [`CREATED_AT`], then
/// [`TRACE_CONTEXT`] and [`LANE`] when present.
pub fn context_headers(envelope: &Envelope) -> impl Iterator<Item = (&'static str, String)> + '_ {
    std::iter::once((CREATED_AT, envelope.created_at.to_string()))
        .chain(envelope.trace_context.iter().map(|context| (TRACE_CONTEXT, context.clone())))
        .chain(envelope.lane.iter().map(|lane| (LANE, lane.clone())))
}

/// Whether `name` is one of relayer's creation-context header names (case-insensitive, as
/// header names are compared by most brokers and HTTP).
pub fn is_context_header(name: &str) -> bool {
    [CREATED_AT, TRACE_CONTEXT, LANE].iter().any(|reserved| reserved.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Headers, MessageId, Timestamp};

    #[test]
    fn every_present_part_of_the_context_is_a_header_swp_5() {
        let envelope = Envelope {
            id: MessageId::new(),
            body: Vec::new(),
            headers: Headers::new(),
            created_at: Timestamp::from_micros(86_400_000_001),
            trace_context: Some("00-abc-def-01".to_owned()),
            lane: Some("order-7".to_owned()),
            attempts: 2,
        };
        let headers: Vec<_> = context_headers(&envelope).collect();
        assert_eq!(
            headers,
            [
                (CREATED_AT, "1970-01-02T00:00:00.000001Z".to_owned()),
                (TRACE_CONTEXT, "00-abc-def-01".to_owned()),
                (LANE, "order-7".to_owned()),
            ]
        );
        assert!(is_context_header("Relayer-Lane") && !is_context_header("content-type"));
    }
}
