//! What the doctor page shows: findings from a [`DoctorHook`] the host provides (the
//! checks of `relayer doctor`, adapted to [`DoctorFinding`]s), so the console does not depend
//! on where the checks live.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Nothing to do.
    Ok,
    /// Worth a look.
    Warning,
    /// Hurts now.
    Critical,
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoctorFinding {
    /// How much it matters.
    pub severity: Severity,
    /// The check's name.
    pub check: String,
    /// What it found.
    pub summary: String,
    /// What to do about it (empty when nothing).
    pub remedy: String,
}

/// Runs the doctor's checks and returns their findings, or why it could not.
pub type DoctorHook =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Vec<DoctorFinding>, String>> + Send>> + Send + Sync>;
