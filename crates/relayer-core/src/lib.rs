//! relayer's core: the message model, the transport, lock and store traits, and every
//! piece of pure policy (backoff, keyset cursor, eligibility, dead-letter policies, options,
//! identifiers).
//!
//! This crate does no I/O and depends on no database driver. Decisions take the
//! database's `now` as an argument, so they can be tested — and reused in your own
//! tests — without a clock or a server.
#![deny(missing_docs)]

pub mod backoff;
pub mod cursor;
pub mod dead_letter;
pub mod dead_letter_config;
pub mod duration;
pub mod eligibility;
pub mod lock;
pub mod message;
pub mod namespace;
pub mod options;
pub mod store;
pub mod time;
pub mod transport;

pub use async_trait::async_trait;

/// An error and its whole `source()` chain on one line — `error: cause: cause …` — so a log
/// line or a stored `last_error` says what failed and why.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    chain
}
pub use lock::{DistributedLock, LockError, LockErrorKind, LockGuard, advisory_lock_key};
pub use message::{Delivery, Envelope, Headers, MessageError, MessageId, MessageProblem, NewMessage};
pub use namespace::{IdentifierError, IdentifierKind, Namespace};
pub use store::{
    ClaimOutbox, ClaimedMessage, CompleteOutbox, Completion, CompletionColumns, CompletionReport,
    DeleteExpired, HoldLease, LeaderCheck, Lease, LockOutbox, LockedPage, PageRequest, ScanRecovery, Store,
    StoreError,
};
pub use time::Timestamp;
pub use transport::{
    Capabilities, DuplicateTransport, ErrorClass, SendOutcome, Transport, TransportError, TransportRegistry,
};
pub use uuid::Uuid;

// Pure policy: backoff, cursor, durations, eligibility, options.
pub use backoff::{PassBackoff, RetryBackoff};
pub use cursor::{KeysetCursor, PageEnd, PassPlan, RecoveryPage, ScanWindow};
pub use dead_letter::{
    DeadLetterAction, DeadLetterDecision, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRow,
    DeadLetterRule, DeadLetterSetupError, DeadLetterType, SubscriptionQueues,
};
pub use duration::{DurationError, HumanDuration, Retention};
pub use eligibility::{BreakerState, CircuitBreaker, OutboxRow, RetentionTable};
pub use options::{
    CleanupOptions, CleanupOptionsBuilder, DeadLetterOptions, DeadLetterOptionsBuilder, DispatcherOptions,
    DispatcherOptionsBuilder, OptionsError, SweeperOptions, SweeperOptionsBuilder,
};
