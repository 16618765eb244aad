//! What one sweep pass did.

use std::fmt;

/// What one sweep pass did. Counts are of the pass's committed work: a pass that fails
/// reports nothing, since its claims and completions were rolled back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Whether this instance led the pass; `false`: another instance holds the lease and
    /// nothing was read.
    pub led: bool,
    /// The lease term the pass held (lease leadership only).
    pub term: Option<i64>,
    /// Eligible rows the page read (at most `batch_size`).
    pub scanned: u64,
    /// Rows of the page this pass claimed.
    pub claimed: u64,
    /// Rows of the page it could not claim: a concurrent dispatcher held or had just taken
    /// them (SWP-4).
    pub skipped: u64,
    /// Messages the transports accepted (rows deleted).
    pub sent: u64,
    /// Failed sends (retried later, or moved to the dead table).
    pub failed: u64,
    /// Rows moved to the dead table: poison, or undecodable.
    pub dead: u64,
    /// Claimed rows released unsent because their destination's circuit breaker is open.
    pub deferred: u64,
    /// Transport panics caught (counted in `failed`).
    pub panics: u64,
    /// Locked rows that could not be decoded, moved to the dead table in the pass's
    /// transaction (SPEC §15); counted in `claimed` too.
    pub undecodable: u64,
    /// Batches abandoned at their send deadline (TRN-5; their messages counted in `failed`).
    pub timed_out: u64,
    /// Rows of destinations that tripped in this pass, held back for the cool-down (DSP-6).
    pub held_back: u64,
    /// The page ended the cursor's traversal: the next pass captures a new boundary.
    pub wrapped: bool,
    /// Shutdown began before the page was sent: nothing was claimed or sent.
    pub stopped_early: bool,
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scanned={} claimed={} sent={} failed={} dead={} skipped={}",
            self.scanned, self.claimed, self.sent, self.failed, self.dead, self.skipped
        )?;
        if self.deferred > 0 {
            write!(f, " deferred={}", self.deferred)?;
        }
        if self.undecodable > 0 {
            write!(f, " undecodable={}", self.undecodable)?;
        }
        if self.timed_out > 0 {
            write!(f, " timed_out={}", self.timed_out)?;
        }
        if self.held_back > 0 {
            write!(f, " held_back={}", self.held_back)?;
        }
        if let Some(term) = self.term {
            write!(f, " term={term}")?;
        }
        if self.wrapped {
            f.write_str(" wrapped")?;
        }
        if self.stopped_early {
            f.write_str(" stopped_early")?;
        }
        Ok(())
    }
}
