//! What building a hosted worker reads: the checked setup, the open pools, and how led
//! workers elect their leader.
// With no worker compiled in, nothing reads it.
#![cfg_attr(
    not(any(
        feature = "dispatcher",
        feature = "sweeper",
        feature = "cleanup",
        feature = "consumer",
        feature = "dead-letters"
    )),
    allow(dead_code)
)]

use crate::connect::Connected;
use crate::leader_election::Electorate;
use crate::validate::Setup;

/// Everything a worker's build step reads.
pub(crate) struct WorkerContext<'a> {
    pub(crate) setup: &'a Setup,
    pub(crate) connected: &'a Connected,
    #[cfg_attr(
        not(any(feature = "sweeper", feature = "cleanup", feature = "dead-letters")),
        allow(dead_code)
    )]
    pub(crate) electorate: Electorate<'a>,
}
