//! What a failed AMQP publish means for a retry (TRN-2).

use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::{Error, ErrorKind};
use relayer_core::TransportError;

/// Classifies a lapin error met while publishing to `exchange`/`routing_key`.
///
/// Permanent: the broker refused the publish for a reason a retry cannot change — the
/// exchange does not exist (404), access is refused (403), the message is too large (311)
/// or has no route (312). Transient: everything else (a closed connection or channel,
/// I/O, a hard protocol error that closed the connection).
pub(crate) fn classify(exchange: &str, routing_key: &str, error: Error) -> TransportError {
    let what = format!("publish to exchange {exchange:?} with routing key {routing_key:?}");
    let permanent = match error.kind() {
        ErrorKind::ProtocolError(amqp) => matches!(
            amqp.kind(),
            AMQPErrorKind::Soft(
                AMQPSoftError::NOTFOUND
                    | AMQPSoftError::ACCESSREFUSED
                    | AMQPSoftError::CONTENTTOOLARGE
                    | AMQPSoftError::NOROUTE
            )
        ),
        _ => false,
    };
    if permanent {
        TransportError::permanent(what).with_source(error)
    } else {
        TransportError::transient(what).with_source(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::protocol::{AMQPError, AMQPHardError};

    fn protocol(kind: AMQPErrorKind) -> Error {
        ErrorKind::ProtocolError(AMQPError::new(kind, "refused".into())).into()
    }

    #[test]
    fn refusals_are_permanent_lost_connections_transient_trn_2() {
        assert!(!classify("x", "k", protocol(AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))).is_transient());
        assert!(
            !classify("x", "k", protocol(AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED))).is_transient()
        );
        assert!(
            classify("x", "k", protocol(AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED))).is_transient()
        );
        let io: Error = ErrorKind::IOError(std::sync::Arc::new(std::io::Error::other("reset"))).into();
        let error = classify("orders", "created", io);
        assert!(error.is_transient());
        assert!(
            error.chain().starts_with(
                "transient send failure: publish to exchange \"orders\" with routing key \"created\": "
            ),
            "{}",
            error.chain()
        );
    }
}
