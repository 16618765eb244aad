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

mod cleanup;
mod dead_letter;
mod dispatcher;
pub(crate) mod error;
pub(crate) mod fingerprint;
pub(crate) mod limits;
pub(crate) mod setting_value;
mod sweeper;
pub(crate) mod validate;
pub(crate) mod worker_options;

pub use self::cleanup::{CleanupOptions, CleanupOptionsBuilder};
pub use self::dead_letter::{DeadLetterOptions, DeadLetterOptionsBuilder};
pub use self::dispatcher::{DispatcherOptions, DispatcherOptionsBuilder, dispatch_memory};
pub use self::error::OptionsError;
pub use self::limits::{
    DEFAULT_SEND_TIMEOUT, MAX_BATCH_SIZE, MAX_BODY_BYTES_LIMIT, MAX_CONCURRENCY, MAX_DISPATCH_MEMORY_BYTES,
    MAX_INTERVAL, MAX_LEASE, MAX_LINGER, MAX_RETENTION, MIN_LEASE,
};
pub use self::sweeper::{SweeperOptions, SweeperOptionsBuilder};

#[cfg(test)]
mod tests;
