//! Properties of [`dead_letter_cycle`]: the start-up check refusing dead-letter queues that
//! lead back to themselves (QUE-2, OPT-5).
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed property.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use relayer_core::{SubscriptionQueues, dead_letter_cycle};

/// Up to six subscriptions over eight queue names, one subscription per queue (as the host
/// requires), each with an optional dead-letter and invalid-message queue.
fn any_setup() -> impl Strategy<Value = Vec<SubscriptionQueues>> {
    let name = || (0u8..8).prop_map(|n| format!("q{n}"));
    proptest::collection::btree_map(
        name(),
        (proptest::option::of(name()), proptest::option::of(name())),
        0..6,
    )
    .prop_map(|subscriptions| {
        subscriptions
            .into_iter()
            .map(|(queue, (dead, invalid))| {
                let entry = SubscriptionQueues::new(queue, dead.as_deref());
                match invalid {
                    Some(invalid) => entry.with_invalid_message_queue(invalid),
                    None => entry,
                }
            })
            .collect()
    })
}

fn edges(setup: &[SubscriptionQueues]) -> BTreeMap<String, BTreeSet<String>> {
    setup
        .iter()
        .map(|s| {
            let targets = s.dead_letter_queue.iter().chain(&s.invalid_message_queue).cloned().collect();
            (s.queue.clone(), targets)
        })
        .collect()
}

/// Whether some queue reaches itself: the brute-force reference.
fn has_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> bool {
    edges.keys().any(|start| {
        let mut seen = BTreeSet::new();
        let mut frontier: Vec<&String> = edges[start].iter().collect();
        while let Some(queue) = frontier.pop() {
            if queue == start {
                return true;
            }
            if seen.insert(queue.clone()) {
                frontier.extend(edges.get(queue).into_iter().flatten());
            }
        }
        false
    })
}

proptest! {
    /// QUE-2, OPT-5: a cycle is reported exactly when one exists, and what is reported is a
    /// real one: each step an edge of the setup, the first queue repeated only at the end.
    #[test]
    fn a_dead_letter_cycle_is_found_exactly_when_one_exists_que_2(setup in any_setup()) {
        let edges = edges(&setup);
        let found = dead_letter_cycle(&setup);
        prop_assert_eq!(found.is_some(), has_cycle(&edges));
        if let Some(cycle) = found {
            prop_assert!(cycle.len() >= 2);
            prop_assert_eq!(cycle.first(), cycle.last());
            let inner: BTreeSet<&String> = cycle[..cycle.len() - 1].iter().collect();
            prop_assert_eq!(inner.len(), cycle.len() - 1, "no queue twice inside {:?}", cycle);
            for step in cycle.windows(2) {
                prop_assert!(edges[&step[0]].contains(&step[1]), "{:?} is not an edge", step);
            }
        }
    }
}
