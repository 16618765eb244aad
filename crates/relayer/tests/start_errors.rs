//! What a failed start says (OPT-5): what failed, where, and why, in the message itself.
#![allow(clippy::unwrap_used)]

use relayer::{Namespace, Relayer, StartError};

/// An unreachable server is named by address, with the operating system's reason, in the
/// error's own message (not only in `source()`), and at once rather than after a timeout.
#[tokio::test]
async fn an_unreachable_database_is_named_with_its_address_and_reason_opt_5() {
    // Port 9 (discard) on loopback: nothing listens there on a test machine.
    let config: relayer::tokio_postgres::Config =
        "host=127.0.0.1 port=9 user=app dbname=orders".parse().unwrap();
    let error = Relayer::builder(config, Namespace::default()).start().await.unwrap_err();
    assert!(matches!(error, StartError::Connect(_)), "{error:?}");
    let text = error.to_string();
    for part in ["could not connect to PostgreSQL", "host=127.0.0.1 port=9 dbname=orders user=app", "refused"]
    {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
    // Each cause once: the message carries the chain, so a chain printer adds nothing.
    assert!(std::error::Error::source(&error).is_none(), "{error:?}");
    let chain = relayer::error_chain(&error);
    assert_eq!(chain, text);
    for part in ["connecting to PostgreSQL at", "refused"] {
        assert_eq!(chain.matches(part).count(), 1, "{part:?} more than once in {chain:?}");
    }
}
