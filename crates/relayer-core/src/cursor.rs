//! The recovery sweeper's keyset cursor (SWP-3), as a pure state machine.
//!
//! Outbox rows carry a `seq` assigned in ascending order at insert. The sweeper walks the
//! pending unordered rows in `seq` order, one page of at most `batch_size` eligible rows
//! per pass. A *traversal* starts by capturing a fixed boundary: the highest pending
//! unordered `seq` at that moment, eligible or not. Each pass then scans
//! `seq > after AND seq <= boundary ORDER BY seq LIMIT batch_size` and moves `after` to
//! the last `seq` it saw. Rows inserted during the traversal get higher `seq`s and fall
//! outside the boundary, so a steady stream of new traffic cannot keep the cursor from
//! reaching older rows: every row below the boundary that stays eligible is seen within
//! `⌈n / batch_size⌉ + 1` passes of the traversal's start, `n` being the number of rows
//! the window yields. When a page comes back empty or short, the window is exhausted: the
//! cursor wraps to the start, and the next pass captures a new boundary. Rows the cursor
//! passed while they were not eligible — a failed send backing off, a schedule not yet
//! due, a live claim — are picked up by a later traversal once they become eligible, so a
//! failing destination cannot hide later rows, and later rows cannot starve earlier ones.
//!
//! The cursor holds no rows and does no I/O. A pass asks it for a [`PassPlan`], runs the
//! SQL the plan names and reports what it read:
//!
//! ```
//! use relayer_core::cursor::{KeysetCursor, PassPlan, PageEnd};
//!
//! let mut cursor = KeysetCursor::new();
//! let window = match cursor.plan() {
//!     PassPlan::CaptureBoundary => {
//!         // SELECT max(seq) FROM outbox WHERE lane IS NULL  →  Some(7)
//!         cursor.begin_traversal(Some(7)).expect("rows are pending")
//!     }
//!     PassPlan::Scan(window) => window,
//! };
//! assert_eq!((window.after, window.up_to), (KeysetCursor::START, 7));
//! // SELECT seq … WHERE seq > after AND seq <= up_to … ORDER BY seq LIMIT 2  →  [3, 5]
//! assert_eq!(cursor.record_page(&[3, 5], 2), PageEnd::More);
//! assert_eq!(cursor.plan(), PassPlan::Scan(relayer_core::cursor::ScanWindow { after: 5, up_to: 7 }));
//! // The next page is short: the window is exhausted and the next pass starts over.
//! assert_eq!(cursor.record_page(&[6], 2), PageEnd::Wrapped);
//! assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
//! ```
//!
//! Losing leadership should [`reset`](KeysetCursor::reset) the cursor: starting a
//! traversal over is always safe, it only costs a rescan.

/// The `seq` window one pass scans: `seq > after AND seq <= up_to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScanWindow {
    /// Exclusive lower bound: the last `seq` an earlier page of this traversal returned,
    /// or [`KeysetCursor::START`].
    pub after: i64,
    /// Inclusive upper bound: the traversal's boundary.
    pub up_to: i64,
}

impl ScanWindow {
    /// Whether `seq` lies in the window.
    pub const fn contains(&self, seq: i64) -> bool {
        seq > self.after && seq <= self.up_to
    }
}

/// What one recovery scan of a window found: the eligible `seq`s (ascending, at most a
/// batch), and — when the scan stopped at its cap of rows read before it filled the batch —
/// the last `seq` it read, so the cursor moves past rows that are pending but not eligible
/// (young, scheduled, backing off) instead of reading them again on every pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryPage {
    /// Recovery-eligible `seq`s, ascending.
    pub eligible: Vec<i64>,
    /// The last `seq` read when the scan's row cap stopped it; `None` when the scan ended
    /// at the batch or at the window's end.
    pub scanned_up_to: Option<i64>,
}

/// What the next pass must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PassPlan {
    /// No traversal is under way: read the highest pending unordered `seq` and pass it to
    /// [`KeysetCursor::begin_traversal`].
    CaptureBoundary,
    /// Scan this window.
    Scan(ScanWindow),
}

