//! What one policy pass did.

use std::fmt;

use relayer_core::DeadLetterType;

/// What one dead-letter policy pass did, in total and per message type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterReport {
    /// Whether this instance led the pass; `false`: another instance leads.
    pub led: bool,
    /// Dead letters moved back where they came from (DLP-3).
    pub redriven: u64,
    /// Dead letters deleted.
    pub expired: u64,
    /// Dead letters past their redrive window, left in place (DLP-5).
    pub stuck: u64,
    /// Move and delete statements run.
    pub batches: u32,
    /// The host began shutting down before every type was done; the next pass carries on.
    pub stopped_early: bool,
    /// Under a lease: a batch found the lease no longer this pass's (another instance took
    /// it over, it lapsed, or a contender held its row at that instant), moved nothing, and
    /// the pass stopped there (LDR-6). The next pass settles who leads.
    pub fenced_off: bool,
    /// Per message type with a policy, in the set's order.
    pub types: Vec<TypeReport>,
}

/// What a pass did for one message type.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TypeReport {
    /// The message type.
    pub message_type: DeadLetterType,
    /// Dead letters redriven.
    pub redriven: u64,
    /// Dead letters expired.
    pub expired: u64,
    /// Dead letters past `give_up_after`, left in place.
    pub stuck: u64,
}

impl TypeReport {
    pub(crate) fn new(message_type: DeadLetterType) -> Self {
        TypeReport { message_type, redriven: 0, expired: 0, stuck: 0 }
    }
}

impl DeadLetterReport {
    pub(crate) fn add(&mut self, report: TypeReport) {
        self.redriven += report.redriven;
        self.expired += report.expired;
        self.stuck += report.stuck;
        self.types.push(report);
    }
}

impl fmt::Display for DeadLetterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "redriven={} expired={} stuck={} batches={}",
            self.redriven, self.expired, self.stuck, self.batches
        )?;
        if self.stopped_early {
            f.write_str(" stopped_early")?;
        }
        if self.fenced_off {
            f.write_str(" fenced_off")?;
        }
        Ok(())
    }
}
