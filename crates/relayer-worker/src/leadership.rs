//! Who may run a worker's pass (LDR-5): a lease, an advisory lock, or every instance.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use relayer_core::DistributedLock;

/// How a worker decides which replica runs its passes.
#[derive(Clone)]
pub enum Leadership {
    /// A row in the namespace's lease table (LDR-2, LDR-6), taken by each pass on its own
    /// connection. The default for the sweeper and cleanup.
    Lease {
        /// The job the lease is for; replicas of one worker share it (`sweeper`, `cleanup`).
        job: String,
        /// This instance's identity, unique per worker instance (host, pid, a random suffix).
        owner: String,
        /// How long a lease lasts without renewal; expiry restarts after every pass.
        lease_duration: Duration,
    },
    /// A session advisory lock on `resource` (LDR-3), held by the loop across passes and
    /// checked before each one.
    Advisory(Arc<dyn DistributedLock>, String),
    /// No leader: every instance runs every pass (the dispatcher; replicas are kept apart
    /// row by row, by claims and `SKIP LOCKED`).
    EveryInstance,
}

impl Leadership {
    /// A lease on `job` held as `owner` for `lease_duration`.
    pub fn lease(job: impl Into<String>, owner: impl Into<String>, lease_duration: Duration) -> Self {
        Leadership::Lease { job: job.into(), owner: owner.into(), lease_duration }
    }

    /// What the logs call this leadership.
    pub(crate) fn describe(&self) -> String {
        match self {
            Leadership::Lease { job, owner, .. } => format!("lease {job:?} as {owner:?}"),
            Leadership::Advisory(_, resource) => format!("advisory lock {resource:?}"),
            Leadership::EveryInstance => "every instance".to_owned(),
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leadership::Lease { job, owner, lease_duration } => f
                .debug_struct("Lease")
                .field("job", job)
                .field("owner", owner)
                .field("lease_duration", lease_duration)
                .finish(),
            Leadership::Advisory(_, resource) => f.debug_tuple("Advisory").field(resource).finish(),
            Leadership::EveryInstance => f.write_str("EveryInstance"),
        }
    }
}
