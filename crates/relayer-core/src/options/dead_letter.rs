//! The dead-letter policy worker's options (§11): interval, batch size and lease.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::{Field, OptionsError};
use super::fingerprint::sha1_hex;
use super::limits::{MINUTE, SECOND};
use super::setting_value::SettingValue;
use super::validate::{check_batch_size, check_interval, check_lease};
use super::worker_options::worker_options;
use crate::backoff::PassBackoff;

worker_options! {
    /// Options of the dead-letter policy worker (§11).
    DeadLetterOptions built by DeadLetterOptionsBuilder in section "dead_letter" {
        /// Time between passes (DLP-1). Default 15m; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        interval: Duration = 15 * MINUTE;
        /// Most dead letters one statement moves or deletes. Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// Longest wait between failed passes (RES-2); a value below `interval` means
        /// failed passes wait `interval`. Default 60s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        max_backoff: Duration = 60 * SECOND;
        /// When the pass is led by a lease rather than the default advisory lock (LDR-2,
        /// LDR-5): how long the lease outlasts the wait for the next pass. A pass takes or
        /// renews it for `interval + lease_duration` ([`DeadLetterOptions::lease_hold`]),
        /// so it never lapses between passes, and a crashed leader's work passes on
        /// `lease_duration` after its next pass was due. It also bounds the pass's
        /// statements (RES-5). Default 30s; 1s..=1h. Unused under the advisory lock.
        #[serde(with = "crate::duration::human")]
        lease_duration: Duration = 30 * SECOND;
    }
}

impl DeadLetterOptionsBuilder {
    fn check(&self) -> Result<(), OptionsError> {
        let field = |name| Field::new(DeadLetterOptions::SECTION, name);
        check_interval(field("interval"), self.interval)?;
        check_batch_size(field("batch_size"), self.batch_size)?;
        check_interval(field("max_backoff"), self.max_backoff)?;
        check_lease(field("lease_duration"), self.lease_duration)
    }
}

impl DeadLetterOptions {
    /// How long a lease taken or renewed by a pass lasts, under lease leadership (LDR-2):
    /// `interval + lease_duration`, so it covers the wait between passes with
    /// `lease_duration` to spare, whatever the two are (saturating).
    pub fn lease_hold(&self) -> Duration {
        self.interval().saturating_add(self.lease_duration())
    }

    /// The pass schedule: `interval`, backing off to `max(max_backoff, interval)` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.interval(), self.max_backoff())
    }
}
