//! What the dispatcher's pass loops share: its store source, send path and wake-up (one
//! [`Shared`] behind an `Arc`), and its log target.

use std::sync::{Arc, Mutex};

use relayer_core::{DispatcherOptions, Namespace};
use relayer_delivery::SendPath;

use crate::wake::Wake;

/// The dispatcher's tracing target.
pub(crate) const TARGET: &str = "relayer::dispatcher";

/// Everything the pass loops share.
pub(crate) struct Shared<S> {
    /// Where each pass opens its one session (LIF-2).
    pub(crate) source: S,
    pub(crate) namespace: Namespace,
    pub(crate) options: DispatcherOptions,
    pub(crate) send: SendPath,
    pub(crate) wake: Arc<Wake>,
    /// The lane key after which the next lane claim starts, so lanes late in key order
    /// get their turn when there are more due lanes than a pass claims.
    pub(crate) lane_cursor: Mutex<String>,
    /// Whether this dispatcher has seen a lane row in the namespace: until then the lane
    /// loop only looks for one (see `lanes_in_use`).
    pub(crate) lanes_seen: std::sync::atomic::AtomicBool,
    /// How long the latest unordered batch took at its transport, in microseconds
    /// (`u64::MAX`: none yet): whether prefetching the next batch pays (DSP-1b).
    pub(crate) last_send_micros: std::sync::atomic::AtomicU64,
}
