//! Properties of the retry-or-bury decision (DSP-3, DSP-5, LAN-2) and of the bounded set
//! of circuit breakers (DSP-6).
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed property.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use proptest::prelude::*;
use relayer_core::{
    CircuitBreaker, CircuitBreakers, ErrorClass, FailureDecision, RetryBackoff, RetryPolicy, Timestamp,
    retry_or_bury,
};

fn any_class() -> impl Strategy<Value = ErrorClass> {
    prop_oneof![Just(ErrorClass::Transient), Just(ErrorClass::Permanent)]
}

fn any_policy() -> impl Strategy<Value = RetryPolicy> {
    (proptest::option::of(1u32..50), 1u64..120, 0u64..3_600).prop_map(|(max, base, extra)| RetryPolicy {
        max_attempts: max.and_then(NonZeroU32::new),
        backoff: RetryBackoff::new(Duration::from_secs(base), Duration::from_secs(base + extra)).unwrap(),
    })
}

proptest! {
    /// Every failure counts once, whatever the decision (DSP-3).
    #[test]
    fn a_failure_counts_one_attempt_dsp_3(policy in any_policy(), before in 0u32..100, class in any_class()) {
        prop_assert_eq!(retry_or_bury(&policy, before, class).attempts(), before + 1);
    }

    /// Without `max_attempts` nothing is ever buried; a retry waits the backoff of the
    /// row's new attempt count (DSP-3, DSP-5).
    #[test]
    fn without_max_attempts_every_failure_is_retried_after_the_backoff_dsp_5(
        policy in any_policy(), before in 0u32..1_000, class in any_class(),
    ) {
        let policy = RetryPolicy { max_attempts: None, ..policy };
        prop_assert_eq!(
            retry_or_bury(&policy, before, class),
            FailureDecision::Retry { attempts: before + 1, after: policy.backoff.delay_after(before + 1) }
        );
    }

    /// With `max_attempts`, a row is buried exactly when it reaches it, or at once on a
    /// permanent error (DSP-5, TRN-2).
    #[test]
    fn buried_exactly_at_max_attempts_or_on_a_permanent_error_dsp_5(
        policy in any_policy(), before in 0u32..100, class in any_class(),
    ) {
        let buried = matches!(retry_or_bury(&policy, before, class), FailureDecision::Bury { .. });
        let expected = policy.max_attempts.is_some_and(|max| class == ErrorClass::Permanent || before + 1 >= max.get());
        prop_assert_eq!(buried, expected);
    }

    /// Retries never wait less for a later attempt, and never beyond the backoff's cap (DSP-3).
    #[test]
    fn retry_delays_grow_and_stay_capped_dsp_3(policy in any_policy(), before in 0u32..100) {
        let policy = RetryPolicy { max_attempts: None, ..policy };
        let delay = |n| match retry_or_bury(&policy, n, ErrorClass::Transient) {
            FailureDecision::Retry { after, .. } => after,
            FailureDecision::Bury { .. } => unreachable!("no max_attempts"),
        };
        prop_assert!(delay(before) <= delay(before + 1));
        prop_assert!(delay(before) <= policy.backoff.max() && delay(before) >= policy.backoff.base());
    }

    /// However many destinations fail, in whatever order and at whatever times, the set of
    /// breakers never holds more than its capacity (DSP-6).
    #[test]
    fn breakers_never_exceed_their_capacity_dsp_6(
        capacity in 1usize..64,
        threshold in 1u32..4,
        events in proptest::collection::vec((0u32..500, 0i64..120, any::<bool>()), 1..600),
    ) {
        let template = CircuitBreaker::new(threshold, Duration::from_secs(30)).unwrap();
        let mut breakers = CircuitBreakers::new(template, NonZeroUsize::new(capacity).unwrap());
        let mut now = 0i64;
        for (destination, step, succeeded) in events {
            now += step;
            let at = Timestamp::from_micros(now * 1_000_000);
            if succeeded { breakers.record_success(&destination); } else { breakers.record_failure(&destination, at); }
            prop_assert!(breakers.len() <= capacity);
            prop_assert!(breakers.tripped(at).len() <= capacity);
        }
    }

    /// Below capacity nothing is forgotten: a tripped destination stays tripped until its
    /// cool-down passes (DSP-6).
    #[test]
    fn below_capacity_a_tripped_destination_stays_held_back_dsp_6(
        destinations in proptest::collection::btree_set(0u32..10_000, 1..50),
    ) {
        let template = CircuitBreaker::new(1, Duration::from_secs(30)).unwrap();
        let mut breakers = CircuitBreakers::new(template, NonZeroUsize::new(50).unwrap());
        let at = Timestamp::EPOCH;
        for destination in &destinations {
            prop_assert!(breakers.record_failure(destination, at));
        }
        for destination in &destinations {
            prop_assert!(breakers.is_tripped(destination, at.saturating_add(Duration::from_secs(29))));
        }
    }
}

/// A flood of 100,000 distinct failing destinations keeps the set at its capacity, and the
/// latest failures are the ones still held back (DSP-6).
#[test]
fn a_hundred_thousand_failing_destinations_stay_bounded_dsp_6() {
    let template = CircuitBreaker::new(1, Duration::from_secs(30)).unwrap();
    let capacity = relayer_core::breaker::DEFAULT_TRACKED_DESTINATIONS;
    let mut breakers = CircuitBreakers::new(template, capacity);
    for destination in 0u32..100_000 {
        let at = Timestamp::from_micros(i64::from(destination));
        breakers.record_failure(&destination, at);
        assert!(breakers.len() <= capacity.get());
    }
    let now = Timestamp::from_micros(100_000);
    assert!(breakers.is_tripped(&99_999, now), "the newest failure is kept");
    assert!(!breakers.is_tripped(&0, now), "the oldest was evicted");
}