/// How a page left the traversal, as returned by [`KeysetCursor::record_page`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageEnd {
    /// The page was full and below the boundary: the traversal continues after it.
    More,
    /// The window is exhausted (the page was empty, short, or reached the boundary): the
    /// next pass captures a new boundary.
    Wrapped,
}

/// The sweeper's position in the outbox (SWP-3). See the [module docs](self).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KeysetCursor {
    /// `None` between traversals.
    window: Option<ScanWindow>,
}

impl KeysetCursor {
    /// The `after` of a traversal's first page: below every `seq`.
    pub const START: i64 = i64::MIN;

    /// A cursor between traversals: its first pass captures a boundary.
    pub const fn new() -> Self {
        KeysetCursor { window: None }
    }

    /// What the next pass must do.
    pub const fn plan(&self) -> PassPlan {
        match self.window {
            None => PassPlan::CaptureBoundary,
            Some(window) => PassPlan::Scan(window),
        }
    }

    /// The window of the current traversal; `None` when a boundary must be captured first.
    pub const fn window(&self) -> Option<ScanWindow> {
        self.window
    }

    /// Starts a traversal up to `highest_pending`, the highest pending unordered `seq` read
    /// just now, discarding any traversal under way. `None` (nothing pending) leaves the
    /// cursor idle. Returns the window to scan.
    pub fn begin_traversal(&mut self, highest_pending: Option<i64>) -> Option<ScanWindow> {
        self.window = highest_pending.map(|boundary| ScanWindow { after: Self::START, up_to: boundary });
        self.window
    }

    /// Records the `seq`s a scan of the current window returned (ascending, as the scan
    /// orders them) for a scan limited to `batch_size` rows, and moves the cursor.
    ///
    /// A full page moves `after` to its last `seq`. An empty or short page means nothing
    /// eligible is left in the window, so the cursor wraps; so does a page that reached the
    /// boundary. `seq`s outside the window are ignored, and the cursor never moves back.
    pub fn record_page(&mut self, seqs: &[i64], batch_size: usize) -> PageEnd {
        self.advance(seqs, batch_size, None)
    }

    /// Records a capped scan (see [`RecoveryPage`]). Like [`record_page`](Self::record_page),
    /// except that a short page whose scan stopped at its row cap below the boundary moves
    /// `after` to the last `seq` read instead of wrapping: the window is not exhausted, only
    /// this pass's share of it. Each pass therefore reads a bounded number of rows, and every
    /// row of the window is still reached within the traversal.
    pub fn record_scan(&mut self, page: &RecoveryPage, batch_size: usize) -> PageEnd {
        self.advance(&page.eligible, batch_size, page.scanned_up_to)
    }

    fn advance(&mut self, seqs: &[i64], batch_size: usize, scanned_up_to: Option<i64>) -> PageEnd {
        let Some(window) = self.window else {
            // No traversal under way: there is nothing to advance.
            return PageEnd::Wrapped;
        };
        let last_seen = seqs.iter().copied().filter(|seq| window.contains(*seq)).max();
        let read_to = scanned_up_to.filter(|seq| window.contains(*seq)).max(last_seen);
        match (last_seen, read_to) {
            (Some(last), _) if seqs.len() >= batch_size && last < window.up_to => {
                self.window = Some(ScanWindow { after: last, up_to: window.up_to });
                PageEnd::More
            }
            (_, Some(read)) if scanned_up_to.is_some() && read < window.up_to => {
                self.window = Some(ScanWindow { after: read, up_to: window.up_to });
                PageEnd::More
            }
            _ => {
                self.window = None;
                PageEnd::Wrapped
            }
        }
    }

    /// Abandons the traversal under way; the next pass captures a new boundary. Call it
    /// when leadership is lost or a pass fails before its page was recorded.
    pub fn reset(&mut self) {
        self.window = None;
    }
}

#[cfg(test)]
mod capped_scan_tests {
    use super::*;

