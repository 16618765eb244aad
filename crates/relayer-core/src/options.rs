//! Worker options: typed, documented, defaulted and validated (OPT-1..OPT-4).
//!
//! Each worker has an options type whose fields are private and read through getters.
//! A value is made only by its builder's `build()` or by serde, and both run the same
//! checks, so an options value that exists is valid: the worker never re-checks it. A
//! refused value yields an [`OptionsError`] naming the field and the value, e.g.
//! `sweeper.batch_size: 0 is out of range (1..=10000)`. In configuration every field is
//! optional and defaults to the reference value, durations are human strings (`"30s"`,
//! `"7d"`), retentions also accept `"infinite"`, and unknown keys are refused. Options
//! serialize back to the same form, and [`fingerprint`](SweeperOptions::fingerprint)
//! condenses them into a stable string so that replicas which disagree can be detected.
//!
//! ```
//! use std::time::Duration;
//! use relayer_core::options::SweeperOptions;
//!
//! let options = SweeperOptions::builder().batch_size(500).build().unwrap();
//! assert_eq!(options.recovery_delay(), Duration::from_secs(30));
//!
//! let error = SweeperOptions::builder().batch_size(0).build().unwrap_err();
//! assert_eq!(error.to_string(), "sweeper.batch_size: 0 is out of range (1..=10000)");
//!
//! let options: SweeperOptions = toml::from_str("sweep_interval = \"10s\"").unwrap();
//! assert_eq!(options.sweep_interval(), Duration::from_secs(10));
//! assert!(toml::from_str::<SweeperOptions>("sweep_intervall = \"10s\"").is_err());
//! ```

use std::fmt;
use std::num::NonZeroU32;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha1::{Digest, Sha1};

use crate::backoff::{PassBackoff, RetryBackoff};
use crate::duration::{HumanDuration, Retention};
use crate::eligibility::{CircuitBreaker, RetentionTable};

/// The largest batch any worker reads or deletes in one statement.
pub const MAX_BATCH_SIZE: u32 = 10_000;

/// The longest interval, backoff, budget or delay: 49 days, just under 2³² milliseconds,
/// beyond which millisecond timers and PostgreSQL's `int4` millisecond settings overflow.
pub const MAX_INTERVAL: Duration = Duration::from_secs(49 * 86_400);

/// The shortest lease or claim duration: anything shorter expires during a normal pass.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// The longest lease or claim duration: after a crash, work waits this long at most.
pub const MAX_LEASE: Duration = Duration::from_secs(3_600);

/// The longest a woken dispatcher loop may wait to gather commits into one batch.
pub const MAX_LINGER: Duration = SECOND;

/// The most unordered pass loops one dispatcher runs side by side.
pub const MAX_CONCURRENCY: u32 = 64;

/// The largest body size limit that may be configured: 1 GiB, PostgreSQL's `bytea` limit.
pub const MAX_BODY_BYTES_LIMIT: usize = 1 << 30;

const MILLISECOND: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

// ---------------------------------------------------------------------------------------
// Errors and shared validators
// ---------------------------------------------------------------------------------------

/// A setting refused because it is out of range. Its message names the field and the
/// value: `sweeper.batch_size: 0 is out of range (1..=10000)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value} {problem}")]
pub struct OptionsError {
    field: String,
    value: String,
    problem: String,
}

impl OptionsError {
    fn new(field: Field, value: impl SettingValue, problem: impl Into<String>) -> Self {
        OptionsError { field: field.to_string(), value: value.render(), problem: problem.into() }
    }

    /// The refused field, e.g. `sweeper.batch_size` (or `after` for a constructor argument).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The refused value as configuration writes it, e.g. `0` or `0s`.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// The name of a setting in errors: `section.name`, or just `name` for a constructor
/// argument.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Field {
    section: &'static str,
    name: &'static str,
}

impl Field {
    pub(crate) const fn new(section: &'static str, name: &'static str) -> Self {
        Field { section, name }
    }

    pub(crate) const fn bare(name: &'static str) -> Self {
        Field { section: "", name }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.section.is_empty() {
            write!(f, "{}.", self.section)?;
        }
        f.write_str(self.name)
    }
}

/// A setting's value as configuration writes it, for errors and fingerprints.
pub(crate) trait SettingValue: Copy {
    fn render(self) -> String;
}

