//! The transport contract (TRN-1, TRN-2).
//!
//! A transport delivers a batch of envelopes to one destination and says, per message,
//! whether it accepted it. relayer owns everything else: claims, grouping by destination,
//! splitting by [`Transport::batch_limit`], retries, poison handling and fencing. A
//! transport is object-safe so a [`TransportRegistry`] can hold any mix of them by name.
//! A transport for a broker that acknowledges pipelined publishes can build its `send` on
//! [`publish_then_await`] (module [`pipelined`]).
//!
//! ```
//! use std::num::NonZeroUsize;
//! use relayer_core::{async_trait, Envelope, SendOutcome, Transport, TransportError};
//!
//! /// Accepts everything and prints it: the smallest useful transport.
//! struct Stdout;
//!
//! #[async_trait]
//! impl Transport for Stdout {
//!     fn name(&self) -> &str { "stdout" }
//!     fn batch_limit(&self) -> NonZeroUsize { NonZeroUsize::new(64).unwrap() }
//!     async fn send(&self, destination: &str, batch: &[Envelope])
//!         -> Result<Vec<SendOutcome>, TransportError>
//!     {
//!         for message in batch {
//!             println!("{destination}: {}", message.id);
//!         }
//!         Ok(vec![SendOutcome::Accepted; batch.len()])
//!     }
//! }
//! ```

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

use async_trait::async_trait;

use crate::message::Envelope;

pub mod pipelined;

pub use pipelined::{Published, PublishedBatch, publish_then_await};

/// Something that delivers messages to a broker, a queue or any other destination.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// The name messages use to select this transport (`NewMessage::new(name, …)`).
    fn name(&self) -> &str;

    /// The most messages one [`send`](Transport::send) call may carry.
    fn batch_limit(&self) -> NonZeroUsize;

    /// Optional capabilities, declared rather than guessed (TRN-1). relayer reads them
    /// where an operator needs them: the host's start line names each transport with its
    /// declaration, and a send-timeout warning says whether a late acceptance reaches
    /// consumers twice (`deduplicates_by_id`, DSP-7).
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Sends `batch` (never empty, never longer than the batch limit) to `destination`.
    ///
    /// `Ok` carries one outcome per message, in batch order; a length mismatch is treated
    /// as a failure of the whole batch. `Err` means nothing in the batch is known to have
    /// been accepted. A panic is caught and counted as a failed send.
    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError>;
}

/// What a transport can do beyond plain sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The broker drops a second message with the same id inside its window
    /// (NATS `Nats-Msg-Id`, …), so a replayed send after a crash is not seen twice.
    pub deduplicates_by_id: bool,
    /// The broker can hold a message until a future delivery time.
    pub native_scheduling: bool,
}

impl Capabilities {
    /// No optional capability.
    pub const NONE: Capabilities = Capabilities { deduplicates_by_id: false, native_scheduling: false };

    /// Declares broker-side deduplication by message id.
    pub const fn with_deduplication(mut self) -> Self {
        self.deduplicates_by_id = true;
        self
    }

    /// Declares native scheduled delivery.
    pub const fn with_native_scheduling(mut self) -> Self {
        self.native_scheduling = true;
        self
    }
}

/// What an operator reads in the start log and the send-timeout warning:
/// `deduplicates by id, native scheduling`, or `no optional capability`.
impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let declared: Vec<&str> =
            [(self.deduplicates_by_id, "deduplicates by id"), (self.native_scheduling, "native scheduling")]
                .into_iter()
                .filter_map(|(declared, name)| declared.then_some(name))
                .collect();
        if declared.is_empty() {
            f.write_str("no optional capability")
        } else {
            f.write_str(&declared.join(", "))
        }
    }
}

/// The outcome of sending one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// The transport accepted the message; its outbox row is deleted.
    Accepted,
    /// The send failed; the row is retried or dead-lettered according to the error.
    Failed(TransportError),
}

/// Whether a failed send is worth retrying (TRN-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Retry with backoff: a timeout, a broker that is down, a full queue.
    Transient,
    /// Retrying cannot help (a message the broker refuses): counts toward poison at once.
    Permanent,
}

