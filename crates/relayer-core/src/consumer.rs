//! The queue consumer's options and its pure decisions (QUE-2, QUE-5).
//!
//! # The model
//!
//! A *pump* serves one subscription of relayer's PostgreSQL queue. It receives a batch of
//! visible messages, making each invisible for `visibility_timeout` and stamping it with a
//! receipt token; runs at most `concurrency` handlers at once, each under
//! `handler_deadline`; and settles each message by its receipt: ack deletes it, a requeue
//! makes it visible again later with its handled count raised by one, a dead-letter moves it
//! to the subscription's dead-letter queue. While a handler runs, a heartbeat every
//! [`heartbeat_interval`](ConsumerOptions::heartbeat_interval) pushes its message's
//! visibility forward, so only a dead process lets a message reappear (QUE-5).
//!
//! What happens after a handler fails is decided here, without I/O:
//! [`ConsumerOptions::after_failure`] turns the message's handled count into a requeue
//! delay (doubling from `requeue_delay` up to `max_requeue_delay`) or, once the count
//! reaches `max_handled_count`, a dead-letter (QUE-2).
//!
//! ```
//! use std::time::Duration;
//! use relayer_core::consumer::{AfterFailure, ConsumerOptions};
//!
//! let options = ConsumerOptions::builder().max_handled_count(3).build().unwrap();
//! assert_eq!(options.after_failure(0), AfterFailure::Requeue(Duration::from_secs(1)));
//! assert_eq!(options.after_failure(1), AfterFailure::Requeue(Duration::from_secs(2)));
//! assert_eq!(options.after_failure(2), AfterFailure::DeadLetter);
//! assert_eq!(options.heartbeat_interval(), Duration::from_secs(10));
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::backoff::{PassBackoff, RetryBackoff};
use crate::options::error::{Field, OptionsError};
use crate::options::fingerprint::sha1_hex;
use crate::options::setting_value::SettingValue;
use crate::options::validate::{check_interval, check_lease, check_not_above, check_range};
use crate::options::worker_options::worker_options;

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// The most handlers one pump runs at once.
pub const MAX_CONSUMER_CONCURRENCY: u32 = 1_000;

worker_options! {
    /// Options of one subscription's pump (§10).
    ConsumerOptions built by ConsumerOptionsBuilder in section "consumer" {
        /// Most handler calls running at once (QUE-5): a handler slot is taken when a
        /// call starts and freed when it returns, not when its settlement is written. The
        /// pump also receives up to [`receive_ahead`](ConsumerOptions::receive_ahead)
        /// messages ahead of free slots and keeps up to
        /// [`max_pending_settlements`](ConsumerOptions::max_pending_settlements) outcomes
        /// waiting to be written; all of them are kept invisible by the heartbeat. Default
        /// 16; 1..=1000.
        concurrency: u32 = 16;
        /// Most messages one receive takes (never more than the room left in the
        /// receive-ahead buffer), and the least number of settlements allowed to wait to
        /// be written. Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// How long a received message stays invisible to other receivers; a heartbeat
        /// renews it while its handler runs (QUE-1, QUE-5). Default 30s; 1s..=1h.
        #[serde(with = "crate::duration::human")]
        visibility_timeout: Duration = 30 * SECOND;
        /// How long one handler call may run; past it the call is abandoned and its message
        /// requeued like a failure (QUE-5). Default 5m; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        handler_deadline: Duration = 5 * MINUTE;
        /// Handled count at which a failing message is dead-lettered instead of requeued
        /// (QUE-2). Default 5; 1..=1000000.
        max_handled_count: u32 = 5;
        /// The delay before a failed message is visible again, doubling with each further
        /// failure. Default 1s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        requeue_delay: Duration = SECOND;
        /// The longest requeue delay. Default 5m; at least `requeue_delay`, at most 49d.
        #[serde(with = "crate::duration::human")]
        max_requeue_delay: Duration = 5 * MINUTE;
        /// How often the pump looks for messages when no notification woke it (QUE-1).
        /// Default 1s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        poll_interval: Duration = SECOND;
        /// Longest wait after failed receives in a row (RES-2). Default 60s; positive, at
        /// most 49d.
        #[serde(with = "crate::duration::human")]
        max_backoff: Duration = MINUTE;
        /// How long shutdown waits for handlers in flight; their messages reappear after
        /// the visibility timeout (QUE-5). Default 30s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        shutdown_grace: Duration = 30 * SECOND;
    }
}

