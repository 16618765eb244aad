//! Properties of relayer's pure policy: backoff (RES-2, DSP-3), the keyset cursor (SWP-3),
//! eligibility and retention (SWP-2, LAN-4, RET-1..3), dead-letter decisions (DLP-2,
//! DLP-5), the circuit breaker (DSP-6), options (OPT-2, OPT-3) and identifiers (NS-2).
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed property.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use relayer_core::dead_letter::{
    DeadLetterPolicies, DeadLetterRule, DeadLetterSetupError, DeadLetterType, SubscriptionQueues,
    UNACCEPTABLE,
};
use relayer_core::duration::{format_duration, parse_duration};
use relayer_core::eligibility::{
    dead_row_expired, dispatch_claimable, inbox_row_expired, is_poison, recovery_eligible, retention_cutoff,
};
use relayer_core::namespace::{MAX_IDENTIFIER_LEN, MAX_PREFIX_LEN};
use relayer_core::options::{
    MAX_BATCH_SIZE, MAX_BODY_BYTES_LIMIT, MAX_DISPATCH_MEMORY_BYTES, MAX_INTERVAL, MAX_LEASE, MAX_RETENTION,
    MIN_LEASE,
};
use relayer_core::{
    BreakerState, CircuitBreaker, CleanupOptions, DeadLetterDecision, DeadLetterOptions, DeadLetterPolicy,
    DeadLetterRow, DispatcherOptions, ErrorClass, IdentifierKind, KeysetCursor, Namespace, OutboxRow,
    PageEnd, PassBackoff, PassPlan, Retention, RetentionTable, RetryBackoff, SweeperOptions, Timestamp, Uuid,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------

/// Durations across the whole range, weighted toward realistic ones.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        3 => (0u64..=100 * 86_400).prop_map(Duration::from_secs),
        1 => (0u64..=10_000_000_000).prop_map(Duration::from_nanos),
        1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn positive_duration() -> impl Strategy<Value = Duration> {
    any_duration().prop_filter("positive", |d| !d.is_zero())
}

/// Database timestamps within ±30 000 years of the epoch: arithmetic on them never needs
/// to saturate for realistic durations, but still may for huge ones.
fn timestamp() -> impl Strategy<Value = Timestamp> {
    (-1_000_000_000_000_000_000i64..=1_000_000_000_000_000_000).prop_map(Timestamp::from_micros)
}

/// The model's duration in microseconds, unclamped, as `Timestamp::saturating_sub` reads it.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------
// Backoff (RES-2, DSP-3)
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn pass_backoff_is_monotone_capped_and_never_below_interval_res_2(
        interval in positive_duration(),
        max_backoff in any_duration(),
        failures in any::<u32>(),
    ) {
        let backoff = PassBackoff::new(interval, max_backoff).unwrap();
        let cap = max_backoff.max(interval);
        let wait = backoff.wait_after(failures);
        prop_assert!(wait >= interval);
        prop_assert!(wait <= cap);
        prop_assert!(wait <= backoff.wait_after(failures.saturating_add(1)));
        prop_assert_eq!(backoff.wait_after(0), interval);
        prop_assert_eq!(backoff.wait_after(u32::MAX), cap);
    }

    #[test]
    fn pass_backoff_matches_the_formula_res_2(
        interval_ms in 1u64..=3_600_000,
        max_backoff_ms in 0u64..=86_400_000,
        failures in 1u32..=80,
    ) {
        let backoff =
            PassBackoff::new(Duration::from_millis(interval_ms), Duration::from_millis(max_backoff_ms)).unwrap();
        let grown = u128::from(interval_ms) << (failures - 1);
        let expected = grown.min(u128::from(max_backoff_ms.max(interval_ms)));
        prop_assert_eq!(backoff.wait_after(failures).as_millis(), expected);
    }

    #[test]
    fn retry_backoff_is_monotone_and_between_base_and_max_dsp_3(
        (base, max) in (positive_duration(), any_duration())
            .prop_map(|(a, b)| if a <= b { (a, b) } else { (b.max(Duration::from_nanos(1)), a) }),
        attempts in any::<u32>(),
        now in timestamp(),
    ) {
        let backoff = RetryBackoff::new(base, max).unwrap();
        let delay = backoff.delay_after(attempts);
        prop_assert!(delay >= base && delay <= max);
        prop_assert!(delay <= backoff.delay_after(attempts.saturating_add(1)));
        prop_assert_eq!(backoff.delay_after(1), base);
        prop_assert_eq!(backoff.delay_after(u32::MAX), max);
        prop_assert_eq!(backoff.next_attempt_at(now, attempts), now.saturating_add(delay));
        prop_assert!(backoff.next_attempt_at(now, attempts) >= now);
    }
}

// ---------------------------------------------------------------------------------------
// Keyset cursor (SWP-3)
// ---------------------------------------------------------------------------------------

/// What happens to the table between two passes.
#[derive(Clone, Debug)]
struct Churn {
    /// New rows, with their eligibility: always above every existing seq.
    inserts: Vec<bool>,
    /// Rows whose eligibility flips (sent elsewhere, claimed, backing off, or due again).
    flips: Vec<Index>,
    /// Whether the rows the pass read were sent (deleted) or failed (no longer eligible).
    page_sent: bool,
}

