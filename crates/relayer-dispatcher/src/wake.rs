//! The wake-up signals of the dispatcher's pass loops.

use std::sync::Arc;

use tokio::sync::Notify;

/// A notification (or a local commit) wakes one idle unordered loop — permits do not
/// stack, so a burst during a pass coalesces into one more pass — and the lane loop. An
/// unordered loop whose pass claimed a full first batch wakes a sibling at once, before its
/// own batches go out, so a backlog engages every loop while a trickle keeps one busy.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    pub(crate) unordered: Arc<Notify>,
    pub(crate) lanes: Arc<Notify>,
}

impl Wake {
    /// Wakes one unordered loop and the lane loop.
    pub(crate) fn all(&self) {
        self.unordered.notify_one();
        self.lanes.notify_one();
    }
}
