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
    /// `cool_down` due at its end instead, counting no attempt, so no claim or page reads
    /// them before the breaker lets a probe through. Returns how many rows were held back.
    /// relayer's store moves them in bounded statements, oldest first; outside a
    /// transaction each commits on its own (the sweeper calls it after its pass commits, so
    /// a large backlog never stretches the pass past its lease).
    async fn hold_back(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, Self::Error>;
}