fn churn() -> impl Strategy<Value = Churn> {
    (prop::collection::vec(any::<bool>(), 0..6), prop::collection::vec(any::<Index>(), 0..4), any::<bool>())
        .prop_map(|(inserts, flips, page_sent)| Churn { inserts, flips, page_sent })
}

/// The outbox as the sweeper sees it: seq → currently eligible.
fn initial_table() -> impl Strategy<Value = BTreeMap<i64, bool>> {
    prop::collection::vec((1i64..4, any::<bool>()), 0..60).prop_map(|rows| {
        let mut seq = 0;
        rows.into_iter()
            .map(|(gap, eligible)| {
                seq += gap;
                (seq, eligible)
            })
            .collect()
    })
}

/// Runs `traversals` traversals against a churning table and checks SWP-3 on each.
/// With `revive`, ineligible rows may become eligible again inside the window.
fn simulate(
    mut table: BTreeMap<i64, bool>,
    batch: usize,
    churns: &[Churn],
    traversals: usize,
    revive: bool,
) -> Result<(), TestCaseError> {
    let mut cursor = KeysetCursor::new();
    let mut churns = churns.iter().cycle();
    for _ in 0..traversals {
        prop_assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
        let highest = table.keys().next_back().copied();
        let Some(window) = cursor.begin_traversal(highest) else {
            prop_assert!(table.is_empty(), "idle only when nothing is pending");
            return Ok(());
        };
        let boundary = window.up_to;
        prop_assert_eq!(Some(boundary), highest);
        // Rows eligible at the start; a row leaves this set when it stops being eligible.
        let mut owed: BTreeSet<i64> =
            table.iter().filter(|(_, eligible)| **eligible).map(|(seq, _)| *seq).collect();
        let owed_at_start = owed.len();
        let rows_at_start = table.len();
        let mut visited = BTreeSet::new();
        let mut passes = 0;
        let mut after = KeysetCursor::START;
        loop {
            passes += 1;
            let PassPlan::Scan(window) = cursor.plan() else {
                return Err(TestCaseError::fail("a traversal under way must scan"));
            };
            prop_assert_eq!(window.up_to, boundary, "the boundary is fixed for the traversal");
            prop_assert!(window.after >= after, "the cursor never moves back");
            after = window.after;
            let page: Vec<i64> = table
                .range(window.after.saturating_add(1)..=window.up_to)
                .filter(|(_, eligible)| **eligible)
                .map(|(seq, _)| *seq)
                .take(batch)
                .collect();
            prop_assert!(page.iter().all(|seq| *seq <= boundary), "never above the boundary");
            visited.extend(page.iter().copied());
            let end = cursor.record_page(&page, batch);

            // Between passes: the pass's rows are sent or fail, others churn, new rows arrive.
            let churn =
                churns.next().cloned().unwrap_or(Churn { inserts: vec![], flips: vec![], page_sent: true });
            for seq in &page {
                if churn.page_sent {
                    table.remove(seq);
                } else {
                    table.insert(*seq, false);
                }
                owed.remove(seq);
            }
            let seqs: Vec<i64> = table.keys().copied().collect();
            for flip in &churn.flips {
                if seqs.is_empty() {
                    break;
                }
                let seq = seqs[flip.index(seqs.len())];
                let eligible = table.get(&seq).copied().unwrap_or(false);
                if eligible {
                    table.insert(seq, false);
                    owed.remove(&seq);
                } else if revive {
                    table.insert(seq, true);
                }
            }
            let first_new_seq = table.keys().next_back().copied().unwrap_or(0).max(boundary) + 1;
            for (seq, eligible) in (first_new_seq..).zip(&churn.inserts) {
                table.insert(seq, *eligible);
            }

            if end == PageEnd::Wrapped {
                prop_assert!(page.len() < batch || page.last() == Some(&boundary));
                prop_assert_eq!(cursor.plan(), PassPlan::CaptureBoundary, "wraps to capture a new boundary");
                break;
            }
            prop_assert_eq!(page.len(), batch);
            let limit = if revive { rows_at_start } else { owed_at_start };
            prop_assert!(passes <= limit.div_ceil(batch) + 1, "runaway traversal");
        }
        let bound = if revive { rows_at_start } else { owed_at_start };
        prop_assert!(
            passes <= bound.div_ceil(batch) + 1,
            "{} passes for {} rows in batches of {}",
            passes,
            bound,
            batch
        );
        // Every row eligible at the start that stayed eligible until it was read was read.
        prop_assert!(owed.is_empty(), "never visited: {:?}", owed);
        prop_assert!(visited.iter().all(|seq| *seq <= boundary));
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_row_eligible_below_the_boundary_is_visited_within_n_over_batch_plus_one_passes_swp_3(
        table in initial_table(),
        batch in 1usize..8,
        churns in prop::collection::vec(churn(), 1..20),
    ) {
        simulate(table, batch, &churns, 4, false)?;
    }

    #[test]
    fn rows_becoming_eligible_again_never_stall_a_traversal_swp_3(
        table in initial_table(),
        batch in 1usize..8,
        churns in prop::collection::vec(churn(), 1..20),
    ) {
        simulate(table, batch, &churns, 4, true)?;
    }

    #[test]
    fn a_row_that_stays_eligible_is_visited_despite_continuous_inserts_swp_3(
        old_rows in 1usize..50,
        batch in 1usize..8,
        inserts_per_pass in 1i64..20,
    ) {
        // Every row fails its send except the watched one, which stays eligible, while
        // newer traffic keeps arriving above the boundary.
        let passes = old_rows.div_ceil(batch) + 2;
        let old_rows = i64::try_from(old_rows).unwrap();
        let watched = old_rows;
        let mut highest = old_rows;
        let mut cursor = KeysetCursor::new();
        let mut seen = false;
        for _ in 0..passes {
            let window = match cursor.plan() {
                PassPlan::CaptureBoundary => cursor.begin_traversal(Some(highest)).unwrap(),
                PassPlan::Scan(window) => window,
            };
            let page: Vec<i64> =
                (window.after.max(0) + 1..=window.up_to).filter(|seq| *seq <= old_rows).take(batch).collect();
            seen |= page.contains(&watched);
            cursor.record_page(&page, batch);
            highest += inserts_per_pass;
            if seen {
                break;
            }
        }
        prop_assert!(seen, "row {} starved by newer traffic", watched);
    }
}

// ---------------------------------------------------------------------------------------
// Eligibility and retention (SWP-2, LAN-4, RET-1..3)
// ---------------------------------------------------------------------------------------

fn outbox_row() -> impl Strategy<Value = OutboxRow> {
    (
        any::<i64>(),
        timestamp(),
        0i64..=1_000_000_000_000,
        prop::option::of("[a-z0-9-]{1,12}"),
        prop::option::of(any::<u128>()),
        0i32..100,
    )
        .prop_map(|(seq, created_at, later, lane, token, attempts)| OutboxRow {
            seq,
            created_at,
            visible_at: Timestamp::from_micros(created_at.as_micros().saturating_add(later)),
            lane,
            claim_token: token.map(Uuid::from_u128),
            attempts,
        })
}

proptest! {
    #[test]
    fn recovery_never_selects_a_lane_row_lan_4(
        row in outbox_row(),
        lane in "[a-z]{1,8}",
        now in timestamp(),
        delay in any_duration(),
    ) {
        let row = OutboxRow { lane: Some(lane), ..row };
        prop_assert!(!recovery_eligible(&row, now, delay));
        prop_assert!(!dispatch_claimable(&row, now));
    }

    #[test]
    fn recovery_is_the_sql_predicate_swp_2(row in outbox_row(), now in timestamp(), delay in any_duration()) {
        // The storage crate's WHERE clause, written out once more.
        let expected = row.lane.is_none()
            && row.visible_at <= now
            && row.created_at.as_micros() <= now.as_micros().saturating_sub(micros(delay));
        prop_assert_eq!(recovery_eligible(&row, now, delay), expected);
    }

    #[test]
    fn eligibility_stays_as_now_grows_swp_2(
        row in outbox_row(),
        now in timestamp(),
        later in any_duration(),
        delay in any_duration(),
    ) {
        let later_now = now.saturating_add(later);
        if recovery_eligible(&row, now, delay) {
            prop_assert!(recovery_eligible(&row, later_now, delay));
        }
        if dispatch_claimable(&row, now) {
            prop_assert!(dispatch_claimable(&row, later_now));
        }
    }

    #[test]
    fn infinite_retention_never_expires_ret_3(at in any::<i64>(), now in any::<i64>()) {
        let (at, now) = (Timestamp::from_micros(at), Timestamp::from_micros(now));
        prop_assert!(!dead_row_expired(at, now, Retention::Keep));
        prop_assert!(!inbox_row_expired(at, now, Retention::Keep));
        prop_assert_eq!(retention_cutoff(now, Retention::Keep), None);
    }

    #[test]
    fn the_outbox_never_expires_by_age_ret_1(now in any::<i64>(), retention in any_duration()) {
        let now = Timestamp::from_micros(now);
        prop_assert_eq!(RetentionTable::Outbox.cutoff(now, Retention::After(retention)), None);
        prop_assert_eq!(CleanupOptions::default().retention(RetentionTable::Outbox), Retention::Keep);
    }

    #[test]
    fn retention_deletes_strictly_older_rows_and_stays_expired_ret_2(
        at in timestamp(),
        now in timestamp(),
        later in any_duration(),
        keep in any_duration(),
    ) {
        let retention = Retention::After(keep);
        let expected = at.as_micros() < now.as_micros().saturating_sub(micros(keep));
        prop_assert_eq!(dead_row_expired(at, now, retention), expected);
        prop_assert_eq!(inbox_row_expired(at, now, retention), expected);
        if expected {
            prop_assert!(dead_row_expired(at, now.saturating_add(later), retention));
        }
    }

    #[test]
    fn without_max_attempts_nothing_is_poison_dsp_5(attempts in any::<u32>(), permanent in any::<bool>()) {
        let class = if permanent { ErrorClass::Permanent } else { ErrorClass::Transient };
        prop_assert!(!is_poison(attempts, None, class));
        prop_assert!(is_poison(attempts, NonZeroU32::new(1), ErrorClass::Permanent));
    }
}

// ---------------------------------------------------------------------------------------
// Dead-letter policies (DLP-2, DLP-4, DLP-5) and the circuit breaker (DSP-6)
// ---------------------------------------------------------------------------------------

fn redrive_policy() -> impl Strategy<Value = DeadLetterPolicy> {
    (0u64..=30 * 86_400, 1u64..=60 * 86_400).prop_map(|(after, extra)| {
        DeadLetterPolicy::redrive(Duration::from_secs(after), Duration::from_secs(after + extra)).unwrap()
    })
}

fn dead_letter() -> impl Strategy<Value = DeadLetterRow> {
    let reason = prop::option::of(prop_oneof![Just("handler"), Just("max_handled"), Just(UNACCEPTABLE)]);
    (prop::option::of("[a-z.]{1,12}"), timestamp(), 0i64..=100 * 86_400_000_000, reason).prop_map(
        |(topic, created, wait, reason)| DeadLetterRow {
            original_topic: topic,
            created_at: created,
            dead_lettered_at: Timestamp::from_micros(created.as_micros() + wait),
            rejection_reason: reason.map(str::to_owned),
        },
    )
}

proptest! {
    #[test]
    fn redrive_never_happens_past_give_up_after_dlp_2(
        policy in redrive_policy(),
        row in dead_letter(),
        since_dead in 0i64..=200 * 86_400_000_000,
    ) {
        let now = Timestamp::from_micros(row.dead_lettered_at.as_micros() + since_dead);
        let relayer_core::DeadLetterAction::Redrive { after, give_up_after } = policy.action() else {
            return Err(TestCaseError::fail("a redrive policy"));
        };
        let decision = policy.decide(&row, now);
        if now.duration_since(row.created_at) >= give_up_after {
            prop_assert_ne!(decision, DeadLetterDecision::Redrive);
        }
        if matches!(decision, DeadLetterDecision::Redrive | DeadLetterDecision::GaveUp) {
            prop_assert!(now.duration_since(row.dead_lettered_at) >= after);
        }
        let undecodable = row.rejection_reason.as_deref() == Some(UNACCEPTABLE);
        prop_assert_eq!(row.original_topic.is_none() || undecodable, decision == DeadLetterDecision::Untouched);
    }

    #[test]
    fn expire_waits_exactly_after_dlp_2(after in 0u64..=86_400, row in dead_letter(), since_dead in 0i64..=200_000_000_000) {
        let policy = DeadLetterPolicy::expire(Duration::from_secs(after));
        let now = Timestamp::from_micros(row.dead_lettered_at.as_micros() + since_dead);
        // Expiry needs no destination: undecodable dead letters expire like any other.
        let expected = match row.original_topic {
            None => DeadLetterDecision::Untouched,
            Some(_) if since_dead >= micros(Duration::from_secs(after)) => DeadLetterDecision::Expire,
            Some(_) => DeadLetterDecision::Wait,
        };
        prop_assert_eq!(policy.decide(&row, now), expected);
    }

    #[test]
    fn give_up_after_must_exceed_after_dlp_2(after in any_duration(), shorter in any_duration()) {
        let give_up_after = after.saturating_sub(shorter);
        let error = DeadLetterPolicy::redrive(after, give_up_after).unwrap_err();
        prop_assert!(error.to_string().starts_with("give_up_after: "));
    }

    #[test]
    fn a_policy_set_takes_one_policy_per_type_dlp_1(
        types in prop::collection::vec(("[a-c]{1,2}", "[x-z]{1,2}", any::<bool>()), 0..8),
    ) {
        let rules: Vec<DeadLetterRule> = types
            .iter()
            .map(|(topic, dlq, outbox)| {
                let policy = DeadLetterPolicy::expire(Duration::ZERO);
                if *outbox { DeadLetterRule::outbox(topic.as_str(), dlq.as_str(), policy) }
                else { DeadLetterRule::queue(topic.as_str(), dlq.as_str(), policy) }
            })
            .collect();
        let distinct: BTreeSet<&DeadLetterType> = rules.iter().map(DeadLetterRule::message_type).collect();
        match DeadLetterPolicies::new(rules.clone()) {
            Ok(set) => {
                prop_assert_eq!(distinct.len(), rules.len());
                prop_assert_eq!(set.rules(), &rules[..]);
            }
            Err(DeadLetterSetupError::DuplicateType { message_type }) => {
                prop_assert!(distinct.len() < rules.len());
                prop_assert!(distinct.contains(&message_type));
            }
            Err(other) => prop_assert!(false, "unexpected refusal: {}", other),
        }
    }

    #[test]
    fn a_queue_policy_starts_iff_exactly_one_subscription_dead_letters_into_its_queue_dlp_6(
        subscriptions in prop::collection::vec(
            (prop_oneof![Just("orders"), Just("invoices")], prop::option::of(prop_oneof![Just("dead"), Just("other")])),
            0..5,
        ),
    ) {
        let policy = DeadLetterPolicy::redrive(Duration::ZERO, Duration::from_secs(60)).unwrap();
        let set = DeadLetterPolicies::new([DeadLetterRule::queue("orders", "dead", policy)]).unwrap();
        let queues: Vec<SubscriptionQueues> =
            subscriptions.iter().map(|(queue, dlq)| SubscriptionQueues::new(*queue, *dlq)).collect();
        let dead_lettering: Vec<&str> = subscriptions
            .iter()
            .filter(|(queue, _)| *queue == "orders")
            .filter_map(|(_, dlq)| *dlq)
            .collect();
        prop_assert_eq!(set.check_subscriptions(&queues).is_ok(), dead_lettering == ["dead"]);
    }

    #[test]
    fn an_open_breaker_skips_until_cool_down_then_probes_once_dsp_6(
        threshold in 1u32..10,
        cool_down in 1u64..=3_600,
        opened in timestamp(),
        early in 0u64..3_600,
    ) {
        let cool_down = Duration::from_secs(cool_down);
        let mut breaker = CircuitBreaker::new(threshold, cool_down).unwrap();
        for _ in 0..threshold - 1 {
            breaker.record_failure(opened);
            prop_assert!(breaker.allows(opened), "closed below the threshold");
        }
        breaker.record_failure(opened);
        prop_assert_eq!(breaker.state(), BreakerState::Open { opened_at: opened });
        let early = Duration::from_secs(early).min(cool_down - Duration::from_secs(1));
        prop_assert!(!breaker.allows(opened.saturating_add(early)));
        let due = opened.saturating_add(cool_down);
        prop_assert!(breaker.allows(due));
        prop_assert!(!breaker.allows(due), "a single probe");
        breaker.record_success();
        prop_assert!(breaker.allows(due));
    }
}

// ---------------------------------------------------------------------------------------
// Durations and options (OPT-2, OPT-3)
// ---------------------------------------------------------------------------------------

fn interval() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..=MAX_INTERVAL.as_secs()).prop_map(Duration::from_secs),
        (1u64..=10_000).prop_map(Duration::from_millis)
    ]
}

