//! The recovery sweeper's options (§6): page size, recovery delay, pass interval and lease.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::{Field, OptionsError};
use super::fingerprint::sha1_hex;
use super::limits::SECOND;
use super::setting_value::SettingValue;
use super::validate::{check_batch_size, check_delay, check_greater, check_interval, check_lease};
use super::worker_options::worker_options;
use crate::backoff::PassBackoff;

worker_options! {
    /// Options of the recovery sweeper (§6).
    SweeperOptions built by SweeperOptionsBuilder in section "sweeper" {
        /// Most rows one pass reads and claims (SWP-2). Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// Age below which rows are left to commit-triggered dispatch (SWP-2). Default 30s;
        /// 0s..=49d.
        #[serde(with = "crate::duration::human")]
        recovery_delay: Duration = 30 * SECOND;
        /// Time between passes, which also bounds how often a row is retried (SWP-6); a
        /// pass that found a full page is followed at once. Default 5s; positive, and
        /// shorter than `lease_duration` (so under 1h).
        #[serde(with = "crate::duration::human")]
        sweep_interval: Duration = 5 * SECOND;
        /// How long the sweep lease lasts after a pass renewed it (LDR-2). Default 30s;
        /// 1s..=1h, and longer than `sweep_interval` so an idle leader renews in time. (No
        /// claim duration: the sweeper's claims are its pass transaction's row locks.)
        #[serde(with = "crate::duration::human")]
        lease_duration: Duration = 30 * SECOND;
        /// Longest wait between failed passes (RES-2). Default 60s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        max_backoff: Duration = 60 * SECOND;
    }
}

impl SweeperOptionsBuilder {
    fn check(&self) -> Result<(), OptionsError> {
        let field = |name| Field::new(SweeperOptions::SECTION, name);
        check_batch_size(field("batch_size"), self.batch_size)?;
        check_delay(field("recovery_delay"), self.recovery_delay)?;
        check_interval(field("sweep_interval"), self.sweep_interval)?;
        check_lease(field("lease_duration"), self.lease_duration)?;
        check_interval(field("max_backoff"), self.max_backoff)?;
        // LDR-2: the lease outlives the wait between passes, or it lapses between them.
        check_greater(
            field("lease_duration"),
            self.lease_duration,
            field("sweep_interval"),
            self.sweep_interval,
        )
    }
}

impl SweeperOptions {
    /// The pass schedule: `sweep_interval`, backing off to `max_backoff` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.sweep_interval(), self.max_backoff())
    }
}
