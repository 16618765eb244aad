//! What a pass that did not fail did: it led and reports, or another instance leads.

/// What a pass that did not fail did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassOutcome<R> {
    /// This instance led the pass; here is its report.
    Led(R),
    /// Another instance leads: this turn was skipped.
    NotLeader,
}