fn lease() -> impl Strategy<Value = Duration> {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    (millis(MIN_LEASE)..=millis(MAX_LEASE)).prop_map(Duration::from_millis)
}

fn retention() -> impl Strategy<Value = Retention> {
    prop_oneof![
        Just(Retention::Keep),
        (1u64..=1_000 * 86_400).prop_map(|s| Retention::After(Duration::from_secs(s)))
    ]
}

fn batch_size() -> impl Strategy<Value = u32> {
    1..=MAX_BATCH_SIZE
}

prop_compose! {
    fn dispatcher_options()(
        batch in batch_size(),
        claim in lease(),
        max_attempts in prop::option::of(1u32..1_000),
        (retry_base, retry_max) in (interval(), interval()).prop_map(|(a, b)| (a.min(b), a.max(b))),
        threshold in 1u32..100,
        cool_down in interval(),
        poll in interval(),
        max_backoff in interval(),
        body in 1usize..=MAX_BODY_BYTES_LIMIT,
        concurrency in 1u32..=64,
        linger_ms in 0u64..=1_000,
    ) -> DispatcherOptions {
        DispatcherOptions::builder()
            .batch_size(batch)
            .claim_duration(claim)
            .max_attempts(max_attempts.and_then(NonZeroU32::new))
            .retry_base(retry_base)
            .retry_max(retry_max)
            .breaker_threshold(NonZeroU32::new(threshold).unwrap())
            .breaker_cool_down(cool_down)
            .poll_interval(poll)
            .max_backoff(max_backoff)
            // Within the memory ceiling (OPT-3): the largest body this batch and concurrency allow.
            .max_body_bytes(body.min(usize::try_from(MAX_DISPATCH_MEMORY_BYTES / (u64::from(batch) * 2 * (u64::from(concurrency) + 1))).unwrap()))
            .concurrency(concurrency)
            .linger(Duration::from_millis(linger_ms))
            .build()
            .unwrap()
    }
}

