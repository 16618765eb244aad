//! Holding back a tripped destination's rows for its cool-down (DSP-6).

use std::time::Duration;

use async_trait::async_trait;

use super::Store;

/// Holding back the rows of a destination whose circuit breaker just tripped (DSP-6): the
/// dispatcher and the recovery sweeper, once per trip.
///
/// Without it, every claim and recovery page during the cool-down would read the
/// destination's due rows only to release them unsent again.
#[async_trait]
pub trait HoldBackDestination: Store {
    /// Makes the unordered rows of (`transport`, `destination`) that would be due within
    /// `cool_down` due later instead, counting no attempt, so no claim or page reads them
    /// before the breaker lets a probe through. Returns how many rows were held back.
    /// relayer's store moves the oldest rows (a head enough for the probe) to the
    /// cool-down's end and parks the rest a few cool-downs out (DSP-6d), so a probe that
    /// fails again re-holds the head and the rows written since, not the whole backlog;
    /// it moves them in bounded statements, oldest first, and outside a transaction each
    /// commits on its own (the sweeper calls it after its pass commits, so a large backlog
    /// never stretches the pass past its lease).
    async fn hold_back(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, Self::Error>;

    /// The breaker of (`transport`, `destination`) closed (a send was accepted after it
    /// tripped): makes its unordered rows that a hold of `cool_down` parked due again at
    /// once, with its other unclaimed rows waiting out a delay (never before their
    /// delivery time), so a recovered destination's backlog flows without waiting out the
    /// park. Returns how many rows were released.
    async fn release_held(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, Self::Error>;
}
