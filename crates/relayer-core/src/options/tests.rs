//! The options' own tests: defaults, every refusal, serde round trips and fingerprints.

use std::num::NonZeroU32;
use std::time::Duration;

use super::limits::{DAY, SECOND};
use super::*;
use crate::duration::Retention;
use crate::retention::RetentionTable;

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
    assert_eq!((dispatcher.send_timeout(), dispatcher.effective_send_timeout()), (None, secs(10)));

    let sweeper = SweeperOptions::builder().build().unwrap();
    assert_eq!(sweeper, SweeperOptions::default());
    assert_eq!(sweeper.batch_size(), 100);
    assert_eq!(sweeper.recovery_delay(), secs(30));
    assert_eq!(sweeper.sweep_interval(), secs(5));
    assert_eq!(sweeper.lease_duration(), secs(30));
    assert_eq!(sweeper.max_backoff(), secs(60));

    let cleanup = CleanupOptions::builder().build().unwrap();
    assert_eq!(cleanup, CleanupOptions::default());
    assert_eq!(cleanup.cleanup_interval(), secs(60));
    assert_eq!(cleanup.dead_retention(), Retention::After(30 * DAY));
    assert_eq!(cleanup.inbox_retention(), Retention::After(7 * DAY));
    // Not the reference's 30s: the lease must outlive the 1m between passes (LDR-2).
    assert_eq!((cleanup.lease_duration(), cleanup.pass_budget()), (secs(120), secs(10)));

    let dead_letter = DeadLetterOptions::builder().build().unwrap();
    assert_eq!(dead_letter, DeadLetterOptions::default());
    assert_eq!(dead_letter.interval(), secs(900));
    assert_eq!((dead_letter.batch_size(), dead_letter.max_backoff()), (100, secs(60)));
}