/// A failed send, classified.
#[derive(Clone)]
pub struct TransportError {
    class: ErrorClass,
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

impl TransportError {
    /// A transient failure.
    pub fn transient(message: impl Into<String>) -> Self {
        TransportError { class: ErrorClass::Transient, message: message.into(), source: None }
    }

    /// A permanent failure.
    pub fn permanent(message: impl Into<String>) -> Self {
        TransportError { class: ErrorClass::Permanent, message: message.into(), source: None }
    }

    /// Attaches the underlying cause; it is kept in the error chain and in `last_error`.
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The classification.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// Whether the failure is worth retrying.
    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }

    /// The error and its whole cause chain on one line, as stored in `last_error`.
    pub fn chain(&self) -> String {
        crate::error_chain(self)
    }
}

impl PartialEq for TransportError {
    fn eq(&self, other: &Self) -> bool {
        self.class == other.class && self.chain() == other.chain()
    }
}

impl Eq for TransportError {}

impl fmt::Debug for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportError")
            .field("class", &self.class)
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = match self.class {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
        };
        write!(f, "{class} send failure: {}", self.message)
    }
}

impl StdError for TransportError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn StdError + 'static))
    }
}

/// Transports by name. Built once at start; a message naming an unknown transport is
/// refused at enqueue (OUT-3) and a setup that needs one fails at start (OPT-5).
#[derive(Clone, Default)]
pub struct TransportRegistry {
    transports: BTreeMap<String, Arc<dyn Transport>>,
}

impl TransportRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        TransportRegistry::default()
    }

    /// Registers `transport` under its own name. Two transports with one name are a setup
    /// error, reported with the name.
    pub fn register(&mut self, transport: Arc<dyn Transport>) -> Result<&mut Self, DuplicateTransport> {
        let name = transport.name().to_owned();
        if self.transports.contains_key(&name) {
            return Err(DuplicateTransport(name));
        }
        self.transports.insert(name, transport);
        Ok(self)
    }

    /// Registers `transport`, builder style.
    pub fn with(mut self, transport: Arc<dyn Transport>) -> Result<Self, DuplicateTransport> {
        self.register(transport)?;
        Ok(self)
    }

    /// The transport registered as `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Transport>> {
        self.transports.get(name)
    }

    /// Whether a transport is registered as `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.transports.contains_key(name)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.transports.keys().map(String::as_str)
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.transports.is_empty()
    }
}

impl fmt::Debug for TransportRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// Two transports were registered under one name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a transport named {0:?} is already registered")]
pub struct DuplicateTransport(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    #[async_trait]
    impl Transport for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn batch_limit(&self) -> NonZeroUsize {
            NonZeroUsize::MIN
        }
        async fn send(&self, _: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
            Ok(vec![SendOutcome::Accepted; batch.len()])
        }
    }

    #[test]
    fn registry_refuses_duplicate_names() {
        let mut registry = TransportRegistry::new();
        registry.register(Arc::new(Named("a"))).unwrap();
        let err = registry.register(Arc::new(Named("a"))).err().unwrap();
        assert_eq!(err.to_string(), "a transport named \"a\" is already registered");
        assert!(registry.contains("a") && !registry.contains("b"));
    }

    #[test]
    fn capabilities_read_as_what_they_declare_trn_1() {
        assert_eq!(Capabilities::NONE.to_string(), "no optional capability");
        assert_eq!(Capabilities::NONE.with_deduplication().to_string(), "deduplicates by id");
        assert_eq!(
            Capabilities::NONE.with_native_scheduling().with_deduplication().to_string(),
            "deduplicates by id, native scheduling"
        );
        assert_eq!(
            Named("a").capabilities(),
            Capabilities::NONE,
            "nothing is declared unless a transport says so"
        );
    }

    #[test]
    fn error_chain_includes_causes() {
        let io = std::io::Error::other("connection reset");
        let err = TransportError::transient("publish to orders").with_source(io);
        assert_eq!(err.chain(), "transient send failure: publish to orders: connection reset");
        assert!(err.is_transient());
        assert!(!TransportError::permanent("x").is_transient());
    }
}
