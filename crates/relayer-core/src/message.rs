//! The message model (OUT-2) and the checks that refuse a bad message before anything is
//! written (OUT-3).
//!
//! A caller builds a [`NewMessage`]; the writer validates it with [`NewMessage::validate`]
//! and stores it. A transport later receives the same identity, body, headers and creation
//! context as an [`Envelope`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::duration::HumanDuration;
use crate::time::Timestamp;

/// A message's identity, preserved end to end: outbox, transport, broker, inbox.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageId(Uuid);

impl MessageId {
    /// A new time-ordered (UUIDv7) id.
    pub fn new() -> Self {
        MessageId(Uuid::now_v7())
    }

    /// Wraps an existing UUID, e.g. one the caller already uses as an idempotency key.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        MessageId(uuid)
    }

    /// The UUID.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl Default for MessageId {
    fn default() -> Self {
        MessageId::new()
    }
}

impl From<Uuid> for MessageId {
    fn from(uuid: Uuid) -> Self {
        MessageId(uuid)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({})", self.0)
    }
}

/// Message headers: string keys to string values, kept in a stable order.
pub type Headers = BTreeMap<String, String>;

/// The longest header name accepted.
pub const MAX_HEADER_NAME_LEN: usize = 256;

/// The longest lane key accepted, in bytes (OUT-3). A lane key is indexed (the lane
/// index, the lanes table's key) inside the caller's transaction, and PostgreSQL refuses
/// an index entry over about 2.7 kB; 512 bytes leaves room and is ample for any key.
pub const MAX_LANE_KEY_BYTES: usize = 512;

/// The longest destination accepted, in bytes (OUT-3). relayer's queue transport indexes
/// it; brokers limit subjects and routing keys further (AMQP: 255 bytes).
pub const MAX_DESTINATION_BYTES: usize = 1024;

/// The largest header set accepted: the names and values of all headers together, in bytes
/// (OUT-3). Brokers carry headers in one frame (RabbitMQ's default frame is 128 KiB).
pub const MAX_HEADERS_BYTES: usize = 64 * 1024;

/// The longest creation context accepted, in bytes (a W3C `traceparent` is 55).
pub const MAX_TRACE_CONTEXT_BYTES: usize = 4096;

/// The longest [`Delivery::After`] delay accepted: 36500 days (100 years). PostgreSQL's
/// intervals and timestamps end; a longer delay would fail inside the caller's transaction.
pub const MAX_DELIVERY_DELAY: Duration = crate::time::MAX_DATABASE_DURATION;

/// The earliest [`Delivery::At`] accepted: `0001-01-01T00:00:00.000000Z`.
pub const EARLIEST_DELIVERY: Timestamp = Timestamp::from_micros(-62_135_596_800 * 1_000_000);

/// The latest [`Delivery::At`] accepted: `9999-12-31T23:59:59.999999Z`.
pub const LATEST_DELIVERY: Timestamp = Timestamp::from_micros(253_402_300_800 * 1_000_000 - 1);

/// When a message becomes deliverable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// As soon as the writing transaction commits.
    Immediate,
    /// At this instant on the database clock.
    At(Timestamp),
    /// This long after the database's `now()` at enqueue (immune to instance clock skew).
    After(Duration),
}

/// A message to enqueue.
///
/// ```
/// use relayer_core::{NewMessage, Delivery};
/// use std::time::Duration;
/// let message = NewMessage::new("queue", "orders.created", br#"{"id":7}"#.to_vec())
///     .header("content-type", "application/json")
///     .lane("order-7")
///     .delivery(Delivery::After(Duration::from_secs(60)));
/// assert_eq!(message.destination(), "orders.created");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMessage {
    id: MessageId,
    transport: String,
    destination: String,
    body: Vec<u8>,
    headers: Headers,
    delivery: Delivery,
    lane: Option<String>,
    trace_context: Option<String>,
}

impl NewMessage {
    /// A message for `destination` on the transport registered as `transport`, with a new
    /// id, no headers, immediate delivery and no lane.
    pub fn new(
        transport: impl Into<String>,
        destination: impl Into<String>,
        body: impl Into<Vec<u8>>,
    ) -> Self {
        NewMessage {
            id: MessageId::new(),
            transport: transport.into(),
            destination: destination.into(),
            body: body.into(),
            headers: Headers::new(),
            delivery: Delivery::Immediate,
            lane: None,
            trace_context: None,
        }
    }

    /// Uses `id` instead of a generated one.
    pub fn id(mut self, id: impl Into<MessageId>) -> Self {
        self.id = id.into();
        self
    }

