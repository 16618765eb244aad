//! The sweeper's own reasons to abandon a pass, as the cause of a
//! [`WorkerError`](relayer_worker::WorkerError). Both are transient: the pass's work was
//! rolled back and a later pass (this instance's or another's) does it again.

use std::time::Duration;

/// Why a pass gave up although the store answered every call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PassAbandoned {
    /// The lease could not be renewed at the end of the pass: another owner holds it, so
    /// the pass's claims and completions were rolled back instead of committed (LDR-6).
    #[error("the sweeper lease {job:?} (term {term}) was lost during the pass; its work was rolled back")]
    LeaseLost {
        /// The lease job.
        job: String,
        /// The term the pass held.
        term: i64,
    },
    /// The pass ran as long as its lease allows and was rolled back, so it never holds the
    /// lease row, its row locks or an old snapshot past its lease (TRN-5).
    #[error("the pass outlived its lease ({limit:?}) and was rolled back")]
    TimedOut {
        /// How long the pass was allowed.
        limit: Duration,
    },
}
