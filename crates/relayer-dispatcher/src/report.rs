//! What one dispatch pass did.

use std::fmt;

/// What one pass (or one [`Dispatcher::dispatch_now`](crate::Dispatcher::dispatch_now)) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassReport {
    /// Unordered rows claimed, undecodable ones included.
    pub claimed: u64,
    /// Messages the transports accepted (rows deleted), lanes included.
    pub sent: u64,
    /// Failed sends, lanes included (timeouts and panics included).
    pub failed: u64,
    /// Rows moved to the dead table.
    pub dead: u64,
    /// Claimed rows released unsent: their destination's breaker is open, the pass's
    /// send deadline came before their batch started, or the pass ended with them claimed
    /// ahead of time and unsent (a prefetched batch, DSP-1b).
    pub deferred: u64,
    /// Rows whose claim was taken over before completion: left to the new owner.
    pub fenced_out: u64,
    /// Transport panics caught (each counted as failed sends).
    pub panics: u64,
    /// Batches abandoned at their send deadline (TRN-5; their messages counted as failed).
    pub timed_out: u64,
    /// Due rows of destinations that tripped in this pass, held back for the cool-down
    /// so later claims never read them (DSP-6).
    pub held_back: u64,
    /// Lanes claimed.
    pub lanes: u64,
    /// Lanes parked in this pass.
    pub lanes_parked: u64,
    /// Rows that could not be decoded (SPEC §15): unordered ones moved to the dead table
    /// with the batch's completion, lane heads parked their lane (counted in
    /// `lanes_parked` too).
    pub undecodable: u64,
    /// Whether the unordered work ended on a full batch (claimed and sent, or claimed and
    /// released at the pass's end): more rows may be due at once. Not part of the counts.
    pub(crate) more_due: bool,
}

impl PassReport {
    /// Adds `other`'s counts to this report.
    pub(crate) fn absorb(&mut self, other: &PassReport) {
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.failed += other.failed;
        self.dead += other.dead;
        self.deferred += other.deferred;
        self.fenced_out += other.fenced_out;
        self.panics += other.panics;
        self.timed_out += other.timed_out;
        self.held_back += other.held_back;
        self.lanes += other.lanes;
        self.lanes_parked += other.lanes_parked;
        self.undecodable += other.undecodable;
        self.more_due |= other.more_due;
    }

    /// Whether the pass changed any row's state: sent it, failed it (retry or dead) or
    /// parked its lane. Releasing rows unsent is not moving them.
    pub fn moved_anything(&self) -> bool {
        self.sent + self.failed + self.dead + self.lanes_parked + self.undecodable > 0
    }
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "claimed={} sent={} failed={} dead={} lanes={}",
            self.claimed, self.sent, self.failed, self.dead, self.lanes
        )?;
        for (name, value) in [
            ("deferred", self.deferred),
            ("fenced_out", self.fenced_out),
            ("panics", self.panics),
            ("timed_out", self.timed_out),
            ("held_back", self.held_back),
            ("lanes_parked", self.lanes_parked),
            ("undecodable", self.undecodable),
        ] {
            if value > 0 {
                write!(f, " {name}={value}")?;
            }
        }
        Ok(())
    }
}
