//! The one error shape of every worker: what the worker was doing, whether trying again
//! later may succeed, and the cause as a source chain.
//!
//! Workers are generic over their store, so their errors cannot name a driver or a pool
//! type; and the question every caller asks of a failed pass or start is the same — retry
//! or give up? [`WorkerError::is_transient`] answers it: a store error keeps its own
//! [`StoreError::is_transient`] verdict; a missing schema or a bad option is permanent.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;

use relayer_core::store::StoreError;

/// Why a worker's pass or start failed.
///
/// It displays what the worker was doing; the cause is its [`source`](Error::source), so
/// [`relayer_core::error_chain`] prints the whole story on one line.
#[derive(Debug)]
pub struct WorkerError {
    doing: Cow<'static, str>,
    transient: bool,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl WorkerError {
    /// A store call failed while `doing`; transient when the store says so.
    pub fn store<E: StoreError>(doing: impl Into<Cow<'static, str>>, error: E) -> Self {
        WorkerError { doing: doing.into(), transient: error.is_transient(), source: Box::new(error) }
    }

    /// A failure that will repeat until someone changes something (a missing schema, a
    /// refused configuration) while `doing`.
    pub fn permanent(
        doing: impl Into<Cow<'static, str>>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        WorkerError { doing: doing.into(), transient: false, source: source.into() }
    }

    /// A failure that may pass (a timeout, a lost connection) while `doing`.
    pub fn transient(
        doing: impl Into<Cow<'static, str>>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        WorkerError { doing: doing.into(), transient: true, source: source.into() }
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        self.transient
    }

    /// What the worker was doing when it failed.
    pub fn doing(&self) -> &str {
        &self.doing
    }
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.doing)
    }
}

impl Error for WorkerError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::WorkerError;

    #[derive(Debug, thiserror::Error)]
    #[error("connection reset")]
    struct Lost;

    impl relayer_core::store::StoreError for Lost {
        fn is_transient(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_store_error_keeps_its_verdict_and_the_chain_reads_doing_then_cause() {
        let error = WorkerError::store("claiming due rows", Lost);
        assert!(error.is_transient());
        assert_eq!(relayer_core::error_chain(&error), "claiming due rows: connection reset");
        let permanent = WorkerError::permanent("checking the schema", "relayer schema not found");
        assert!(!permanent.is_transient());
        assert_eq!(relayer_core::error_chain(&permanent), "checking the schema: relayer schema not found");
    }
}