/// A lease and an interval shorter than it (LDR-2: the lease outlives the wait).
fn lease_and_interval() -> impl Strategy<Value = (Duration, Duration)> {
    lease().prop_flat_map(|lease| {
        let millis = u64::try_from(lease.as_millis()).unwrap();
        (Just(lease), (1..millis).prop_map(Duration::from_millis))
    })
}

prop_compose! {
    fn sweeper_options()(
        batch in batch_size(),
        delay in prop_oneof![Just(Duration::ZERO), interval()],
        (lease, sweep) in lease_and_interval(),
        max_backoff in interval(),
    ) -> SweeperOptions {
        SweeperOptions::builder()
            .batch_size(batch)
            .recovery_delay(delay)
            .sweep_interval(sweep)
            .lease_duration(lease)
            .max_backoff(max_backoff)
            .build()
            .unwrap()
    }
}

prop_compose! {
    fn cleanup_options()(
        batch in batch_size(),
        (lease, every) in lease_and_interval(),
        dead in retention(),
        inbox in retention(),
        budget in interval(),
        max_backoff in interval(),
    ) -> CleanupOptions {
        CleanupOptions::builder()
            .batch_size(batch)
            .cleanup_interval(every)
            .dead_retention(dead)
            .inbox_retention(inbox)
            .lease_duration(lease)
            .pass_budget(budget)
            .max_backoff(max_backoff)
            .build()
            .unwrap()
    }
}