impl SettingValue for u32 {
    fn render(self) -> String {
        self.to_string()
    }
}

impl SettingValue for usize {
    fn render(self) -> String {
        self.to_string()
    }
}

impl SettingValue for NonZeroU32 {
    fn render(self) -> String {
        self.to_string()
    }
}

impl SettingValue for Option<NonZeroU32> {
    fn render(self) -> String {
        self.map_or_else(|| "none".to_owned(), |value| value.to_string())
    }
}

impl SettingValue for Duration {
    fn render(self) -> String {
        HumanDuration(self).to_string()
    }
}

impl SettingValue for Retention {
    fn render(self) -> String {
        self.to_string()
    }
}

pub(crate) fn check_range<T: SettingValue + PartialOrd>(
    field: Field,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), OptionsError> {
    if range.contains(&value) {
        return Ok(());
    }
    let problem = format!("is out of range ({}..={})", range.start().render(), range.end().render());
    Err(OptionsError::new(field, value, problem))
}

pub(crate) fn check_batch_size(field: Field, value: u32) -> Result<(), OptionsError> {
    check_range(field, value, 1..=MAX_BATCH_SIZE)
}

pub(crate) fn check_nonzero(field: Field, value: u32) -> Result<NonZeroU32, OptionsError> {
    NonZeroU32::new(value).ok_or_else(|| OptionsError::new(field, value, "must be at least 1"))
}

pub(crate) fn check_positive(field: Field, value: Duration) -> Result<(), OptionsError> {
    if value.is_zero() { Err(OptionsError::new(field, value, "must be positive")) } else { Ok(()) }
}

/// Intervals, backoffs, budgets: positive and at most [`MAX_INTERVAL`].
pub(crate) fn check_interval(field: Field, value: Duration) -> Result<(), OptionsError> {
    check_positive(field, value)?;
    check_delay(field, value)
}

/// Delays may be zero, and are at most [`MAX_INTERVAL`].
pub(crate) fn check_delay(field: Field, value: Duration) -> Result<(), OptionsError> {
    if value > MAX_INTERVAL {
        let problem = format!("is longer than the maximum ({})", MAX_INTERVAL.render());
        return Err(OptionsError::new(field, value, problem));
    }
    Ok(())
}

/// Leases and claims: [`MIN_LEASE`]..=[`MAX_LEASE`].
pub(crate) fn check_lease(field: Field, value: Duration) -> Result<(), OptionsError> {
    check_range(field, value, MIN_LEASE..=MAX_LEASE)
}

/// Retentions: positive, or infinite.
pub(crate) fn check_retention(field: Field, value: Retention) -> Result<(), OptionsError> {
    match value {
        Retention::After(duration) if duration.is_zero() => {
            Err(OptionsError::new(field, value, "must be positive, or \"infinite\" to keep rows forever"))
        }
        _ => Ok(()),
    }
}

/// `value <= other`; the message names the other field without its section.
pub(crate) fn check_not_above(
    field: Field,
    value: Duration,
    other_field: Field,
    other: Duration,
) -> Result<(), OptionsError> {
    if value <= other {
        return Ok(());
    }
    let problem = format!("must not exceed {} ({})", other_field.name, other.render());
    Err(OptionsError::new(field, value, problem))
}

/// `value > other`; the message names the other field without its section.
pub(crate) fn check_greater(
    field: Field,
    value: Duration,
    other_field: Field,
    other: Duration,
) -> Result<(), OptionsError> {
    if value > other {
        return Ok(());
    }
    let problem = format!("must be greater than {} ({})", other_field.name, other.render());
    Err(OptionsError::new(field, value, problem))
}

/// Serde adapters for `NonZeroU32` settings whose errors name the field, as the
/// builder's do (serde's own message for a zero names neither).
mod nonzero {
    use std::num::NonZeroU32;

    use serde::{Deserialize, Deserializer};

    use super::{Field, check_nonzero};

