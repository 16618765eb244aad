//! The host's queue consumer subscriptions (§10): what the builder collects, and what the
//! setup checks and pool sizing read from them.

use std::collections::BTreeSet;

use relayer_consumer::{Handling, Subscription};
use relayer_core::SubscriptionQueues;

use crate::error::StartError;
use crate::pool_sizes::ConsumerDemand;

/// A subscription and its handler, as the builder received them.
pub(crate) struct ConsumerSpec {
    pub(crate) subscription: Subscription,
    pub(crate) handling: Handling<relayer_postgres::PgSession>,
}

/// Whole-setup checks that need no database (OPT-5): one subscription per queue per host,
/// and no cycle among their dead-letter queues (QUE-2).
pub(crate) fn check(specs: &[ConsumerSpec]) -> Result<(), StartError> {
    let mut queues = BTreeSet::new();
    for spec in specs {
        let queue = spec.subscription.queue();
        if !queues.insert(queue) {
            return Err(StartError::Subscription {
                queue: queue.to_owned(),
                reason: "has two subscriptions on this host; raise its concurrency instead",
            });
        }
    }
    if let Some(cycle) = relayer_core::dead_letter_cycle(&self::queues(specs)) {
        let cycle = cycle.iter().map(|queue| format!("{queue:?}")).collect::<Vec<_>>().join(" → ");
        return Err(StartError::DeadLetterCycle { cycle });
    }
    Ok(())
}

/// What each pump runs at once, for sizing its pool.
pub(crate) fn demand(specs: &[ConsumerSpec]) -> Vec<ConsumerDemand> {
    specs
        .iter()
        .map(|spec| ConsumerDemand {
            queue: spec.subscription.queue().to_owned(),
            concurrency: spec.subscription.options().concurrency(),
            inbox: matches!(spec.handling, Handling::Inbox(_)),
        })
        .collect()
}

/// Each subscription's queue, dead-letter queue and invalid-message queue, for checking
/// dead-letter policies against them (DLP-6).
pub(crate) fn queues(specs: &[ConsumerSpec]) -> Vec<SubscriptionQueues> {
    specs
        .iter()
        .map(|spec| {
            let subscription = &spec.subscription;
            let entry = SubscriptionQueues::new(subscription.queue(), Some(subscription.dead_letter_queue()));
            match subscription.invalid_message_queue() {
                Some(invalid) => entry.with_invalid_message_queue(invalid),
                None => entry,
            }
        })
        .collect()
}