prop_compose! {
    fn dead_letter_options()(batch in batch_size(), max_backoff in interval(), (lease, every) in lease_and_interval()) -> DeadLetterOptions {
        DeadLetterOptions::builder().interval(every).batch_size(batch).max_backoff(max_backoff).lease_duration(lease).build().unwrap()
    }
}

/// Serializes, deserializes and compares, fingerprints included.
fn round_trips<T>(options: &T, fingerprint: impl Fn(&T) -> String) -> Result<(), TestCaseError>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_string(options).unwrap();
    let back: T = serde_json::from_str(&json).unwrap();
    prop_assert_eq!(&back, options, "{}", json);
    prop_assert_eq!(fingerprint(&back), fingerprint(options));
    Ok(())
}

/// A value out of range for `field`, as configuration would write it.
fn out_of_range(field: &'static str) -> BoxedStrategy<Value> {
    let too_long = (MAX_INTERVAL.as_secs() + 1..=MAX_INTERVAL.as_secs() * 100)
        .prop_map(|s| json!(format_duration(Duration::from_secs(s))));
    match field {
        "batch_size" => {
            prop_oneof![Just(json!(0)), (MAX_BATCH_SIZE + 1..=u32::MAX).prop_map(|n| json!(n))].boxed()
        }
        "lease_duration" | "claim_duration" => prop_oneof![
            (0u64..1_000).prop_map(|ms| json!(format_duration(Duration::from_millis(ms)))),
            (MAX_LEASE.as_secs() + 1..=1_000_000)
                .prop_map(|s| json!(format_duration(Duration::from_secs(s)))),
        ]
        .boxed(),
        "recovery_delay" => too_long.boxed(),
        "dead_retention" | "inbox_retention" => prop_oneof![
            Just(json!("0s")),
            (MAX_RETENTION.as_secs() / 86_400 + 1..=100_000_000).prop_map(|days| json!(format!("{days}d"))),
        ]
        .boxed(),
        "max_attempts" | "breaker_threshold" => Just(json!(0)).boxed(),
        "max_body_bytes" => {
            prop_oneof![Just(json!(0)), ((1u64 << 30) + 1..=1 << 40).prop_map(|n| json!(n))].boxed()
        }
        "concurrency" => prop_oneof![Just(json!(0)), (65u32..=u32::MAX).prop_map(|n| json!(n))].boxed(),
        "linger" => {
            (1_001u64..=100_000).prop_map(|ms| json!(format_duration(Duration::from_millis(ms)))).boxed()
        }
        // Every other field is an interval, backoff or budget.
        _ => prop_oneof![Just(json!("0s")), too_long].boxed(),
    }
}

