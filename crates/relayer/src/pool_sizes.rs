//! How many connections each pool the host opens may hold (docs/connections.md).
//!
//! Each pool is sized on its own, from what its workers run at once — every pass holds one
//! connection for all it does (LIF-2) — unless the builder sets its size. Pools open their
//! connections on demand, so a size is a ceiling: an idle host holds fewer.

use crate::error::StartError;

/// Connections a consumer pump's loops hold at once: receive, settle and heartbeat.
const CONSUMER_LOOPS: u32 = 3;

/// The sizes set on the builder; `None`: sized from the workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolSizes {
    pub(crate) dispatcher: Option<u32>,
    pub(crate) maintenance: Option<u32>,
    pub(crate) queue_transport: Option<u32>,
}

/// What the host's workers run at once, per pool: everything sizing needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolDemand {
    /// The dispatcher's `concurrency`, when the host runs one.
    pub(crate) dispatcher_concurrency: Option<u32>,
    /// Whether the host runs the recovery sweeper (it sends through the transports).
    pub(crate) sweeper: bool,
    /// Led workers on the maintenance pool: the sweeper, cleanup, the dead-letter policies.
    pub(crate) led_workers: u32,
    /// Whether the host registers relayer's queue transport.
    pub(crate) queue_transport: bool,
    /// Whether the application lends the maintenance pool (`RelayerBuilder::pool`).
    pub(crate) lent_maintenance: bool,
    /// The consumers, one pool each.
    pub(crate) consumers: Vec<ConsumerDemand>,
}

/// What one consumer pump runs at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConsumerDemand {
    /// The subscribed queue (one subscription per queue per host).
    pub(crate) queue: String,
    /// The subscription's `concurrency`: handlers in flight at once.
    pub(crate) concurrency: u32,
    /// Whether its handler runs inside the inbox boundary, one transaction per call.
    pub(crate) inbox: bool,
}

/// The size of every pool the host opens; `None`: the host does not open that pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolPlan {
    /// The dispatcher's own pool (asynchronous commit).
    pub(crate) dispatcher: Option<u32>,
    /// The sweeper, cleanup, dead-letter policies and the host's bookkeeping; `None` when
    /// the application lends its pool instead.
    pub(crate) maintenance: Option<u32>,
    /// The queue transport's own pool (LIF-2b).
    pub(crate) queue_transport: Option<u32>,
    /// Each consumer's pool, by queue.
    pub(crate) consumers: Vec<(String, u32)>,
}

impl PoolPlan {
    /// Sizes each pool `demand` needs, taking the sizes set in `sizes` as given. Refuses,
    /// naming the setting, a size of zero and a size for a pool the host does not open.
    pub(crate) fn new(demand: &PoolDemand, sizes: PoolSizes) -> Result<PoolPlan, StartError> {
        let dispatcher = sized(
            "dispatcher_pool_size",
            sizes.dispatcher,
            // One per pass loop — `concurrency` unordered loops and the lane loop — and one
            // for `dispatch_now` and lane operations called by the application.
            demand.dispatcher_concurrency.map(|concurrency| concurrency.saturating_add(2)),
            "this host runs no dispatcher",
        )?;
        let maintenance = sized(
            "maintenance_pool_size",
            sizes.maintenance,
            // One per led worker, so their passes never wait for one another, and one for
            // the host's bookkeeping (schema check, settings fingerprints).
            (!demand.lent_maintenance).then(|| demand.led_workers.saturating_add(1)),
            "the maintenance work runs on the application's pool (`pool(…)`), which the host does not size",
        )?;
        let queue_transport = sized(
            "queue_pool_size",
            sizes.queue_transport,
            // One per pass that may send at once: each dispatcher connection's, the sweeper's.
            demand.queue_transport.then(|| {
                let senders = dispatcher.unwrap_or(0).saturating_add(u32::from(demand.sweeper));
                senders.max(1)
            }),
            "this host does not register the queue transport (`queue_transport()`)",
        )?;
        let consumers = demand
            .consumers
            .iter()
            .map(|consumer| {
                // An inbox handler holds a connection for its transaction while it runs.
                let handlers = if consumer.inbox { consumer.concurrency } else { 0 };
                (consumer.queue.clone(), CONSUMER_LOOPS.saturating_add(handlers))
            })
            .collect();
        Ok(PoolPlan { dispatcher, maintenance, queue_transport, consumers })
    }
}

