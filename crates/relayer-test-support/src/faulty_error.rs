//! The error of a [`FaultyStore`](crate::FaultyStore): the wrapped store's own, or an
//! injected one.

use std::error::Error;
use std::fmt;

use relayer_core::store::StoreError;

use crate::fault::{StoreCall, Transience};

/// An error from a [`FaultyStore`](crate::FaultyStore)'s session: the wrapped store's error,
/// kept as it was, or a fault the test injected, with the transience it was given.
#[derive(Debug)]
#[non_exhaustive]
pub enum FaultyError<E> {
    /// The wrapped store failed on its own.
    Store(E),
    /// An injected failure ([`Fault::fail_before`](crate::Fault::fail_before),
    /// [`Fault::fail_after`](crate::Fault::fail_after)) struck `call`.
    Injected {
        /// The call that failed.
        call: StoreCall,
        /// Whether the failure says a retry may succeed.
        transience: Transience,
    },
    /// The session's connection was killed by an injected fault, at `call` or before it
    /// ([`Fault::kill_before`](crate::Fault::kill_before),
    /// [`Fault::kill_after`](crate::Fault::kill_after)); like a lost connection, transient.
    Killed {
        /// The call that found the connection dead.
        call: StoreCall,
    },
}

impl<E> FaultyError<E> {
    /// The wrapped store's own error, if this is one.
    pub fn store_error(&self) -> Option<&E> {
        match self {
            FaultyError::Store(error) => Some(error),
            FaultyError::Injected { .. } | FaultyError::Killed { .. } => None,
        }
    }

    /// Whether a test injected this failure.
    pub fn is_injected(&self) -> bool {
        !matches!(self, FaultyError::Store(_))
    }
}

impl<E: fmt::Display> fmt::Display for FaultyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultyError::Store(error) => error.fmt(f),
            FaultyError::Injected { call, transience: Transience::Transient } => {
                write!(f, "injected transient failure of {call}")
            }
            FaultyError::Injected { call, transience: Transience::Permanent } => {
                write!(f, "injected permanent failure of {call}")
            }
            FaultyError::Killed { call } => {
                write!(f, "{call} found the session's connection killed by an injected fault")
            }
        }
    }
}

impl<E: Error + 'static> Error for FaultyError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            // Displayed as itself: its causes are this error's causes.
            FaultyError::Store(error) => error.source(),
            FaultyError::Injected { .. } | FaultyError::Killed { .. } => None,
        }
    }
}

impl<E: StoreError> StoreError for FaultyError<E> {
    fn is_transient(&self) -> bool {
        match self {
            FaultyError::Store(error) => error.is_transient(),
            FaultyError::Injected { transience, .. } => *transience == Transience::Transient,
            FaultyError::Killed { .. } => true,
        }
    }

    fn is_conflict(&self) -> bool {
        matches!(self, FaultyError::Store(error) if error.is_conflict())
    }

    fn is_schema_missing(&self) -> bool {
        matches!(self, FaultyError::Store(error) if error.is_schema_missing())
    }
}

#[cfg(test)]
mod tests {
    use relayer_core::error_chain;
    use relayer_core::store::StoreError;

    use super::FaultyError;
    use crate::fault::{StoreCall, Transience};

    #[derive(Debug)]
    struct Refused;

    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("relation does not exist")
        }
    }

    impl std::error::Error for Refused {}

    impl StoreError for Refused {
        fn is_transient(&self) -> bool {
            false
        }
    }

    #[test]
    fn the_store_error_keeps_its_verdict_and_injected_ones_say_their_own() {
        let store: FaultyError<Refused> = FaultyError::Store(Refused);
        assert!(!store.is_transient() && !store.is_injected());
        assert_eq!(error_chain(&store), "relation does not exist");
        let injected: FaultyError<Refused> =
            FaultyError::Injected { call: StoreCall::Renew, transience: Transience::Transient };
        assert!(injected.is_transient() && injected.is_injected());
        assert_eq!(injected.to_string(), "injected transient failure of renew");
        let permanent: FaultyError<Refused> =
            FaultyError::Injected { call: StoreCall::Complete, transience: Transience::Permanent };
        assert!(!permanent.is_transient());
        let killed: FaultyError<Refused> = FaultyError::Killed { call: StoreCall::CompleteLocked };
        assert!(killed.is_transient());
        assert_eq!(
            killed.to_string(),
            "complete_locked found the session's connection killed by an injected fault"
        );
    }
}
