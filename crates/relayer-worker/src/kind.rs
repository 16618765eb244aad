//! Which worker a loop runs, and the tracing target that follows from it (OBS-1).

use std::fmt;

/// Which worker a loop runs: names its tracing target (`relayer::<worker>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WorkerKind {
    /// Direct and lane dispatch (`relayer::dispatcher`).
    Dispatcher,
    /// Recovery sweeper (`relayer::sweeper`).
    Sweeper,
    /// Retention cleanup (`relayer::cleanup`).
    Cleanup,
    /// Dead-letter policies (`relayer::dead_letter`).
    DeadLetter,
    /// Queue consumer (`relayer::consumer`).
    Consumer,
}

impl WorkerKind {
    /// The worker's name in logs.
    pub const fn name(self) -> &'static str {
        match self {
            WorkerKind::Dispatcher => "dispatcher",
            WorkerKind::Sweeper => "sweeper",
            WorkerKind::Cleanup => "cleanup",
            WorkerKind::DeadLetter => "dead_letter",
            WorkerKind::Consumer => "consumer",
        }
    }
}

impl fmt::Display for WorkerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Expands `$body` with `$target` bound to the worker's tracing target. tracing needs the
/// target as a constant, so each worker gets its own arm.
macro_rules! with_target {
    ($kind:expr, $target:ident => $body:expr) => {
        match $kind {
            $crate::WorkerKind::Dispatcher => {
                const $target: &str = "relayer::dispatcher";
                $body
            }
            $crate::WorkerKind::Sweeper => {
                const $target: &str = "relayer::sweeper";
                $body
            }
            $crate::WorkerKind::Cleanup => {
                const $target: &str = "relayer::cleanup";
                $body
            }
            $crate::WorkerKind::DeadLetter => {
                const $target: &str = "relayer::dead_letter";
                $body
            }
            $crate::WorkerKind::Consumer => {
                const $target: &str = "relayer::consumer";
                $body
            }
        }
    };
}

pub(crate) use with_target;
