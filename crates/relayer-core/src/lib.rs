//! relayer's core: the message model, the transport, lock and store traits, and every
//! piece of pure policy (backoff, keyset cursor, eligibility, retry decisions, circuit
//! breakers, dead-letter policies, options, identifiers).
//!
//! This crate does no I/O and depends on no database driver. Decisions take the
//! database's `now` as an argument, so they can be tested — and reused in your own
//! tests — without a clock or a server.
#![deny(missing_docs)]

pub mod backoff;
pub mod bounded_text;
pub mod breaker;
pub mod consumer;
pub mod context_headers;
pub mod cursor;
pub mod dead_letter;
pub mod dead_letter_config;
pub mod duration;
pub mod eligibility;
pub mod lock;
pub mod message;
pub mod namespace;
pub mod notifications;
pub mod options;
mod panic;
pub mod poison;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod queue_message;
pub mod receive_cursor;
pub mod redact;
pub mod retention;
pub mod retry;
pub mod session;
pub mod store;
#[cfg(test)]
mod test_clock;
pub mod time;
pub mod transport;

pub use async_trait::async_trait;
pub use bounded_text::BoundedText;

/// An error and its whole `source()` chain on one line — `error: cause: cause …` — so a log
/// line or a stored `last_error` says what failed and why.
///
/// One line even when a part spans several: a server error's `DETAIL` and `HINT` lines are
/// joined with `; `, so one failure is one log line.
///
/// Each cause is said once: a cause that the line already ends with, as a whole part after
/// `: ` (an error whose message repeats its source's, as some libraries' errors do), is
/// skipped; a cause that merely ends with the same characters is kept.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = one_line(&error.to_string());
    let mut source = error.source();
    while let Some(cause) = source {
        let text = one_line(&cause.to_string());
        let repeated = chain == text || chain.ends_with(&format!(": {text}"));
        if !repeated {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        source = cause.source();
    }
    chain
}

/// `text` with its lines trimmed and joined by `; `.
fn one_line(text: &str) -> String {
    if !text.contains(['\n', '\r']) {
        return text.to_owned();
    }
    text.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join("; ")
}

pub use lock::{DistributedLock, LockError, LockErrorKind, LockGuard, advisory_lock_key};
pub use message::{Delivery, Envelope, Headers, MessageError, MessageId, MessageProblem, NewMessage};
pub use namespace::{IdentifierError, IdentifierKind, Namespace};
pub use notifications::{Heard, Notifications};
pub use panic::panic_text;
pub use queue_message::{QueueMessage, Receipt, Received, Undecodable};
pub use session::{Session, StoreSource};
pub use store::{
    AdministerLanes, CheckLease, ClaimOutbox, Claimed, ClaimedMessage, CompleteOutbox, Completion,
    CompletionColumns, CompletionReport, DeleteExpired, Enqueued, HoldBackDestination, HoldLease,
    LeaderCheck, Lease, LockOutbox, LockedPage, MoveDeadLetters, PageRequest, ScanRecovery, Store,
    StoreError, UndecodableRow, VerifySchema, WorkLanes,
};
pub use time::Timestamp;
pub use transport::{
    Capabilities, DuplicateTransport, ErrorClass, Published, PublishedBatch, SendOutcome, Transport,
    TransportError, TransportRegistry, publish_then_await,
};
pub use uuid::Uuid;

// Pure policy: backoff, cursor, durations, eligibility, options.
pub use backoff::{PassBackoff, RetryBackoff};
pub use breaker::{BreakerState, CircuitBreaker, CircuitBreakers};
pub use consumer::{AfterFailure, ConsumerOptions, ConsumerOptionsBuilder, RejectionReason};
pub use cursor::{KeysetCursor, PageEnd, PassPlan, RecoveryPage, ScanWindow};
pub use dead_letter::{
    DeadLetterAction, DeadLetterDecision, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRow,
    DeadLetterRule, DeadLetterSetupError, DeadLetterType, SubscriptionQueues, dead_letter_cycle,
};
pub use duration::{DurationError, HumanDuration, Retention};
pub use eligibility::OutboxRow;
pub use options::{
    CleanupOptions, CleanupOptionsBuilder, DeadLetterOptions, DeadLetterOptionsBuilder, DispatcherOptions,
    DispatcherOptionsBuilder, OptionsError, SweeperOptions, SweeperOptionsBuilder,
};
pub use retention::RetentionTable;
pub use retry::{FailureDecision, RetryPolicy, retry_or_bury};

#[cfg(test)]
mod error_chain_tests {
    use super::error_chain;

    #[derive(Debug)]
    struct Server;
    impl std::fmt::Display for Server {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("ERROR: relation \"x\" does not exist\nDETAIL: none\r\nHINT: create it\n")
        }
    }
    impl std::error::Error for Server {}

    #[derive(Debug)]
    struct Pass(Server);
    impl std::fmt::Display for Pass {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("claiming due rows")
        }
    }
    impl std::error::Error for Pass {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// An error whose message already ends with its source's.
    #[derive(Debug)]
    struct Repeating(Pass);
    impl std::fmt::Display for Repeating {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "the sweeper stopped: {}", self.0)
        }
    }
    impl std::error::Error for Repeating {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_the_message_already_ends_with_is_said_once() {
        assert_eq!(
            error_chain(&Repeating(Pass(Server))),
            "the sweeper stopped: claiming due rows: ERROR: relation \"x\" does not exist; DETAIL: none; \
             HINT: create it"
        );
    }

    /// A cause whose text only happens to end the line (`…due rows` / `rows`) is a cause of
    /// its own, and is kept.
    #[derive(Debug)]
    struct Rows;
    impl std::fmt::Display for Rows {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("rows")
        }
    }
    impl std::error::Error for Rows {}

    #[derive(Debug)]
    struct Claiming(Rows);
    impl std::fmt::Display for Claiming {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("claiming due rows")
        }
    }
    impl std::error::Error for Claiming {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_that_only_shares_the_last_characters_is_kept() {
        assert_eq!(error_chain(&Claiming(Rows)), "claiming due rows: rows");
    }

    #[test]
    fn a_multi_line_server_message_becomes_one_line() {
        assert_eq!(
            error_chain(&Pass(Server)),
            "claiming due rows: ERROR: relation \"x\" does not exist; DETAIL: none; HINT: create it"
        );
    }
}
