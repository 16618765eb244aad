//! The host's queue consumers (§10): what the builder collects, the start-time checks, and
//! the pumps the host runs.

use std::collections::BTreeSet;
use std::sync::Arc;

use relayer_consumer::{Consumer, ConsumerStats, Handling, Subscription};
use relayer_core::Namespace;
use relayer_postgres::{Connector, StatementMode, connect_pool_with};

use crate::error::StartError;

/// A subscription and its handler, as the builder received them.
pub(crate) struct ConsumerSpec {
    pub(crate) subscription: Subscription,
    pub(crate) handling: Handling,
}

/// Whole-setup checks that need no database (OPT-5): one subscription per queue per host.
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
    Ok(())
}

/// Builds each pump with its own pool: one connection per pass loop, and one per handler
/// in flight for an inbox handler (its transaction).
pub(crate) async fn build(
    specs: Vec<ConsumerSpec>,
    database: &Connector,
    namespace: &Namespace,
    statements: StatementMode,
) -> Result<Vec<Consumer>, StartError> {
    let mut consumers = Vec::with_capacity(specs.len());
    for ConsumerSpec { subscription, handling } in specs {
        let loops = 3;
        let size = match handling {
            Handling::Inbox(_) => subscription.options().concurrency() + loops,
            Handling::Plain(_) => loops,
        };
        let pool =
            connect_pool_with(database.clone(), size, statements).await.map_err(StartError::Connect)?;
        consumers.push(Consumer::new(database.clone(), pool, namespace.clone(), subscription, handling));
    }
    Ok(consumers)
}

/// The counters of each pump, by queue.
pub(crate) fn stats(consumers: &[Consumer]) -> Vec<(String, Arc<ConsumerStats>)> {
    consumers.iter().map(|c| (c.subscription().queue().to_owned(), c.stats())).collect()
}