impl ConsumerOptionsBuilder {
    fn check(&self) -> Result<(), OptionsError> {
        let field = |name| Field::new(ConsumerOptions::SECTION, name);
        check_range(field("concurrency"), self.concurrency, 1..=MAX_CONSUMER_CONCURRENCY)?;
        check_range(field("batch_size"), self.batch_size, 1..=crate::options::MAX_BATCH_SIZE)?;
        check_lease(field("visibility_timeout"), self.visibility_timeout)?;
        check_interval(field("handler_deadline"), self.handler_deadline)?;
        check_range(field("max_handled_count"), self.max_handled_count, 1..=1_000_000)?;
        check_interval(field("requeue_delay"), self.requeue_delay)?;
        check_interval(field("max_requeue_delay"), self.max_requeue_delay)?;
        check_not_above(
            field("requeue_delay"),
            self.requeue_delay,
            field("max_requeue_delay"),
            self.max_requeue_delay,
        )?;
        check_interval(field("poll_interval"), self.poll_interval)?;
        check_interval(field("max_backoff"), self.max_backoff)?;
        check_interval(field("shutdown_grace"), self.shutdown_grace)
    }
}

/// What becomes of a message whose handler failed, panicked or overran its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Visible again after this delay, its handled count one higher.
    Requeue(Duration),
    /// Its handled count reached the limit: moved to the dead-letter queue.
    DeadLetter,
}

impl ConsumerOptions {
    /// The decision for a message handled `handled_count` times before this failure
    /// (QUE-2): dead-letter once the count after it reaches `max_handled_count`, else
    /// requeue after the doubling delay.
    pub fn after_failure(&self, handled_count: u32) -> AfterFailure {
        let count = handled_count.saturating_add(1);
        if count >= self.max_handled_count() {
            AfterFailure::DeadLetter
        } else {
            AfterFailure::Requeue(self.requeue_backoff().delay_after(count))
        }
    }

    /// The requeue schedule: `requeue_delay` doubling up to `max_requeue_delay`.
    pub fn requeue_backoff(&self) -> RetryBackoff {
        RetryBackoff::from_validated(self.requeue_delay(), self.max_requeue_delay())
    }

    /// The receive schedule: `poll_interval`, backing off to `max_backoff` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.poll_interval(), self.max_backoff())
    }

    /// Most messages received ahead of free handler slots, waiting for one:
    /// `max(concurrency, min(batch_size, 4 × concurrency))`. Enough that a handler that
    /// returns finds its next message without waiting for a receive round trip even when
    /// handlers are several times faster than a receive, and a receive takes a batch
    /// rather than a message or two; bounded by the slots, so a buffered message starts
    /// within [`receive_ahead_rounds`](Self::receive_ahead_rounds) handler deadlines (the
    /// buffer is served first in, first out, and every running call ends by its deadline).
    pub fn receive_ahead(&self) -> u32 {
        let concurrency = self.concurrency();
        concurrency.max(self.batch_size().min(concurrency.saturating_mul(4)))
    }

    /// How many handler deadlines a message received ahead may wait for a slot at most:
    /// `ceil(receive_ahead / concurrency)`, 1 to 4. The heartbeat renews it that long.
    pub fn receive_ahead_rounds(&self) -> u32 {
        self.receive_ahead().div_ceil(self.concurrency())
    }

    /// Most outcomes (ack, requeue, dead-letter) waiting to be written:
    /// `max(batch_size, concurrency)`, so the settle loop's batches can be as large as a
    /// receive's while its statement runs. A handler that returns when this many wait keeps
    /// its slot until there is room, so a pump whose writes fail stops taking messages,
    /// holding at most `concurrency + receive_ahead + max_pending_settlements` of them.
    pub fn max_pending_settlements(&self) -> u32 {
        self.batch_size().max(self.concurrency())
    }

    /// How often the visibility of messages in flight is renewed: a third of the visibility
    /// timeout, so two heartbeats in a row may fail before a message could reappear.
    pub fn heartbeat_interval(&self) -> Duration {
        self.visibility_timeout() / 3
    }
}

