//! The dispatcher's options (§4): batch, claim, retries and poison, the circuit breaker,
//! polling, body limit, concurrency, linger and the send deadline.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::{Field, OptionsError};
use super::fingerprint::sha1_hex;
use super::limits::{
    DEFAULT_SEND_TIMEOUT, MAX_BODY_BYTES_LIMIT, MAX_CONCURRENCY, MAX_DISPATCH_MEMORY_BYTES, MAX_LINGER,
    MILLISECOND, MINUTE, SECOND,
};
use super::setting_value::SettingValue;
use super::sweeper::SweeperOptions;
use super::validate::{
    check_at_most_half, check_batch_size, check_interval, check_lease, check_not_above, check_positive,
    check_range,
};
use super::worker_options::worker_options;
use crate::backoff::{PassBackoff, RetryBackoff};
use crate::breaker::CircuitBreaker;
use crate::retry::RetryPolicy;

worker_options! {
    /// Options of the dispatcher: direct, commit-triggered dispatch of unordered rows (§4).
    DispatcherOptions built by DispatcherOptionsBuilder in section "dispatcher" {
        /// Most rows claimed in one statement. Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// How long a claim holds its rows before another dispatcher may take them over
        /// (DSP-1). Default 30s; 1s..=1h.
        #[serde(with = "crate::duration::human")]
        claim_duration: Duration = 30 * SECOND;
        /// Failed attempts after which a row is poison and moves to the dead table; `None`
        /// keeps failing rows pending forever (DSP-5). Default none; at least 1.
        #[serde(deserialize_with = "nonzero::max_attempts", skip_serializing_if = "Option::is_none")]
        max_attempts: Option<NonZeroU32> = None;
        /// Delay before a row's first retry; doubles per failure (DSP-3). Default 1s;
        /// positive, at most 49d and at most `retry_max`.
        #[serde(with = "crate::duration::human")]
        retry_base: Duration = SECOND;
        /// Longest delay between retries of a row. Default 5m; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        retry_max: Duration = 5 * MINUTE;
        /// Consecutive failed sends that trip a destination's circuit breaker (DSP-6).
        /// Default 5; at least 1.
        #[serde(deserialize_with = "nonzero::breaker_threshold")]
        breaker_threshold: NonZeroU32 = NonZeroU32::new(5).expect("5 is not zero");
        /// How long a tripped destination is skipped before one probe. Default 30s;
        /// positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        breaker_cool_down: Duration = 30 * SECOND;
        /// Fallback polling period when no notification arrives (OUT-4). Default 1s;
        /// positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        poll_interval: Duration = SECOND;
        /// Longest wait between failed polls (RES-2). Default 60s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        max_backoff: Duration = 60 * SECOND;
        /// Largest message body accepted at enqueue (OUT-3). Default 1 MiB; 1 byte..=1 GiB
        /// less 1 MiB (`MAX_BODY_BYTES_LIMIT`), and `batch_size × max_body_bytes × 2 ×
        /// (concurrency + 1)` at most 16 GiB (`MAX_DISPATCH_MEMORY_BYTES`).
        max_body_bytes: usize = 1 << 20;
        /// Unordered passes run side by side, each claiming its own batch (claims skip
        /// rows another holds), so one batch's send and commits overlap the next one's.
        /// Ordered lanes run in one more loop beside them. Default 2; 1..=64.
        concurrency: u32 = 2;
        /// How long a loop woken by a commit waits before claiming, so that the commits of
        /// that moment are sent as one batch: fewer statements and transport commits per
        /// message for a few milliseconds of latency. A loop that found a full batch goes
        /// on at once. Default 3ms; 0s..=1s.
        #[serde(with = "crate::duration::human")]
        linger: Duration = 3 * MILLISECOND;
        /// Longest a transport's `send` of one batch may take; a send still running then
        /// is abandoned and fails each message of its batch transiently (TRN-5). Default
        /// none: 10s, or half of `claim_duration` when that is shorter. When set: positive,
        /// at most half of `claim_duration` (and of the sweeper's `lease_duration`), so a
        /// timed-out batch still completes within its claim.
        #[serde(with = "human_option", skip_serializing_if = "Option::is_none")]
        send_timeout: Option<Duration> = None;
    }
}