    /// Adds or replaces one header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Replaces all headers.
    pub fn headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// Sets when the message becomes deliverable (DSP-4).
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// Puts the message on an ordered lane (LAN-1): delivered strictly after every earlier
    /// message of the same lane. Transactions writing one lane serialize — a second writer
    /// of the lane waits until the first commits or rolls back — so a lane's order is its
    /// commit order; keep such transactions short.
    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    /// Records the creation context (e.g. a W3C `traceparent`) carried to the transport.
    pub fn trace_context(mut self, context: impl Into<String>) -> Self {
        self.trace_context = Some(context.into());
        self
    }

    /// The message id.
    pub fn message_id(&self) -> MessageId {
        self.id
    }
    /// The transport name.
    pub fn transport(&self) -> &str {
        &self.transport
    }
    /// The destination (topic, subject, queue …) within the transport.
    pub fn destination(&self) -> &str {
        &self.destination
    }
    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
    /// The headers.
    pub fn header_map(&self) -> &Headers {
        &self.headers
    }
    /// When the message becomes deliverable.
    pub fn delivery_time(&self) -> Delivery {
        self.delivery
    }
    /// The lane key, if the message is ordered.
    pub fn lane_key(&self) -> Option<&str> {
        self.lane.as_deref()
    }
    /// The creation context, if any.
    pub fn creation_context(&self) -> Option<&str> {
        self.trace_context.as_deref()
    }

    /// Checks the message against OUT-3: a registered transport, a non-empty destination,
    /// plain header names, a body within `max_body_bytes`, sizes and a delivery time
    /// PostgreSQL can store ([`MAX_LANE_KEY_BYTES`], [`MAX_DESTINATION_BYTES`],
    /// [`MAX_HEADERS_BYTES`], [`MAX_TRACE_CONTEXT_BYTES`], [`MAX_DELIVERY_DELAY`],
    /// [`EARLIEST_DELIVERY`]..=[`LATEST_DELIVERY`]), and no text that PostgreSQL cannot
    /// store. Anything that would fail inside the caller's transaction is refused here
    /// instead. `index` is the message's position in its batch, for the error.
    pub fn validate(
        &self,
        index: usize,
        max_body_bytes: usize,
        transport_known: impl Fn(&str) -> bool,
    ) -> Result<(), MessageError> {
        let refuse = |problem| Err(MessageError { index, id: self.id, problem });
        if !transport_known(&self.transport) {
            return refuse(MessageProblem::UnknownTransport(self.transport.clone()));
        }
        if self.destination.trim().is_empty() {
            return refuse(MessageProblem::EmptyDestination);
        }
        if self.body.len() > max_body_bytes {
            return refuse(MessageProblem::BodyTooLarge { size: self.body.len(), limit: max_body_bytes });
        }
        for (name, value) in &self.headers {
            if let Err(reason) = check_header_name(name) {
                return refuse(MessageProblem::InvalidHeaderName { name: name.clone(), reason });
            }
            if value.contains('\0') {
                return refuse(MessageProblem::NulByte { field: format!("header {name:?}") });
            }
        }
        if self.lane.as_deref() == Some("") {
            return refuse(MessageProblem::EmptyLane);
        }
        let headers_bytes = self.headers.iter().map(|(name, value)| name.len() + value.len()).sum();
        for (field, size, limit) in [
            ("destination", self.destination.len(), MAX_DESTINATION_BYTES),
            ("lane key", self.lane.as_ref().map_or(0, String::len), MAX_LANE_KEY_BYTES),
            ("headers", headers_bytes, MAX_HEADERS_BYTES),
            ("trace context", self.trace_context.as_ref().map_or(0, String::len), MAX_TRACE_CONTEXT_BYTES),
        ] {
            if size > limit {
                return refuse(MessageProblem::TooLong { field: field.to_owned(), size, limit });
            }
        }
        match self.delivery {
            Delivery::After(delay) if delay > MAX_DELIVERY_DELAY => {
                return refuse(MessageProblem::DelayTooLong { delay, limit: MAX_DELIVERY_DELAY });
            }
            Delivery::At(at) if !(EARLIEST_DELIVERY..=LATEST_DELIVERY).contains(&at) => {
                return refuse(MessageProblem::DeliveryOutOfRange(at));
            }
            _ => {}
        }
        for (field, text) in [
            ("destination", Some(&self.destination)),
            ("lane", self.lane.as_ref()),
            ("trace context", self.trace_context.as_ref()),
        ] {
            if text.is_some_and(|t| t.contains('\0')) {
                return refuse(MessageProblem::NulByte { field: field.to_owned() });
            }
        }
        Ok(())
    }
}

impl NewMessage {
    /// Checks a message written straight into relayer's queue table (QUE-4): everything
    /// [`validate`](Self::validate) checks, with `queue_transport` the only transport known,
    /// and no lane — ordered messages keep going through the outbox.
    pub fn validate_direct(
        &self,
        index: usize,
        max_body_bytes: usize,
        queue_transport: &str,
    ) -> Result<(), MessageError> {
        self.validate(index, max_body_bytes, |name| name == queue_transport)?;
        if self.lane.is_some() {
            return Err(MessageError { index, id: self.id, problem: MessageProblem::LaneOnDirectQueue });
        }
        Ok(())
    }
}

