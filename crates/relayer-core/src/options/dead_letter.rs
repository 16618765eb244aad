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
        /// Time between passes (DLP-1). Default 15m; positive (under lease leadership also
        /// shorter than `lease_duration`, see [`DeadLetterOptions::check_lease_leadership`]).
        #[serde(with = "crate::duration::human")]
        interval: Duration = 15 * MINUTE;
        /// Most dead letters one statement moves or deletes. Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// Longest wait between failed passes (RES-2); a value below `interval` means
        /// failed passes wait `interval`. Default 60s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        max_backoff: Duration = 60 * SECOND;
        /// How long the pass's lease lasts without renewal, when it is led by a lease rather
        /// than the default advisory lock (LDR-2, LDR-5). Default 30s, so a crashed leader's
        /// lease passes on soon; 1s..=1h. Unused under the advisory lock; under a lease it
        /// must be longer than `interval`, which the host checks once leadership is known.
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
    /// Checks these options fit lease leadership (LDR-2): `lease_duration` longer than
    /// `interval`, or the lease lapses between passes and another instance takes over every
    /// pass. Checked only where a lease is chosen: the default advisory lock uses no lease,
    /// so any interval fits it.
    pub fn check_lease_leadership(&self) -> Result<(), OptionsError> {
        if self.lease_duration() > self.interval() {
            return Ok(());
        }
        let problem = format!(
            "must be greater than dead_letter.interval ({}) when the dead-letter pass is led by a lease \
             (it would lapse between passes); raise lease_duration, lower interval, or lead it by the \
             advisory lock (the default)",
            self.interval().render()
        );
        Err(OptionsError::new(Field::new(Self::SECTION, "lease_duration"), self.lease_duration(), problem))
    }

    /// The pass schedule: `interval`, backing off to `max(max_backoff, interval)` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.interval(), self.max_backoff())
    }
}