impl DispatcherOptionsBuilder {
    fn check(&self) -> Result<(), OptionsError> {
        let field = |name| Field::new(DispatcherOptions::SECTION, name);
        check_batch_size(field("batch_size"), self.batch_size)?;
        check_lease(field("claim_duration"), self.claim_duration)?;
        check_interval(field("retry_base"), self.retry_base)?;
        check_interval(field("retry_max"), self.retry_max)?;
        check_not_above(field("retry_base"), self.retry_base, field("retry_max"), self.retry_max)?;
        check_interval(field("breaker_cool_down"), self.breaker_cool_down)?;
        check_interval(field("poll_interval"), self.poll_interval)?;
        check_interval(field("max_backoff"), self.max_backoff)?;
        check_range(field("max_body_bytes"), self.max_body_bytes, 1..=MAX_BODY_BYTES_LIMIT)?;
        check_range(field("concurrency"), self.concurrency, 1..=MAX_CONCURRENCY)?;
        check_range(field("linger"), self.linger, Duration::ZERO..=MAX_LINGER)?;
        let bodies = dispatch_memory(self.batch_size, self.max_body_bytes, self.concurrency);
        if bodies > MAX_DISPATCH_MEMORY_BYTES {
            let problem = format!(
                "with batch_size {} and concurrency {}: the dispatcher could hold {} GiB of bodies \
                 (batch_size × max_body_bytes × 2 batches × (concurrency + 1 lane loop)); the limit is {} GiB \
                 — lower max_body_bytes, batch_size or concurrency",
                self.batch_size,
                self.concurrency,
                bodies.div_ceil(1 << 30),
                MAX_DISPATCH_MEMORY_BYTES >> 30
            );
            return Err(OptionsError::new(field("max_body_bytes"), self.max_body_bytes, problem));
        }
        if let Some(send_timeout) = self.send_timeout {
            check_positive(field("send_timeout"), send_timeout)?;
            check_at_most_half(
                field("send_timeout"),
                send_timeout,
                field("claim_duration"),
                self.claim_duration,
            )?;
        }
        Ok(())
    }
}

/// The most bytes of bodies a dispatcher with these settings holds at once: two batches
/// (one sending, one claimed ahead) of `batch_size` bodies of `max_body_bytes` in each of
/// its `concurrency` unordered loops and its lane loop. Saturating.
pub fn dispatch_memory(batch_size: u32, max_body_bytes: usize, concurrency: u32) -> u64 {
    let body = u64::try_from(max_body_bytes).unwrap_or(u64::MAX);
    u64::from(batch_size).saturating_mul(body).saturating_mul(2).saturating_mul(u64::from(concurrency) + 1)
}

impl DispatcherOptions {
    /// The per-row retry schedule.
    pub fn retry_backoff(&self) -> RetryBackoff {
        RetryBackoff::from_validated(self.retry_base(), self.retry_max())
    }

    /// A closed circuit breaker to clone per destination.
    pub fn circuit_breaker(&self) -> CircuitBreaker {
        CircuitBreaker::from_validated(self.breaker_threshold(), self.breaker_cool_down())
    }

    /// The polling schedule, backing off after failed polls.
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.poll_interval(), self.max_backoff())
    }

    /// The retry and poison policy: `max_attempts` and the retry backoff (DSP-3, DSP-5).
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy { max_attempts: self.max_attempts(), backoff: self.retry_backoff() }
    }

    /// Checks that a recovery sweeper sending with these options fits its lease: a batch's
    /// `send_timeout` at most half of the sweeper's `lease_duration` (TRN-5), so a pass
    /// whose sends time out still completes and renews within its lease.
    /// A `send_timeout` left unset fits any lease: the sweeper bounds its sends by half its
    /// lease anyway.
    pub fn check_fits_sweeper(&self, sweeper: &SweeperOptions) -> Result<(), OptionsError> {
        let Some(send_timeout) = self.send_timeout() else { return Ok(()) };
        check_at_most_half(
            Field::new(Self::SECTION, "send_timeout"),
            send_timeout,
            Field::new(SweeperOptions::SECTION, "lease_duration"),
            sweeper.lease_duration(),
        )
    }

    /// The deadline of one batch's send: `send_timeout`, or when unset 10s or half of
    /// `claim_duration`, whichever is shorter (TRN-5).
    pub fn effective_send_timeout(&self) -> Duration {
        self.send_timeout().unwrap_or_else(|| DEFAULT_SEND_TIMEOUT.min(self.claim_duration() / 2))
    }
}

/// A serde adapter for an optional duration written as a human string, absent when `None`.
mod human_option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::duration::HumanDuration;

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.map(HumanDuration).serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<HumanDuration>::deserialize(deserializer)?.map(|duration| duration.0))
    }
}

/// Serde adapters for `NonZeroU32` settings whose errors name the field, as the
/// builder's do (serde's own message for a zero names neither).
mod nonzero {
    use std::num::NonZeroU32;

    use serde::{Deserialize, Deserializer};

    use super::DispatcherOptions;
    use crate::options::error::Field;
    use crate::options::validate::check_nonzero;

    fn read<'de, D: Deserializer<'de>>(deserializer: D, field: Field) -> Result<NonZeroU32, D::Error> {
        check_nonzero(field, u32::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }

    pub(super) fn max_attempts<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<NonZeroU32>, D::Error> {
        let field = Field::new(DispatcherOptions::SECTION, "max_attempts");
        match Option::<u32>::deserialize(deserializer)? {
            None => Ok(None),
            Some(value) => check_nonzero(field, value).map(Some).map_err(serde::de::Error::custom),
        }
    }

    pub(super) fn breaker_threshold<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<NonZeroU32, D::Error> {
        read(deserializer, Field::new(DispatcherOptions::SECTION, "breaker_threshold"))
    }
}