#[test]
fn errors_name_the_field_and_the_value_opt_3() {
    let cases: [(Result<(), OptionsError>, &str); 15] = [
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
            SweeperOptions::builder().sweep_interval(secs(30)).build().map(drop),
            "sweeper.lease_duration: 30s must be greater than sweep_interval (30s)",
        ),
        (
            CleanupOptions::builder().lease_duration(secs(30)).build().map(drop),
            "cleanup.lease_duration: 30s must be greater than cleanup_interval (1m)",
        ),
        (
            CleanupOptions::builder()
                .dead_retention(Retention::After(MAX_RETENTION + SECOND))
                .build()
                .map(drop),
            "cleanup.dead_retention: 36500d1s is longer than the maximum (36500d); use \"infinite\" to keep rows forever",
        ),
        (
            CleanupOptions::builder().inbox_retention(Retention::After(Duration::MAX)).build().map(drop),
            "cleanup.inbox_retention: 213503982334601d7h15s999ms999us999ns is longer than the maximum (36500d); \
             use \"infinite\" to keep rows forever",
        ),
        (
            DispatcherOptions::builder().retry_base(secs(600)).build().map(drop),
            "dispatcher.retry_base: 10m must not exceed retry_max (5m)",
        ),
        (
            DispatcherOptions::builder().max_body_bytes(0).build().map(drop),
            "dispatcher.max_body_bytes: 0 is out of range (1..=1072693248)",
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

/// LDR-2 for the dead-letter pass (issue 21): under lease leadership a pass holds its
/// lease for `interval + lease_duration`, so any valid options — the defaults (15m, 30s)
/// and an interval of hours included — keep it from lapsing between passes, with
/// `lease_duration` to spare for the pass itself.
#[test]
fn a_dead_letter_lease_always_outlasts_the_wait_between_passes_ldr_2() {
    let defaults = DeadLetterOptions::default();
    assert_eq!((defaults.interval(), defaults.lease_duration()), (secs(900), secs(30)));
    assert_eq!(defaults.lease_hold(), secs(930));
    let hours =
        DeadLetterOptions::builder().interval(secs(4 * 3600)).lease_duration(secs(5)).build().unwrap();
    assert_eq!(hours.lease_hold(), secs(4 * 3600 + 5));
    let longest = DeadLetterOptions::builder().interval(49 * DAY).lease_duration(secs(3600)).build().unwrap();
    assert!(longest.lease_hold() > longest.interval());
}

/// OPT-3: options under which a dispatcher could hold more bodies than
/// `MAX_DISPATCH_MEMORY_BYTES` are refused, naming `max_body_bytes`, `batch_size` and
/// `concurrency`; the largest product within it is accepted.
#[test]
fn a_dispatcher_that_could_hold_more_than_the_memory_ceiling_is_refused_naming_its_options_opt_3() {
    use super::{MAX_DISPATCH_MEMORY_BYTES, dispatch_memory};
    let error =
        DispatcherOptions::builder().batch_size(MAX_BATCH_SIZE).max_body_bytes(1 << 20).build().unwrap_err();
    assert_eq!((error.field(), error.value()), ("dispatcher.max_body_bytes", "1048576"));
    assert_eq!(
        error.to_string(),
        "dispatcher.max_body_bytes: 1048576 with batch_size 10000 and concurrency 2: the dispatcher could hold \
         59 GiB of bodies (batch_size × max_body_bytes × 2 batches × (concurrency + 1 lane loop)); the limit is \
         16 GiB — lower max_body_bytes, batch_size or concurrency"
    );
    // 1000 × 1 MiB × 2 × (2 + 1) = 6000 MiB: within the ceiling.
    assert_eq!(dispatch_memory(1000, 1 << 20, 2), 6000 << 20);
    DispatcherOptions::builder().batch_size(1000).max_body_bytes(1 << 20).build().unwrap();
    let largest = usize::try_from(MAX_DISPATCH_MEMORY_BYTES / (2 * 10_000 * 3)).unwrap();
    DispatcherOptions::builder().batch_size(MAX_BATCH_SIZE).max_body_bytes(largest).build().unwrap();
    DispatcherOptions::builder().batch_size(MAX_BATCH_SIZE).max_body_bytes(largest + 1).build().unwrap_err();
    // Options read from a file are held to the same ceiling (OPT-2).
    let toml = "batch_size = 10000\nmax_body_bytes = 1048576\n";
    let error = toml::from_str::<DispatcherOptions>(toml).unwrap_err().to_string();
    assert!(error.contains("the limit is 16 GiB"), "{error}");
}

#[test]
fn edges_of_every_range_are_accepted() {
    SweeperOptions::builder()
        .batch_size(1)
        .recovery_delay(Duration::ZERO)
        .sweep_interval(Duration::from_nanos(1))
        .lease_duration(MIN_LEASE)
        .max_backoff(Duration::from_nanos(1))
        .build()
        .unwrap();
    DispatcherOptions::builder()
        .batch_size(MAX_BATCH_SIZE)
        .retry_base(secs(5))
        .retry_max(secs(5))
        .max_body_bytes(MAX_BODY_BYTES_LIMIT / MAX_BATCH_SIZE as usize)
        .build()
        .unwrap();
    DispatcherOptions::builder()
        .batch_size(1)
        .concurrency(1)
        .max_body_bytes(MAX_BODY_BYTES_LIMIT)
        .build()
        .unwrap();
    CleanupOptions::builder()
        .dead_retention(Retention::Keep)
        .inbox_retention(Retention::Keep)
        .build()
        .unwrap();
    CleanupOptions::builder()
        .dead_retention(Retention::After(MAX_RETENTION))
        .inbox_retention(Retention::After(Duration::from_nanos(1)))
        .cleanup_interval(MAX_LEASE - Duration::from_nanos(1))
        .lease_duration(MAX_LEASE)
        .build()
        .unwrap();
    SweeperOptions::builder().sweep_interval(MAX_LEASE - SECOND).lease_duration(MAX_LEASE).build().unwrap();
}

/// OPT-3: a retention PostgreSQL could not subtract from `now()` is refused at
/// construction, naming the field, instead of failing every cleanup pass.
#[test]
fn a_retention_past_the_maximum_is_refused_naming_the_field_opt_3() {
    let huge = Retention::After(MAX_RETENTION + SECOND);
    let error = CleanupOptions::builder().inbox_retention(huge).build().unwrap_err();
    assert_eq!(
        error.to_string(),
        "cleanup.inbox_retention: 36500d1s is longer than the maximum (36500d); \
         use \"infinite\" to keep rows forever"
    );
    assert!(CleanupOptions::builder().dead_retention(Retention::After(Duration::MAX)).build().is_err());
    let toml = "dead_retention = \"1000000d\"";
    let parsed: Result<CleanupOptions, _> = toml::from_str(toml);
    assert!(parsed.unwrap_err().to_string().contains("cleanup.dead_retention"), "serde names it too");
    let edge = CleanupOptions::builder().dead_retention(Retention::After(MAX_RETENTION)).build().unwrap();
    assert_eq!(edge.dead_retention(), Retention::After(MAX_RETENTION));
}

#[test]
fn deserializes_human_strings_with_defaults_opt_2() {
    let options: CleanupOptions = toml::from_str(
        r#"
        dead_retention = "infinite"
        inbox_retention = "14d"
        cleanup_interval = "45m"
        lease_duration = "1h"
        "#,
    )
    .unwrap();
    assert_eq!(options.dead_retention(), Retention::Keep);
    assert_eq!(options.inbox_retention(), Retention::After(14 * DAY));
    assert_eq!(options.cleanup_interval(), secs(2_700));
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
    let error = serde_json::from_str::<SweeperOptions>(r#"{"sweep_interval": "5"}"#).unwrap_err().to_string();
    assert!(error.contains("invalid duration \"5\""), "{error}");
    let error = serde_json::from_str::<DispatcherOptions>(r#"{"max_attempts": 0}"#).unwrap_err().to_string();
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
        "batch_size=100;lease_duration=30s;max_backoff=1m;recovery_delay=30s;sweep_interval=5s"
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

#[test]
fn send_timeout_must_fit_inside_the_claim_and_the_sweeper_lease_trn_5() {
    let error = DispatcherOptions::builder().send_timeout(Some(secs(16))).build().unwrap_err();
    assert_eq!(
        error.to_string(),
        "dispatcher.send_timeout: 16s must be at most half of dispatcher.claim_duration (30s)"
    );
    let error = DispatcherOptions::builder().send_timeout(Some(Duration::ZERO)).build().unwrap_err();
    assert_eq!(error.field(), "dispatcher.send_timeout");
    let short_claim = DispatcherOptions::builder().claim_duration(secs(2)).build().unwrap();
    assert_eq!(short_claim.effective_send_timeout(), secs(1), "unset: half the claim");
    assert_eq!(short_claim.check_fits_sweeper(&SweeperOptions::default()), Ok(()));
    let fits = DispatcherOptions::builder().send_timeout(Some(secs(15))).build().unwrap();
    assert_eq!(fits.effective_send_timeout(), secs(15));
    let parsed: DispatcherOptions = toml::from_str("send_timeout = \"5s\"").unwrap();
    assert_eq!(parsed.send_timeout(), Some(secs(5)));
    assert_eq!(fits.check_fits_sweeper(&SweeperOptions::default()), Ok(()));
    let short_lease = SweeperOptions::builder().lease_duration(secs(20)).build().unwrap();
    assert_eq!(
        fits.check_fits_sweeper(&short_lease).unwrap_err().to_string(),
        "dispatcher.send_timeout: 15s must be at most half of sweeper.lease_duration (20s)"
    );
}