/// Every field of every options type, with its section.
const FIELDS: &[(&str, &[&str])] = &[
    (
        "dispatcher",
        &[
            "batch_size",
            "claim_duration",
            "max_attempts",
            "retry_base",
            "retry_max",
            "breaker_threshold",
            "breaker_cool_down",
            "poll_interval",
            "max_backoff",
            "max_body_bytes",
            "concurrency",
            "linger",
        ],
    ),
    ("sweeper", &["batch_size", "recovery_delay", "sweep_interval", "lease_duration", "max_backoff"]),
    (
        "cleanup",
        &[
            "batch_size",
            "cleanup_interval",
            "dead_retention",
            "inbox_retention",
            "lease_duration",
            "pass_budget",
            "max_backoff",
        ],
    ),
    ("dead_letter", &["interval", "batch_size", "max_backoff", "lease_duration"]),
];

fn section_and_field() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop::sample::select(
        FIELDS
            .iter()
            .flat_map(|(section, fields)| fields.iter().map(move |field| (*section, *field)))
            .collect::<Vec<_>>(),
    )
}

/// Deserializes `config` into the options type of `section`, keeping only the error.
fn deserialize_section(section: &str, config: Value) -> Result<(), String> {
    fn read<T: serde::de::DeserializeOwned>(config: Value) -> Result<(), String> {
        serde_json::from_value::<T>(config).map(drop).map_err(|error| error.to_string())
    }
    match section {
        "dispatcher" => read::<DispatcherOptions>(config),
        "sweeper" => read::<SweeperOptions>(config),
        "cleanup" => read::<CleanupOptions>(config),
        _ => read::<DeadLetterOptions>(config),
    }
}