/// The size of one pool: `set` when given, else `needed`; `None` when the host does not
/// open it (`needed` is `None`), which a set size contradicts (`unopened` says why).
fn sized(
    setting: &'static str,
    set: Option<u32>,
    needed: Option<u32>,
    unopened: &'static str,
) -> Result<Option<u32>, StartError> {
    match (set, needed) {
        (Some(0), _) => Err(StartError::Setting {
            setting,
            reason: "0 connections; a pool needs at least one".to_owned(),
        }),
        (Some(_), None) => Err(StartError::Setting { setting, reason: format!("set, but {unopened}") }),
        (Some(size), Some(_)) => Ok(Some(size)),
        (None, needed) => Ok(needed),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn every_worker() -> PoolDemand {
        PoolDemand {
            dispatcher_concurrency: Some(4),
            sweeper: true,
            led_workers: 3,
            queue_transport: true,
            lent_maintenance: false,
            consumers: vec![
                ConsumerDemand { queue: "orders".to_owned(), concurrency: 8, inbox: true },
                ConsumerDemand { queue: "audit".to_owned(), concurrency: 8, inbox: false },
            ],
        }
    }

    #[test]
    fn each_pool_is_sized_from_what_its_workers_run_at_once() {
        let plan = PoolPlan::new(&every_worker(), PoolSizes::default()).unwrap();
        assert_eq!(
            plan,
            PoolPlan {
                dispatcher: Some(6),
                maintenance: Some(4),
                queue_transport: Some(7),
                consumers: vec![("orders".to_owned(), 11), ("audit".to_owned(), 3)],
            }
        );
        // Bookkeeping alone, and a queue transport nothing sends through.
        let quiet = PoolDemand { queue_transport: true, ..PoolDemand::default() };
        let plan = PoolPlan::new(&quiet, PoolSizes::default()).unwrap();
        assert_eq!((plan.dispatcher, plan.maintenance, plan.queue_transport), (None, Some(1), Some(1)));
    }

    #[test]
    fn a_set_size_is_taken_as_given_and_only_for_its_own_pool() {
        let sizes = PoolSizes { dispatcher: Some(2), maintenance: None, queue_transport: None };
        let plan = PoolPlan::new(&every_worker(), sizes).unwrap();
        // The queue transport serves the two dispatcher connections and the sweeper.
        assert_eq!((plan.dispatcher, plan.maintenance, plan.queue_transport), (Some(2), Some(4), Some(3)));
        let sizes = PoolSizes { dispatcher: None, maintenance: Some(1), queue_transport: Some(9) };
        let plan = PoolPlan::new(&every_worker(), sizes).unwrap();
        assert_eq!((plan.dispatcher, plan.maintenance, plan.queue_transport), (Some(6), Some(1), Some(9)));
    }

    #[test]
    fn a_lent_maintenance_pool_is_not_opened_nor_sized_lif_1() {
        let lent = PoolDemand { lent_maintenance: true, ..every_worker() };
        assert_eq!(PoolPlan::new(&lent, PoolSizes::default()).unwrap().maintenance, None);
        let sizes = PoolSizes { maintenance: Some(2), ..PoolSizes::default() };
        let error = PoolPlan::new(&lent, sizes).unwrap_err();
        assert_eq!(
            error.to_string(),
            "relayer setup: maintenance_pool_size: set, but the maintenance work runs on the \
             application's pool (`pool(…)`), which the host does not size"
        );
    }

    #[test]
    fn a_size_of_zero_or_for_a_pool_not_opened_is_refused_naming_the_setting_opt_5() {
        let cases = [
            (
                PoolSizes { dispatcher: Some(0), ..PoolSizes::default() },
                every_worker(),
                "relayer setup: dispatcher_pool_size: 0 connections; a pool needs at least one",
            ),
            (
                PoolSizes { maintenance: Some(0), ..PoolSizes::default() },
                every_worker(),
                "relayer setup: maintenance_pool_size: 0 connections; a pool needs at least one",
            ),
            (
                PoolSizes { queue_transport: Some(0), ..PoolSizes::default() },
                every_worker(),
                "relayer setup: queue_pool_size: 0 connections; a pool needs at least one",
            ),
            (
                PoolSizes { dispatcher: Some(3), ..PoolSizes::default() },
                PoolDemand::default(),
                "relayer setup: dispatcher_pool_size: set, but this host runs no dispatcher",
            ),
            (
                PoolSizes { queue_transport: Some(3), ..PoolSizes::default() },
                PoolDemand::default(),
                "relayer setup: queue_pool_size: set, but this host does not register the queue transport (`queue_transport()`)",
            ),
        ];
        for (sizes, demand, expected) in cases {
            let error = PoolPlan::new(&demand, sizes).unwrap_err();
            assert!(matches!(error, StartError::Setting { .. }), "{error:?}");
            assert_eq!(error.to_string(), expected);
        }
    }

    fn demands() -> impl Strategy<Value = PoolDemand> {
        let consumer = (1..=64u32, any::<bool>());
        (
            proptest::option::of(1..=64u32),
            any::<bool>(),
            0..=3u32,
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec(consumer, 0..4),
        )
            .prop_map(
                |(dispatcher_concurrency, sweeper, led, queue_transport, lent_maintenance, consumers)| {
                    PoolDemand {
                        dispatcher_concurrency,
                        sweeper,
                        // The sweeper is one of the led workers.
                        led_workers: led.max(u32::from(sweeper)),
                        queue_transport,
                        lent_maintenance,
                        consumers: consumers
                            .into_iter()
                            .enumerate()
                            .map(|(n, (concurrency, inbox))| ConsumerDemand {
                                queue: format!("q{n}"),
                                concurrency,
                                inbox,
                            })
                            .collect(),
                    }
                },
            )
    }

    fn sizes() -> impl Strategy<Value = PoolSizes> {
        let size = || proptest::option::of(0..=8u32);
        (size(), size(), size()).prop_map(|(dispatcher, maintenance, queue_transport)| PoolSizes {
            dispatcher,
            maintenance,
            queue_transport,
        })
    }

    proptest! {
        /// A plan opens exactly the pools the workers need, each with at least one
        /// connection: a set size as given, else enough that every loop of its workers
        /// holds a connection at once. A set size of 0 or for a pool not opened is refused.
        #[test]
        fn a_plan_opens_each_needed_pool_at_its_own_size_lif_2(demand in demands(), sizes in sizes()) {
            let opened = [
                (sizes.dispatcher, demand.dispatcher_concurrency.is_some()),
                (sizes.maintenance, !demand.lent_maintenance),
                (sizes.queue_transport, demand.queue_transport),
            ];
            let refused = opened.iter().any(|(set, opens)| *set == Some(0) || (set.is_some() && !opens));
            let plan = PoolPlan::new(&demand, sizes);
            prop_assert_eq!(plan.is_err(), refused, "{:?}", plan);
            let Ok(plan) = plan else { return Ok(()) };

            let planned = [plan.dispatcher, plan.maintenance, plan.queue_transport];
            for ((set, opens), size) in opened.iter().zip(planned) {
                prop_assert_eq!(size.is_some(), *opens);
                prop_assert!(size.is_none_or(|size| size >= 1));
                if let (Some(set), Some(size)) = (set, size) {
                    prop_assert_eq!(size, *set);
                }
            }
            if let (None, Some(concurrency)) = (sizes.dispatcher, demand.dispatcher_concurrency) {
                // The unordered loops and the lane loop, and one to spare.
                prop_assert!(plan.dispatcher.unwrap() > concurrency + 1);
            }
            if sizes.maintenance.is_none() && !demand.lent_maintenance {
                prop_assert!(plan.maintenance.unwrap() > demand.led_workers);
            }
            if let (None, true) = (sizes.queue_transport, demand.queue_transport) {
                let senders = plan.dispatcher.unwrap_or(0) + u32::from(demand.sweeper);
                prop_assert!(plan.queue_transport.unwrap() >= senders.max(1));
            }
            prop_assert_eq!(plan.consumers.len(), demand.consumers.len());
            for ((queue, size), consumer) in plan.consumers.iter().zip(&demand.consumers) {
                prop_assert_eq!(queue, &consumer.queue);
                let handlers = if consumer.inbox { consumer.concurrency } else { 0 };
                prop_assert_eq!(*size, CONSUMER_LOOPS + handlers);
            }
        }
    }
}