    fn read<'de, D: Deserializer<'de>>(deserializer: D, field: Field) -> Result<NonZeroU32, D::Error> {
        check_nonzero(field, u32::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }

    pub(super) fn max_attempts<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<NonZeroU32>, D::Error> {
        let field = Field::new(super::DispatcherOptions::SECTION, "max_attempts");
        match Option::<u32>::deserialize(deserializer)? {
            None => Ok(None),
            Some(value) => check_nonzero(field, value).map(Some).map_err(serde::de::Error::custom),
        }
    }

    pub(super) fn breaker_threshold<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<NonZeroU32, D::Error> {
        read(deserializer, Field::new(super::DispatcherOptions::SECTION, "breaker_threshold"))
    }
}

/// SHA-1 of `text`, in lowercase hex.
fn sha1_hex(text: &str) -> String {
    Sha1::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

// ---------------------------------------------------------------------------------------
// The options types
// ---------------------------------------------------------------------------------------

/// Declares a worker's options: the validated type, its builder (which is also its serde
/// form), a setter and a getter per field, defaults, serde and the fingerprint. The
/// builder's hand-written `check` holds the rules.
macro_rules! worker_options {
    (
        $(#[doc = $doc:literal])*
        $Options:ident built by $Builder:ident in section $section:literal {
            $(
                $(#[doc = $field_doc:literal])*
                $(#[serde($($serde:tt)*)])*
                $field:ident: $type:ty = $default:expr;
            )+
        }
    ) => {
        $(#[doc = $doc])*
        ///
        #[doc = concat!(
            "Made by [`", stringify!($Builder), "::build`] or by deserializing; both validate, ",
            "so a value that exists is valid. [`Default`] gives the reference values."
        )]
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $Options {
            settings: $Builder,
        }

        #[doc = concat!(
            "Builds [`", stringify!($Options), "`]: every field starts at its default, ",
            "[`build`](", stringify!($Builder), "::build) validates them all. ",
            "Also the serde form, so it may be deserialized, adjusted and built."
        )]
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $Builder {
            $(
                $(#[doc = $field_doc])*
                $(#[serde($($serde)*)])*
                $field: $type,
            )+
        }

        impl Default for $Builder {
            fn default() -> Self {
                $Builder { $($field: $default,)+ }
            }
        }

        impl $Builder {
            $(
                $(#[doc = $field_doc])*
                pub fn $field(mut self, value: $type) -> Self {
                    self.$field = value;
                    self
                }
            )+

            /// Validates every field, naming the first one refused.
            pub fn build(self) -> Result<$Options, OptionsError> {
                self.check()?;
                Ok($Options { settings: self })
            }
        }

        impl $Options {
            /// The configuration section, which prefixes field names in errors.
            pub const SECTION: &'static str = $section;

            /// A builder starting from the defaults.
            pub fn builder() -> $Builder {
                $Builder::default()
            }

            /// A builder starting from these options.
            pub fn to_builder(&self) -> $Builder {
                self.settings.clone()
            }

            $(
                $(#[doc = $field_doc])*
                pub fn $field(&self) -> $type {
                    self.settings.$field
                }
            )+

            /// Every setting as `name=value`, sorted by name and joined by `;`: a canonical
            /// text for logs and for the fingerprint.
            pub fn canonical_settings(&self) -> String {
                let mut pairs = [$((stringify!($field), SettingValue::render(self.settings.$field)),)+];
                pairs.sort();
                pairs.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join(";")
            }

            /// A stable fingerprint of these options (OPT-4): the SHA-1, in hex, of the
            /// section and the [canonical settings](Self::canonical_settings). Replicas
            /// sharing a namespace must have equal fingerprints.
            pub fn fingerprint(&self) -> String {
                sha1_hex(&format!("{}\n{}", Self::SECTION, self.canonical_settings()))
            }
        }

        impl Default for $Options {
            fn default() -> Self {
                // The defaults are the reference values; a unit test builds them.
                $Options { settings: $Builder::default() }
            }
        }

        impl TryFrom<$Builder> for $Options {
            type Error = OptionsError;

            fn try_from(builder: $Builder) -> Result<Self, OptionsError> {
                builder.build()
            }
        }

        impl From<$Options> for $Builder {
            fn from(options: $Options) -> Self {
                options.settings
            }
        }

        impl Serialize for $Options {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.settings.serialize(serializer)
            }
        }

        impl<'de> Deserialize<'de> for $Options {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $Builder::deserialize(deserializer)?.build().map_err(serde::de::Error::custom)
            }
        }
    };
}

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
        /// Largest message body accepted at enqueue (OUT-3). Default 1 MiB; 1..=1 GiB.
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
        check_range(field("linger"), self.linger, Duration::ZERO..=MAX_LINGER)
    }
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
}

worker_options! {
    /// Options of the recovery sweeper (§6).
    SweeperOptions built by SweeperOptionsBuilder in section "sweeper" {
        /// Most rows one pass reads and claims (SWP-2). Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// Age below which rows are left to commit-triggered dispatch (SWP-2). Default 30s;
        /// 0s..=49d.
        #[serde(with = "crate::duration::human")]
        recovery_delay: Duration = 30 * SECOND;
        /// Time between passes, which also bounds how often a row is retried (SWP-6).
        /// Default 5s; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        sweep_interval: Duration = 5 * SECOND;
        /// How long the sweep lease lasts without renewal (LDR-2). Default 30s; 1s..=1h.
        #[serde(with = "crate::duration::human")]
        lease_duration: Duration = 30 * SECOND;
        /// How long the sweeper's claims hold their rows (DSP-1). Default 30s; 1s..=1h.
        #[serde(with = "crate::duration::human")]
        claim_duration: Duration = 30 * SECOND;
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
        check_lease(field("claim_duration"), self.claim_duration)?;
        check_interval(field("max_backoff"), self.max_backoff)
    }
}

impl SweeperOptions {
    /// The pass schedule: `sweep_interval`, backing off to `max_backoff` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.sweep_interval(), self.max_backoff())
    }
}

worker_options! {
    /// Options of retention cleanup (§8).
    CleanupOptions built by CleanupOptionsBuilder in section "cleanup" {
        /// Most rows one delete statement removes (RET-2). Default 100; 1..=10000.
        batch_size: u32 = 100;
        /// Time between passes (RET-4). Default 1m; positive, at most 49d.
        #[serde(with = "crate::duration::human")]
        cleanup_interval: Duration = MINUTE;
        /// How long dead rows are kept after `failed_at` (RET-2). Default 30d; positive
        /// or `infinite`.
        dead_retention: Retention = Retention::After(30 * DAY);
        /// How long inbox rows are kept after `processed_at`; must exceed the broker's
        /// redelivery window, since it bounds deduplication (RET-5). Default 7d; positive
        /// or `infinite`.
        inbox_retention: Retention = Retention::After(7 * DAY);
        /// How long the cleanup lease lasts without renewal (LDR-2). Default 30s; 1s..=1h.
        #[serde(with = "crate::duration::human")]
        lease_duration: Duration = 30 * SECOND;
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
        check_interval(field("max_backoff"), self.max_backoff)
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
        /// How long the pass's lease lasts without renewal, when it is led by a lease rather
        /// than the default advisory lock (LDR-2, LDR-5). Default 30s; 1s..=1h.
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
    /// The pass schedule: `interval`, backing off to `max(max_backoff, interval)` (RES-2).
    pub fn pass_backoff(&self) -> PassBackoff {
        PassBackoff::from_validated(self.interval(), self.max_backoff())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn defaults_are_the_reference_values_opt_1() {
        let dispatcher = DispatcherOptions::builder().build().unwrap();
        assert_eq!(dispatcher, DispatcherOptions::default());
        assert_eq!(dispatcher.batch_size(), 100);
        assert_eq!(dispatcher.claim_duration(), secs(30));
        assert_eq!(dispatcher.max_attempts(), None);
        assert_eq!((dispatcher.retry_base(), dispatcher.retry_max()), (secs(1), secs(300)));
        assert_eq!(dispatcher.breaker_threshold().get(), 5);
        assert_eq!(dispatcher.breaker_cool_down(), secs(30));
        assert_eq!(dispatcher.poll_interval(), secs(1));
        assert_eq!(dispatcher.max_body_bytes(), 1_048_576);

        let sweeper = SweeperOptions::builder().build().unwrap();
        assert_eq!(sweeper, SweeperOptions::default());
        assert_eq!(sweeper.batch_size(), 100);
        assert_eq!(sweeper.recovery_delay(), secs(30));
        assert_eq!(sweeper.sweep_interval(), secs(5));
        assert_eq!((sweeper.lease_duration(), sweeper.claim_duration()), (secs(30), secs(30)));
        assert_eq!(sweeper.max_backoff(), secs(60));

        let cleanup = CleanupOptions::builder().build().unwrap();
        assert_eq!(cleanup, CleanupOptions::default());
        assert_eq!(cleanup.cleanup_interval(), secs(60));
        assert_eq!(cleanup.dead_retention(), Retention::After(30 * DAY));
        assert_eq!(cleanup.inbox_retention(), Retention::After(7 * DAY));
        assert_eq!((cleanup.lease_duration(), cleanup.pass_budget()), (secs(30), secs(10)));

        let dead_letter = DeadLetterOptions::builder().build().unwrap();
        assert_eq!(dead_letter, DeadLetterOptions::default());
        assert_eq!(dead_letter.interval(), secs(900));
        assert_eq!((dead_letter.batch_size(), dead_letter.max_backoff()), (100, secs(60)));
    }

    #[test]
    fn errors_name_the_field_and_the_value_opt_3() {
        let cases: [(Result<(), OptionsError>, &str); 12] = [
            (
                SweeperOptions::builder().batch_size(0).build().map(drop),
                "sweeper.batch_size: 0 is out of range (1..=10000)",
            ),
            (
                SweeperOptions::builder().batch_size(10_001).build().map(drop),
                "sweeper.batch_size: 10001 is out of range (1..=10000)",
            ),
            (
                SweeperOptions::builder().sweep_interval(Duration::ZERO).build().map(drop),
                "sweeper.sweep_interval: 0s must be positive",
            ),
            (
                SweeperOptions::builder().recovery_delay(50 * DAY).build().map(drop),
                "sweeper.recovery_delay: 50d is longer than the maximum (49d)",
            ),
            (
                SweeperOptions::builder().lease_duration(Duration::from_millis(999)).build().map(drop),
                "sweeper.lease_duration: 999ms is out of range (1s..=1h)",
            ),
            (
                SweeperOptions::builder().claim_duration(secs(3_601)).build().map(drop),
                "sweeper.claim_duration: 1h1s is out of range (1s..=1h)",
            ),
            (
                DispatcherOptions::builder().retry_base(secs(600)).build().map(drop),
                "dispatcher.retry_base: 10m must not exceed retry_max (5m)",
            ),
            (
                DispatcherOptions::builder().max_body_bytes(0).build().map(drop),
                "dispatcher.max_body_bytes: 0 is out of range (1..=1073741824)",
            ),
            (
                CleanupOptions::builder().dead_retention(Retention::After(Duration::ZERO)).build().map(drop),
                "cleanup.dead_retention: 0s must be positive, or \"infinite\" to keep rows forever",
            ),
            (
                CleanupOptions::builder().pass_budget(Duration::ZERO).build().map(drop),
                "cleanup.pass_budget: 0s must be positive",
            ),
            (
                DeadLetterOptions::builder().interval(50 * DAY).build().map(drop),
                "dead_letter.interval: 50d is longer than the maximum (49d)",
            ),
            (
                DeadLetterOptions::builder().batch_size(0).build().map(drop),
                "dead_letter.batch_size: 0 is out of range (1..=10000)",
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(result.unwrap_err().to_string(), expected);
        }
        let error = SweeperOptions::builder().batch_size(0).build().unwrap_err();
        assert_eq!((error.field(), error.value()), ("sweeper.batch_size", "0"));
    }

    #[test]
    fn edges_of_every_range_are_accepted() {
        SweeperOptions::builder()
            .batch_size(1)
            .recovery_delay(Duration::ZERO)
            .sweep_interval(MAX_INTERVAL)
            .lease_duration(MIN_LEASE)
            .claim_duration(MAX_LEASE)
            .max_backoff(Duration::from_nanos(1))
            .build()
            .unwrap();
        DispatcherOptions::builder()
            .batch_size(MAX_BATCH_SIZE)
            .retry_base(secs(5))
            .retry_max(secs(5))
            .max_body_bytes(MAX_BODY_BYTES_LIMIT)
            .build()
            .unwrap();
        CleanupOptions::builder()
            .dead_retention(Retention::Keep)
            .inbox_retention(Retention::Keep)
            .build()
            .unwrap();
    }

    #[test]
    fn deserializes_human_strings_with_defaults_opt_2() {
        let options: CleanupOptions = toml::from_str(
            r#"
            dead_retention = "infinite"
            inbox_retention = "14d"
            cleanup_interval = "1h30m"
            "#,
        )
        .unwrap();
        assert_eq!(options.dead_retention(), Retention::Keep);
        assert_eq!(options.inbox_retention(), Retention::After(14 * DAY));
        assert_eq!(options.cleanup_interval(), secs(5_400));
        assert_eq!(options.batch_size(), 100);
        assert_eq!(options.retention(RetentionTable::Outbox), Retention::Keep);

        let options: DispatcherOptions = serde_json::from_str(r#"{"max_attempts": 5}"#).unwrap();
        assert_eq!(options.max_attempts(), NonZeroU32::new(5));
    }

    #[test]
    fn deserializing_refuses_unknown_keys_and_bad_values() {
        let error = toml::from_str::<SweeperOptions>("batch = 5").unwrap_err().to_string();
        assert!(error.contains("unknown field `batch`"), "{error}");
        let error = serde_json::from_str::<SweeperOptions>(r#"{"batch_size": 0}"#).unwrap_err().to_string();
        assert!(error.contains("sweeper.batch_size: 0 is out of range (1..=10000)"), "{error}");
        let error =
            serde_json::from_str::<SweeperOptions>(r#"{"sweep_interval": "5"}"#).unwrap_err().to_string();
        assert!(error.contains("invalid duration \"5\""), "{error}");
        let error =
            serde_json::from_str::<DispatcherOptions>(r#"{"max_attempts": 0}"#).unwrap_err().to_string();
        assert!(error.contains("dispatcher.max_attempts: 0 must be at least 1"), "{error}");
        let error =
            serde_json::from_str::<DispatcherOptions>(r#"{"breaker_threshold": 0}"#).unwrap_err().to_string();
        assert!(error.contains("dispatcher.breaker_threshold: 0 must be at least 1"), "{error}");
    }

    #[test]
    fn serializes_back_to_the_same_options() {
        let options = DispatcherOptions::builder()
            .max_attempts(NonZeroU32::new(8))
            .retry_base(Duration::from_millis(250))
            .build()
            .unwrap();
        let json = serde_json::to_string(&options).unwrap();
        assert!(json.contains(r#""retry_base":"250ms""#), "{json}");
        assert_eq!(serde_json::from_str::<DispatcherOptions>(&json).unwrap(), options);
        let json = serde_json::to_string(&DispatcherOptions::default()).unwrap();
        assert!(!json.contains("max_attempts"), "none is left out: {json}");
        assert_eq!(serde_json::from_str::<DispatcherOptions>(&json).unwrap(), DispatcherOptions::default());
    }

    #[test]
    fn fingerprints_are_canonical_and_tell_settings_apart_opt_4() {
        let options = SweeperOptions::default();
        assert_eq!(
            options.canonical_settings(),
            "batch_size=100;claim_duration=30s;lease_duration=30s;max_backoff=1m;recovery_delay=30s;sweep_interval=5s"
        );
        assert_eq!(options.fingerprint().len(), 40);
        assert_eq!(options.fingerprint(), SweeperOptions::builder().build().unwrap().fingerprint());
        let other = options.to_builder().recovery_delay(secs(31)).build().unwrap();
        assert_ne!(options.fingerprint(), other.fingerprint());
        let cleanup = CleanupOptions::default().canonical_settings();
        assert!(cleanup.contains("dead_retention=30d;inbox_retention=7d"), "{cleanup}");
    }

    #[test]
    fn helpers_carry_the_settings() {
        let dispatcher = DispatcherOptions::default();
        assert_eq!(dispatcher.retry_backoff().delay_after(100), secs(300));
        assert_eq!(dispatcher.circuit_breaker().threshold(), 5);
        assert_eq!(dispatcher.pass_backoff().wait_after(0), secs(1));
        assert_eq!(SweeperOptions::default().pass_backoff().wait_after(10), secs(60));
        assert_eq!(CleanupOptions::default().pass_backoff().wait_after(1), secs(60));
        assert_eq!(DeadLetterOptions::default().pass_backoff().wait_after(3), secs(900));
    }
}