proptest! {
    #[test]
    fn durations_format_and_parse_back_exactly_opt_2(duration in any_duration()) {
        let text = format_duration(duration);
        prop_assert_eq!(parse_duration(&text), Ok(duration), "{}", text);
    }

    #[test]
    fn whatever_parses_formats_to_the_same_duration_opt_2(text in "[0-9]{0,4}(d|h|m|s|ms|us|ns|x|\\.)?[0-9]{0,3}[a-z]{0,2}") {
        if let Ok(duration) = parse_duration(&text) {
            prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        } else {
            let error = parse_duration(&text).unwrap_err().to_string();
            prop_assert!(error.contains(&format!("{text:?}")), "{}", error);
        }
    }

    #[test]
    fn options_round_trip_through_serde_opt_2(
        dispatcher in dispatcher_options(),
        sweeper in sweeper_options(),
        cleanup in cleanup_options(),
        dead_letter in dead_letter_options(),
    ) {
        round_trips(&dispatcher, DispatcherOptions::fingerprint)?;
        round_trips(&sweeper, SweeperOptions::fingerprint)?;
        round_trips(&cleanup, CleanupOptions::fingerprint)?;
        round_trips(&dead_letter, DeadLetterOptions::fingerprint)?;
    }

    #[test]
    fn every_out_of_range_value_is_refused_naming_its_field_opt_3(
        ((section, field), value) in section_and_field()
            .prop_flat_map(|(section, field)| (Just((section, field)), out_of_range(field))),
    ) {
        let error = deserialize_section(section, json!({ field: value })).unwrap_err();
        let named = format!("{section}.{field}: ");
        prop_assert!(error.contains(&named), "{}", error);
    }

    #[test]
    fn unknown_keys_are_refused_in_toml_and_json_opt_2(
        (section, _) in section_and_field(),
        key in "[a-z][a-z_]{0,20}",
    ) {
        let known = FIELDS.iter().find(|(name, _)| *name == section).map(|(_, fields)| *fields).unwrap_or(&[]);
        prop_assume!(!known.contains(&key.as_str()));
        let error = deserialize_section(section, json!({ key.clone(): "1s" })).unwrap_err();
        prop_assert!(error.contains(&format!("unknown field `{key}`")), "{}", error);
        let toml_error = match section {
            "dispatcher" => toml::from_str::<DispatcherOptions>(&format!("{key} = \"1s\"")).map(drop),
            "sweeper" => toml::from_str::<SweeperOptions>(&format!("{key} = \"1s\"")).map(drop),
            "cleanup" => toml::from_str::<CleanupOptions>(&format!("{key} = \"1s\"")).map(drop),
            _ => toml::from_str::<DeadLetterOptions>(&format!("{key} = \"1s\"")).map(drop),
        }
        .unwrap_err()
        .to_string();
        prop_assert!(toml_error.contains(&format!("unknown field `{key}`")), "{}", toml_error);
    }

    /// LDR-2: a lease that does not outlive the wait between passes lapses between them; such
    /// options are refused naming the lease and the interval, whatever the values.
    #[test]
    fn a_lease_must_outlive_the_interval_between_passes_ldr_2(
        lease in lease(),
        every in prop_oneof![interval(), lease()],
    ) {
        let sweeper = SweeperOptions::builder().lease_duration(lease).sweep_interval(every).build();
        let cleanup = CleanupOptions::builder().lease_duration(lease).cleanup_interval(every).build();
        if every < lease {
            prop_assert!(sweeper.is_ok() && cleanup.is_ok());
        } else {
            let (sweeper, cleanup) = (sweeper.unwrap_err().to_string(), cleanup.unwrap_err().to_string());
            prop_assert!(sweeper.starts_with("sweeper.lease_duration: ") && sweeper.contains("sweep_interval"), "{}", sweeper);
            prop_assert!(cleanup.starts_with("cleanup.lease_duration: ") && cleanup.contains("cleanup_interval"), "{}", cleanup);
        }
    }

    #[test]
    fn retentions_accept_infinite_or_a_positive_duration_opt_2(dead in retention(), inbox in retention()) {
        let config = format!("dead_retention = \"{dead}\"\ninbox_retention = \"{inbox}\"\n");
        let options: CleanupOptions = toml::from_str(&config).unwrap();
        prop_assert_eq!(options.dead_retention(), dead);
        prop_assert_eq!(options.inbox_retention(), inbox);
    }
}