    #[test]
    fn a_capped_short_page_moves_past_what_it_read_instead_of_wrapping() {
        let mut cursor = KeysetCursor::new();
        cursor.begin_traversal(Some(1_000));
        let page = RecoveryPage { eligible: vec![7], scanned_up_to: Some(400) };
        assert_eq!(cursor.record_scan(&page, 100), PageEnd::More);
        assert_eq!(cursor.window(), Some(ScanWindow { after: 400, up_to: 1_000 }));
        // A cap that reads to the boundary, or no cap at all, ends the traversal.
        let page = RecoveryPage { eligible: vec![], scanned_up_to: Some(1_000) };
        assert_eq!(cursor.record_scan(&page, 100), PageEnd::Wrapped);
        cursor.begin_traversal(Some(1_000));
        assert_eq!(cursor.record_scan(&RecoveryPage::default(), 100), PageEnd::Wrapped);
    }

    #[test]
    fn a_full_page_advances_to_its_last_eligible_seq_whatever_the_cap() {
        let mut cursor = KeysetCursor::new();
        cursor.begin_traversal(Some(1_000));
        let page = RecoveryPage { eligible: vec![5, 9], scanned_up_to: None };
        assert_eq!(cursor.record_scan(&page, 2), PageEnd::More);
        assert_eq!(cursor.window(), Some(ScanWindow { after: 9, up_to: 1_000 }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanning(after: i64, up_to: i64) -> PassPlan {
        PassPlan::Scan(ScanWindow { after, up_to })
    }

    #[test]
    fn a_new_cursor_captures_a_boundary_first() {
        let mut cursor = KeysetCursor::new();
        assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
        assert_eq!(cursor.window(), None);
        assert_eq!(cursor.begin_traversal(None), None, "nothing pending: stay idle");
        assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
        assert_eq!(
            cursor.begin_traversal(Some(40)),
            Some(ScanWindow { after: KeysetCursor::START, up_to: 40 })
        );
    }

    #[test]
    fn full_pages_advance_to_their_last_seq_swp_3() {
        let mut cursor = KeysetCursor::new();
        cursor.begin_traversal(Some(100));
        assert_eq!(cursor.record_page(&[1, 2, 5], 3), PageEnd::More);
        assert_eq!(cursor.plan(), scanning(5, 100));
        assert_eq!(cursor.record_page(&[9, 20, 31], 3), PageEnd::More);
        assert_eq!(cursor.plan(), scanning(31, 100));
    }

    #[test]
    fn empty_or_short_pages_wrap_swp_3() {
        for page in [&[][..], &[50], &[50, 60]] {
            let mut cursor = KeysetCursor::new();
            cursor.begin_traversal(Some(100));
            assert_eq!(cursor.record_page(page, 3), PageEnd::Wrapped, "{page:?}");
            assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
        }
    }

    #[test]
    fn a_page_reaching_the_boundary_wraps() {
        let mut cursor = KeysetCursor::new();
        cursor.begin_traversal(Some(3));
        assert_eq!(cursor.record_page(&[1, 2, 3], 3), PageEnd::Wrapped);
        assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
    }

    #[test]
    fn seqs_outside_the_window_never_move_the_cursor() {
        let mut cursor = KeysetCursor::new();
        cursor.begin_traversal(Some(100));
        cursor.record_page(&[10, 11], 2);
        // Stale or out-of-window values: at best ignored, never a step back or past the boundary.
        assert_eq!(cursor.record_page(&[3, 12], 2), PageEnd::More);
        assert_eq!(cursor.plan(), scanning(12, 100));
        assert_eq!(cursor.record_page(&[13, 500], 2), PageEnd::More);
        assert_eq!(cursor.plan(), scanning(13, 100));
    }

    #[test]
    fn recording_without_a_traversal_or_resetting_leaves_it_idle() {
        let mut cursor = KeysetCursor::new();
        assert_eq!(cursor.record_page(&[1, 2], 2), PageEnd::Wrapped);
        assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
        cursor.begin_traversal(Some(10));
        cursor.reset();
        assert_eq!(cursor.plan(), PassPlan::CaptureBoundary);
    }
}