/// Why a message was dead-lettered: the `rejection_reason` stamped on it (QUE-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionReason {
    /// Its handler rejected it.
    Rejected,
    /// It failed `max_handled_count` times.
    MaxHandledCount,
    /// Its row could not be decoded; policies never redrive it.
    Unacceptable,
}

impl RejectionReason {
    /// The value of the `rejection_reason` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectionReason::Rejected => "rejected",
            RejectionReason::MaxHandledCount => "max_handled_count",
            RejectionReason::Unacceptable => "unacceptable",
        }
    }
}

impl fmt::Display for RejectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_opt_1() {
        let options = ConsumerOptions::builder().build().unwrap();
        assert_eq!(options, ConsumerOptions::default());
        assert_eq!(options.concurrency(), 16);
        assert_eq!(options.visibility_timeout(), 30 * SECOND);
        assert_eq!(options.heartbeat_interval(), 10 * SECOND);
        assert_eq!(options.max_handled_count(), 5);
        assert_eq!((options.receive_ahead(), options.max_pending_settlements()), (64, 100));
        assert_eq!(options.receive_ahead_rounds(), 4);
        let wide = ConsumerOptions::builder().concurrency(500).batch_size(10).build().unwrap();
        assert_eq!((wide.receive_ahead(), wide.max_pending_settlements()), (500, 500));
        assert_eq!(wide.receive_ahead_rounds(), 1);
        let shape = ConsumerOptions::builder().concurrency(32).batch_size(100).build().unwrap();
        assert_eq!((shape.receive_ahead(), shape.receive_ahead_rounds()), (100, 4));
    }

    #[test]
    fn out_of_range_values_name_their_field_opt_3() {
        let cases = [
            (
                ConsumerOptions::builder().concurrency(0).build(),
                "consumer.concurrency: 0 is out of range (1..=1000)",
            ),
            (
                ConsumerOptions::builder().visibility_timeout(Duration::from_millis(10)).build(),
                "consumer.visibility_timeout: 10ms is out of range (1s..=1h)",
            ),
            (
                ConsumerOptions::builder().handler_deadline(Duration::ZERO).build(),
                "consumer.handler_deadline: 0s must be positive",
            ),
            (
                ConsumerOptions::builder().requeue_delay(10 * MINUTE).build(),
                "consumer.requeue_delay: 10m must not exceed max_requeue_delay (5m)",
            ),
            (
                ConsumerOptions::builder().max_handled_count(0).build(),
                "consumer.max_handled_count: 0 is out of range (1..=1000000)",
            ),
        ];
        for (result, message) in cases {
            assert_eq!(result.unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn options_deserialize_with_human_durations_and_refuse_unknown_keys_opt_2() {
        let options: ConsumerOptions =
            toml::from_str("concurrency = 4\nvisibility_timeout = \"2m\"\nhandler_deadline = \"10m\"")
                .unwrap();
        assert_eq!((options.concurrency(), options.visibility_timeout()), (4, 2 * MINUTE));
        assert!(toml::from_str::<ConsumerOptions>("visibility = \"2m\"").is_err());
        assert!(toml::from_str::<ConsumerOptions>("concurrency = 0").is_err());
    }

    #[test]
    fn a_failure_requeues_with_doubling_delays_until_the_limit_que_2() {
        let options = ConsumerOptions::builder().max_handled_count(4).build().unwrap();
        assert_eq!(options.after_failure(0), AfterFailure::Requeue(SECOND));
        assert_eq!(options.after_failure(1), AfterFailure::Requeue(2 * SECOND));
        assert_eq!(options.after_failure(2), AfterFailure::Requeue(4 * SECOND));
        assert_eq!(options.after_failure(3), AfterFailure::DeadLetter);
        assert_eq!(options.after_failure(u32::MAX), AfterFailure::DeadLetter);
        let once = ConsumerOptions::builder().max_handled_count(1).build().unwrap();
        assert_eq!(once.after_failure(0), AfterFailure::DeadLetter);
    }
}