/// Header names are HTTP-style tokens (RFC 9110 `tchar`), 1 to 256 bytes, so every
/// transport (NATS and AMQP headers included) can carry them unchanged.
fn check_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.len() > MAX_HEADER_NAME_LEN {
        return Err(format!("it is {} bytes long; at most {MAX_HEADER_NAME_LEN} are allowed", name.len()));
    }
    match name.chars().find(|c| !is_token_char(*c)) {
        Some(c) => Err(format!("{c:?} is not allowed; use letters, digits and !#$%&'*+-.^_`|~")),
        None => Ok(()),
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// A message refused at enqueue (OUT-3). Nothing of its batch was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("message {index} of the batch (id {id}) refused: {problem}")]
pub struct MessageError {
    index: usize,
    id: MessageId,
    problem: MessageProblem,
}

impl MessageError {
    /// The position of the refused message in its batch.
    pub fn index(&self) -> usize {
        self.index
    }
    /// The refused message's id.
    pub fn message_id(&self) -> MessageId {
        self.id
    }
    /// What is wrong with it.
    pub fn problem(&self) -> &MessageProblem {
        &self.problem
    }
}

/// What is wrong with a refused message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageProblem {
    /// No transport is registered under this name.
    #[error("no transport is registered as {0:?}")]
    UnknownTransport(String),
    /// The destination is empty or blank.
    #[error("the destination is empty")]
    EmptyDestination,
    /// The body exceeds the configured limit.
    #[error("the body is {size} bytes; the limit is {limit}")]
    BodyTooLarge {
        /// The body's size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A header name is not a plain token.
    #[error("invalid header name {name:?}: {reason}")]
    InvalidHeaderName {
        /// The header name, as given.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// The lane key is empty.
    #[error("the lane key is empty")]
    EmptyLane,
    /// A field is longer than its limit, in bytes.
    #[error("{field}: {size} bytes; the limit is {limit}")]
    TooLong {
        /// Which field: `destination`, `lane key`, `headers` (names and values together)
        /// or `trace context`.
        field: String,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// A [`Delivery::After`] delay is longer than [`MAX_DELIVERY_DELAY`].
    #[error("the delivery delay (Delivery::After) is {}; the limit is {}", HumanDuration(*delay), HumanDuration(*limit))]
    DelayTooLong {
        /// The delay given.
        delay: Duration,
        /// The limit.
        limit: Duration,
    },
    /// A [`Delivery::At`] time is outside [`EARLIEST_DELIVERY`]..=[`LATEST_DELIVERY`].
    #[error("the delivery time (Delivery::At) {0} is outside {EARLIEST_DELIVERY}..={LATEST_DELIVERY}")]
    DeliveryOutOfRange(Timestamp),
    /// A lane on a message written straight into the queue table (QUE-4).
    #[error("a lane key on a direct queue write; ordered messages go through the outbox")]
    LaneOnDirectQueue,
    /// A text field contains a NUL character, which PostgreSQL text cannot store.
    #[error("the {field} contains a NUL character")]
    NulByte {
        /// Which field.
        field: String,
    },
}

/// A message as a transport receives it: the identity, body, headers and creation context
/// the writer stored (SWP-5), plus delivery bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The message id; transports that deduplicate on the broker use it as the key.
    pub id: MessageId,
    /// The body.
    pub body: Vec<u8>,
    /// The headers.
    pub headers: Headers,
    /// When the message was written, on the database clock.
    pub created_at: Timestamp,
    /// The creation context recorded at enqueue, if any.
    pub trace_context: Option<String>,
    /// The lane key, for ordered messages.
    pub lane: Option<String>,
    /// How many earlier sends of this message failed.
    pub attempts: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(name: &str) -> bool {
        name == "queue"
    }

    fn problem(message: &NewMessage) -> MessageProblem {
        message.validate(3, 16, known).unwrap_err().problem().clone()
    }

    #[test]
    fn accepts_a_plain_message() {
        let m = NewMessage::new("queue", "orders", b"{}".to_vec()).header("x-trace_id.v1", "a b");
        m.validate(0, 16, known).unwrap();
    }

    #[test]
    fn refuses_each_out3_case_with_a_clear_error() {
        let base = || NewMessage::new("queue", "orders", b"{}".to_vec());
        assert_eq!(
            problem(&NewMessage::new("nats", "orders", vec![])),
            MessageProblem::UnknownTransport("nats".into())
        );
        assert_eq!(problem(&NewMessage::new("queue", " ", vec![])), MessageProblem::EmptyDestination);
        assert_eq!(
            problem(&NewMessage::new("queue", "o", vec![0; 17])),
            MessageProblem::BodyTooLarge { size: 17, limit: 16 }
        );
        for bad in ["", "a b", "ü", "a:b", "a\"", &"h".repeat(257)] {
            assert!(
                matches!(problem(&base().header(bad, "v")), MessageProblem::InvalidHeaderName { .. }),
                "{bad:?}"
            );
        }
        assert_eq!(problem(&base().lane("")), MessageProblem::EmptyLane);
        assert_eq!(
            problem(&base().header("h", "a\0")),
            MessageProblem::NulByte { field: "header \"h\"".into() }
        );
        assert_eq!(
            problem(&NewMessage::new("queue", "a\0", vec![])),
            MessageProblem::NulByte { field: "destination".into() }
        );
    }

    /// OUT-3: what PostgreSQL would refuse inside the caller's transaction — an interval or
    /// timestamp out of range, an index entry too large — is refused before any write,
    /// naming the field; the largest accepted values are pinned against PostgreSQL in
    /// `relayer-postgres` `tests/limits.rs`.
    #[test]
    fn sizes_and_delivery_times_postgresql_cannot_store_are_refused_out_3() {
        let base = || NewMessage::new("queue", "orders", b"{}".to_vec());
        let limit = usize::MAX;
        let problem = |m: &NewMessage| m.validate(0, limit, known).unwrap_err().problem().clone();
        assert_eq!(
            problem(&base().lane("k".repeat(MAX_LANE_KEY_BYTES + 1))),
            MessageProblem::TooLong { field: "lane key".into(), size: 513, limit: 512 }
        );
        assert_eq!(
            problem(&NewMessage::new("queue", "d".repeat(MAX_DESTINATION_BYTES + 1), vec![])),
            MessageProblem::TooLong { field: "destination".into(), size: 1025, limit: 1024 }
        );
        assert_eq!(
            problem(&base().header("h", "v".repeat(MAX_HEADERS_BYTES))),
            MessageProblem::TooLong { field: "headers".into(), size: 65_537, limit: 65_536 }
        );
        assert!(matches!(
            problem(&base().trace_context("t".repeat(MAX_TRACE_CONTEXT_BYTES + 1))),
            MessageProblem::TooLong { .. }
        ));
        let huge = base().delivery(Delivery::After(Duration::MAX));
        assert!(matches!(problem(&huge), MessageProblem::DelayTooLong { .. }));
        assert_eq!(
            huge.validate(0, limit, known).unwrap_err().problem().to_string(),
            format!(
                "the delivery delay (Delivery::After) is {}; the limit is 36500d",
                HumanDuration(Duration::MAX)
            )
        );
        for at in [Timestamp::MIN, Timestamp::MAX, Timestamp::from_micros(EARLIEST_DELIVERY.as_micros() - 1)]
        {
            assert_eq!(problem(&base().delivery(Delivery::At(at))), MessageProblem::DeliveryOutOfRange(at));
        }
        assert_eq!(
            MessageProblem::DeliveryOutOfRange(Timestamp::MAX).to_string().split(" is outside ").nth(1),
            Some("0001-01-01T00:00:00.000000Z..=9999-12-31T23:59:59.999999Z")
        );
        for edge in [
            base().lane("k".repeat(MAX_LANE_KEY_BYTES)),
            NewMessage::new("queue", "d".repeat(MAX_DESTINATION_BYTES), vec![]),
            base().header("h", "v".repeat(MAX_HEADERS_BYTES - 1)),
            base().delivery(Delivery::After(MAX_DELIVERY_DELAY)),
            base().delivery(Delivery::At(EARLIEST_DELIVERY)),
            base().delivery(Delivery::At(LATEST_DELIVERY)),
        ] {
            edge.validate(0, limit, known).unwrap();
        }
    }

    #[test]
    fn a_direct_queue_write_refuses_lanes_and_other_transports_que_4() {
        let plain = NewMessage::new("queue", "orders", b"{}".to_vec());
        plain.validate_direct(0, 16, "queue").unwrap();
        let laned = plain.lane("a").validate_direct(1, 16, "queue").unwrap_err();
        assert_eq!(laned.problem(), &MessageProblem::LaneOnDirectQueue);
        let other = NewMessage::new("nats", "orders", vec![]).validate_direct(2, 16, "queue").unwrap_err();
        assert_eq!(other.problem(), &MessageProblem::UnknownTransport("nats".into()));
    }

    #[test]
    fn error_names_position_id_and_problem() {
        let id = MessageId::from_uuid(Uuid::nil());
        let err = NewMessage::new("queue", "", vec![]).id(id).validate(3, 16, known).unwrap_err();
        assert_eq!(
            err.to_string(),
            "message 3 of the batch (id 00000000-0000-0000-0000-000000000000) refused: the destination is empty"
        );
    }
}
