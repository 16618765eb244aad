//! What a failed JetStream publish means for a retry (TRN-2).

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use relayer_core::TransportError;

/// Classifies a failed publish or acknowledgement wait for `subject`.
///
/// Permanent: no stream captures the subject (the server answered "no responders"), or the
/// message is larger than the server accepts — sending it again cannot change either.
/// Transient: no acknowledgement in time, a lost connection, too many acks in flight, and
/// anything else the stream reports (it may be full now and not later).
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
        PublishErrorKind::TimedOut => "no acknowledgement in time",
        PublishErrorKind::BrokenPipe => "connection lost before the acknowledgement",
        _ => "publish failed",
    };
    TransportError::transient(format!("{what} for subject {subject:?}")).with_source(error)
}

/// Whether a failure is about the connection, so the rest of its batch would fail the same
/// way: those messages are not published at all.
pub(crate) fn fails_the_connection(error: &PublishError) -> bool {
    matches!(error.kind(), PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_stream_and_oversize_are_permanent_timeouts_transient_trn_2() {
        let permanent = [PublishErrorKind::StreamNotFound, PublishErrorKind::MaxPayloadExceeded];
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
}