#[test]
fn infinite_is_accepted_for_both_retentions_opt_2() {
    let options: CleanupOptions =
        toml::from_str("dead_retention = \"infinite\"\ninbox_retention = \"infinite\"").unwrap();
    assert_eq!(options.retention(RetentionTable::Dead), Retention::Keep);
    assert_eq!(options.retention(RetentionTable::Inbox), Retention::Keep);
    let options: CleanupOptions = serde_json::from_str(r#"{"dead_retention":"infinite"}"#).unwrap();
    assert_eq!(options.dead_retention(), Retention::Keep);
    assert_eq!(serde_json::to_value(&options).unwrap()["dead_retention"], json!("infinite"));
}

// ---------------------------------------------------------------------------------------
// Identifiers (NS-2)
// ---------------------------------------------------------------------------------------

fn identifier(max_len: usize) -> impl Strategy<Value = String> {
    regex(&format!("[A-Za-z_][A-Za-z0-9_]{{0,{}}}", max_len - 1))
}

fn regex(pattern: &str) -> impl Strategy<Value = String> + use<> {
    proptest::string::string_regex(pattern).unwrap()
}

fn foreign_char() -> impl Strategy<Value = char> {
    any::<char>().prop_filter("outside [A-Za-z0-9_]", |c| !(c.is_ascii_alphanumeric() || *c == '_'))
}

proptest! {
    #[test]
    fn any_foreign_character_is_refused_ns_2(head in "[a-z_]{0,5}", bad in foreign_char(), tail in "[a-z0-9_]{0,5}") {
        let value = format!("{head}{bad}{tail}");
        let error = Namespace::new(value.clone(), "p_").unwrap_err();
        prop_assert_eq!(error.kind(), IdentifierKind::Schema);
        prop_assert_eq!(error.value(), value.as_str());
        let error = Namespace::new("s", value).unwrap_err();
        prop_assert_eq!(error.kind(), IdentifierKind::Prefix);
    }

    #[test]
    fn a_leading_digit_is_refused_ns_2(value in "[0-9][A-Za-z0-9_]{0,20}") {
        prop_assert_eq!(Namespace::new(value.clone(), "p_").unwrap_err().kind(), IdentifierKind::Schema);
        prop_assert_eq!(Namespace::new("s", value).unwrap_err().kind(), IdentifierKind::Prefix);
    }

    #[test]
    fn over_long_identifiers_and_an_empty_schema_are_refused_ns_2(
        schema in regex(&format!("[a-z][a-z0-9_]{{{},{}}}", MAX_IDENTIFIER_LEN, MAX_IDENTIFIER_LEN + 40)),
        prefix in regex(&format!("[a-z][a-z0-9_]{{{},{}}}", MAX_PREFIX_LEN, MAX_PREFIX_LEN + 40)),
        any_prefix in identifier(MAX_PREFIX_LEN),
    ) {
        prop_assert_eq!(Namespace::new(schema, "p_").unwrap_err().kind(), IdentifierKind::Schema);
        prop_assert_eq!(Namespace::new("s", prefix).unwrap_err().kind(), IdentifierKind::Prefix);
        prop_assert_eq!(Namespace::new("", any_prefix).unwrap_err().kind(), IdentifierKind::Schema);
    }

    #[test]
    fn accepted_namespaces_quote_with_exactly_four_quotes_ns_2(
        schema in identifier(MAX_IDENTIFIER_LEN).prop_filter("pg_ is reserved", |s| !s.to_ascii_lowercase().starts_with("pg_")),
        prefix in prop_oneof![Just(String::new()), identifier(MAX_PREFIX_LEN)],
    ) {
        let namespace = Namespace::new(schema.clone(), prefix.clone()).unwrap();
        let table = namespace.table("outbox");
        prop_assert_eq!(&table, &format!("\"{schema}\".\"{prefix}outbox\""));
        prop_assert_eq!(table.matches('"').count(), 4);
    }
}

proptest! {
    /// SWP-3 with capped scans (NS-5): each pass reads at most `cap` rows of the window and
    /// returns up to `batch` eligible ones, reporting how far it read when the cap stopped it.
    /// Every row eligible for the whole traversal is still visited, within
    /// ⌈eligible/batch⌉ + ⌈rows/cap⌉ + 1 passes, and no pass reads more than `cap` rows.
    #[test]
    fn capped_scans_visit_every_eligible_row_within_bounded_passes_swp_3(
        eligible in prop::collection::vec(any::<bool>(), 1..300),
        batch in 1usize..20,
        cap_factor in 1usize..6,
    ) {
        let cap = batch * cap_factor;
        let seqs: Vec<i64> = (1i64..).take(eligible.len()).collect();
        let mut cursor = relayer_core::KeysetCursor::new();
        cursor.begin_traversal(seqs.last().copied());
        let mut visited = BTreeSet::new();
        let mut passes = 0usize;
        let bound = eligible.iter().filter(|e| **e).count().div_ceil(batch) + seqs.len().div_ceil(cap) + 1;
        while let Some(window) = cursor.window() {
            passes += 1;
            prop_assert!(passes <= bound, "{passes} passes exceed the bound {bound}");
            let mut page = relayer_core::RecoveryPage::default();
            let mut read = 0usize;
            for (seq, is_eligible) in seqs.iter().zip(&eligible).filter(|(seq, _)| window.contains(**seq)) {
                if page.eligible.len() == batch {
                    break;
                }
                if read == cap {
                    page.scanned_up_to = page.eligible.last().copied().max(Some(seq - 1));
                    break;
                }
                read += 1;
                if *is_eligible {
                    page.eligible.push(*seq);
                }
            }
            prop_assert!(read <= cap);
            visited.extend(page.eligible.iter().copied());
            cursor.record_scan(&page, batch);
        }
        let expected: BTreeSet<i64> =
            seqs.iter().zip(&eligible).filter(|(_, e)| **e).map(|(seq, _)| *seq).collect();
        prop_assert_eq!(visited, expected);
    }
}
