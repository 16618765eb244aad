//! What a failed JetStream publish means for a retry (TRN-2).

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::{self, ErrorCode};
use relayer_core::TransportError;

/// The stream's refusals that sending the same message again cannot change: the message is
/// larger than the stream takes, the stream is gone or sealed, JetStream is off, the
/// message's own `Nats-Expected-*` or `Nats-TTL` headers do not fit the stream.
const PERMANENT_REFUSALS: [ErrorCode; 8] = [
    ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
    ErrorCode::STREAM_NOT_FOUND,
    ErrorCode::STREAM_SEALED,
    ErrorCode::STREAM_NOT_MATCH,
    ErrorCode::JETSTREAM_NOT_ENABLED,
    ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT,
    ErrorCode::MESSAGE_TTL_INVALID,
    ErrorCode::MESSAGE_TTL_DISABLED,
];

/// Classifies a failed publish or acknowledgement wait for `subject`.
///
/// Permanent: no stream captures the subject (the server answered "no responders"), the
/// message is larger than the server accepts, the subject is not one a message can be
/// published to, or the stream refused the message for good (too large for the stream,
/// sealed, gone, its expectations unmet; see [`PERMANENT_REFUSALS`]) — sending it again
/// cannot change any of those. Transient: no acknowledgement in time, a lost connection,
/// too many acks in flight, and any other refusal by the stream (it may be full now and not
/// later, or electing a leader).
pub(crate) fn classify(subject: &str, error: PublishError) -> TransportError {
    let what = match error.kind() {
        PublishErrorKind::StreamNotFound => {
            return TransportError::permanent(format!(
                "no JetStream stream captures subject {subject:?} (no responders)"
            ))
            .with_source(error);
        }
        PublishErrorKind::MaxPayloadExceeded => {
            return TransportError::permanent(format!("message too large for subject {subject:?}"))
                .with_source(error);
        }
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            return TransportError::permanent(format!(
                "the stream refused the message on subject {subject:?}: its expectation is unmet"
            ))
            .with_source(error);
        }
        PublishErrorKind::TimedOut => "no acknowledgement in time",
        PublishErrorKind::BrokenPipe => "connection lost before the acknowledgement",
        PublishErrorKind::Other => match refusal(&error) {
            Some(code) if PERMANENT_REFUSALS.contains(&code) => {
                return TransportError::permanent(format!(
                    "the stream refused the message on subject {subject:?} (JetStream error {})",
                    code.0
                ))
                .with_source(error);
            }
            Some(_) => "the stream refused the message",
            None if invalid_subject(&error) => {
                return TransportError::permanent(format!("invalid NATS subject {subject:?}"))
                    .with_source(error);
            }
            None => "publish failed",
        },
        _ => "publish failed",
    };
    TransportError::transient(format!("{what} for subject {subject:?}")).with_source(error)
}

/// The JetStream error code of a refusal the stream answered with, if that is the error.
fn refusal(error: &PublishError) -> Option<ErrorCode> {
    let source = std::error::Error::source(error)?;
    source.downcast_ref::<jetstream::Error>().map(jetstream::Error::error_code)
}

/// Whether the client refused the subject before publishing (its own check, stricter on
/// control characters than [`subject_problem`](crate::transport)).
fn invalid_subject(error: &PublishError) -> bool {
    std::error::Error::source(error)
        .is_some_and(|source| source.downcast_ref::<async_nats::subject::SubjectError>().is_some())
}

/// Whether a failure is about the connection, so the rest of its batch would fail the same
/// way: those messages are not published at all.
pub(crate) fn fails_the_connection(error: &PublishError) -> bool {
    matches!(error.kind(), PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal as the stream sends it in its acknowledgement.
    fn refused(code: u64) -> PublishError {
        let error: jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": 400, "err_code": code, "description": "refused"
        }))
        .unwrap();
        PublishError::with_source(PublishErrorKind::Other, error)
    }

    #[test]
    fn missing_stream_and_oversize_are_permanent_timeouts_transient_trn_2() {
        let permanent = [
            PublishErrorKind::StreamNotFound,
            PublishErrorKind::MaxPayloadExceeded,
            PublishErrorKind::WrongLastMessageId,
            PublishErrorKind::WrongLastSequence,
        ];
        for kind in permanent {
            assert!(!classify("s", PublishError::new(kind)).is_transient(), "{kind:?}");
        }
        let transient = [
            PublishErrorKind::TimedOut,
            PublishErrorKind::BrokenPipe,
            PublishErrorKind::MaxAckPending,
            PublishErrorKind::Other,
        ];
        for kind in transient {
            assert!(classify("s", PublishError::new(kind)).is_transient(), "{kind:?}");
        }
        let error = classify("orders", PublishError::new(PublishErrorKind::StreamNotFound));
        assert_eq!(
            error.chain(),
            "permanent send failure: no JetStream stream captures subject \"orders\" (no responders): \
             no stream found for given subject"
        );
    }

    #[test]
    fn the_streams_refusals_are_permanent_only_when_a_retry_cannot_change_them_trn_2() {
        for code in PERMANENT_REFUSALS {
            let error = classify("s", refused(code.0));
            assert!(!error.is_transient(), "{code:?}");
            assert!(error.to_string().contains(&format!("JetStream error {}", code.0)), "{error}");
        }
        // Full now, maybe not later; a leader election in a cluster.
        for code in [ErrorCode::STREAM_STORE_FAILED, ErrorCode::CLUSTER_NOT_AVAILABLE] {
            assert!(classify("s", refused(code.0)).is_transient(), "{code:?}");
        }
        let subject = PublishError::with_source(
            PublishErrorKind::Other,
            async_nats::subject::SubjectError::InvalidFormat,
        );
        assert!(!classify("a\u{7}b", subject).is_transient());
    }
}
