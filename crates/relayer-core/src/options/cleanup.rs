//! Retention cleanup's options (§8): batch size, interval, the retentions of the dead and
//! inbox tables, lease and pass budget.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::{Field, OptionsError};
use super::fingerprint::sha1_hex;
use super::limits::{DAY, MINUTE, SECOND};
use super::setting_value::SettingValue;
use super::validate::{check_batch_size, check_greater, check_interval, check_lease, check_retention};
use super::worker_options::worker_options;
use crate::backoff::PassBackoff;
use crate::duration::Retention;
use crate::retention::RetentionTable;

worker_options! {
    /// Options of retention cleanup (§8).
    CleanupOptions built by CleanupOptionsBuilder in section "cleanup" {
        /// Most rows one delete statement removes (RET-2). Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// Time between passes (RET-4). Default 1m; positive, and shorter than
        /// `lease_duration` (so under 1h).
        #[serde(with = "crate::duration::human")]
        cleanup_interval: Duration = MINUTE;
        /// How long dead rows are kept after `failed_at` (RET-2). Default 30d; positive
        /// and at most 36500d, or `infinite`.
        dead_retention: Retention = Retention::After(30 * DAY);
        /// How long inbox rows are kept after `processed_at`; must exceed the broker's
        /// redelivery window, since it bounds deduplication (RET-5). Default 7d; positive
        /// and at most 36500d, or `infinite`.
        inbox_retention: Retention = Retention::After(7 * DAY);
        /// How long the cleanup lease lasts after a pass's batch renewed it (LDR-2).
        /// Default 2m; 1s..=1h, and longer than `cleanup_interval` so an idle leader renews
        /// in time.
        #[serde(with = "crate::duration::human")]
        lease_duration: Duration = 2 * MINUTE;
        /// Time after which a pass stops starting new batches (RET-2). Default 10s;
        /// positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        pass_budget: Duration = 10 * SECOND;
        /// Longest wait between failed passes (RES-2). Default 60s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        max_backoff: Duration = 60 * SECOND;
    }
}

impl CleanupOptionsBuilder {
    fn check(&self) -> Result<(), OptionsError> {
        let field = |name| Field::new(CleanupOptions::SECTION, name);
        check_batch_size(field("batch_size"), self.batch_size)?;
        check_interval(field("cleanup_interval"), self.cleanup_interval)?;
        check_retention(field("dead_retention"), self.dead_retention)?;
        check_retention(field("inbox_retention"), self.inbox_retention)?;
        check_lease(field("lease_duration"), self.lease_duration)?;
        check_interval(field("pass_budget"), self.pass_budget)?;
        check_interval(field("max_backoff"), self.max_backoff)?;
        // LDR-2: the lease outlives the wait between passes, or it lapses between them.
        check_greater(
            field("lease_duration"),
            self.lease_duration,
            field("cleanup_interval"),
            self.cleanup_interval,
        )
    }
}

impl CleanupOptions {
    /// The retention of `table`; the outbox is always [`Retention::Keep`] (RET-1).
    pub fn retention(&self, table: RetentionTable) -> Retention {
        match table {
            RetentionTable::Outbox => Retention::Keep,
            RetentionTable::Dead => self.dead_retention(),
            RetentionTable::Inbox => self.inbox_retention(),
        }
    }

    /// The pass schedule: `cleanup_interval`, backing off to `max_backoff` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.cleanup_interval(), self.max_backoff())
    }
}
