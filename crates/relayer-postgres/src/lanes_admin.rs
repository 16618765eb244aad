//! Operator actions on ordered lanes (LAN-2, LAN-5): list, release, skip — each audited.
//!
//! A lane whose head reached `max_attempts` is *parked*: nothing behind the head moves
//! until an operator decides. Two decisions, both recorded in the audit table with the
//! actor in the statement that acts, so the action and its record commit together:
//!
//! - **release**: the park is cleared and the head is tried again at once *with a fresh
//!   attempt count* (`attempts = 0`), so it gets the full `max_attempts` again rather than
//!   parking on its next failure; its `last_error` stays for the record.
//! - **skip**: the park is cleared and the head moves to the dead table
//!   ([`LaneStatements::skip_lane_head`]); the rest of the lane goes on in order. Nothing is
//!   reordered: the head simply never arrives (unless redriven from the dead table, which
//!   puts it at the lane's tail).
//!
//! Both are no-ops on a lane that is not parked, and both are [`LaneStatements`]' own
//! statements, which the dispatcher's `AdministerLanes` runs too: one meaning whichever
//! way an operator acts, durable on any connection. Listings are operator statements: they
//! group the outbox's lane rows (O(lane rows)), not a worker's statement.

use std::time::Duration;

use relayer_core::Namespace;
use tokio_postgres::types::Type;

use crate::error::{StorageError, column};
use crate::exec::Executor;
use crate::lanes::LaneStatements;
use crate::status::elapsed::{duration_from_micros, micros_since};

/// One lane as operators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneListing {
    /// The lane key.
    pub lane: String,
    /// Rows of the lane in the outbox, the head included.
    pub waiting: i64,
    /// The head's `seq`, when the lane has rows.
    pub head_seq: Option<i64>,
    /// The head's failed attempts.
    pub head_attempts: Option<i32>,
    /// The head's last error.
    pub head_error: Option<String>,
    /// How long the lane has been parked; `None` when it is not.
    pub parked_for: Option<Duration>,
    /// The park's reason.
    pub parked_reason: Option<String>,
    /// Whether a dispatcher holds a live claim on it.
    pub owned: bool,
}

/// The lane actions of one namespace (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct LaneAdmin {
    list: String,
    parked_page: String,
    parked: String,
    lanes: LaneStatements,
}

impl LaneAdmin {
    /// The actions for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let (outbox, lanes) = (namespace.table("outbox"), namespace.table("lanes"));
        LaneAdmin {
            // $1: every lane with rows too, not only parked ones. Index: outbox_lane_idx
            // (grouping), lanes_pkey, outbox_pkey (the head).
            list: format!(
                "WITH counted AS (SELECT lane, count(*) AS waiting, min(seq) AS head FROM {outbox} \
                                  WHERE lane IS NOT NULL GROUP BY lane) \
                 SELECT coalesce(c.lane, l.lane), coalesce(c.waiting, 0), c.head, h.attempts, h.last_error, \
                        {parked}, l.parked_reason, coalesce(l.claimed_until > now(), false) \
                 FROM counted c FULL JOIN {lanes} l ON l.lane = c.lane \
                 LEFT JOIN {outbox} h ON h.seq = c.head \
                 WHERE $1 OR l.parked_at IS NOT NULL \
                 ORDER BY l.parked_at NULLS LAST, 1 LIMIT $2",
                parked = micros_since("l.parked_at"),
            ),
            // Bounded, for a page viewed often (the console): at most $1 parked lanes through
            // lanes_parked_idx, each head by outbox_pkey, and each lane's rows counted up to
            // $2 through outbox_lane_idx (past it, $2: a lower bound).
            parked_page: format!(
                "SELECT l.lane, (SELECT count(*) FROM (SELECT 1 FROM {outbox} o WHERE o.lane = l.lane LIMIT $2) AS w), \
                        l.parked_seq, h.attempts, h.last_error, {parked}, l.parked_reason, \
                        coalesce(l.claimed_until > now(), false) \
                 FROM (SELECT * FROM {lanes} WHERE parked_at IS NOT NULL ORDER BY parked_at, lane LIMIT $1) AS l \
                 LEFT JOIN {outbox} h ON h.seq = l.parked_seq \
                 ORDER BY l.parked_at, l.lane",
                parked = micros_since("l.parked_at"),
            ),
            // Index: lanes_pkey.
            parked: format!("SELECT parked_seq FROM {lanes} WHERE lane = $1 AND parked_at IS NOT NULL"),
            lanes: LaneStatements::new(namespace),
        }
    }

    /// Parked lanes (oldest park first), and with `all` every lane that has rows, at most
    /// `limit`.
    pub async fn list(
        &self,
        client: &impl Executor,
        all: bool,
        limit: i64,
    ) -> Result<Vec<LaneListing>, StorageError> {
        let rows = crate::exec::rows(
            client,
            &self.list,
            &[(&all, Type::BOOL), (&limit, Type::INT8)],
            "listing lanes",
        )
        .await?;
        let what = "the lane listing";
        rows.iter()
            .map(|r| {
                Ok(LaneListing {
                    lane: column(r, 0, what)?,
                    waiting: column(r, 1, what)?,
                    head_seq: column(r, 2, what)?,
                    head_attempts: column(r, 3, what)?,
                    head_error: column(r, 4, what)?,
                    parked_for: column::<Option<i64>>(r, 5, what)?.map(duration_from_micros),
                    parked_reason: column(r, 6, what)?,
                    owned: column(r, 7, what)?,
                })
            })
            .collect()
    }

    /// Parked lanes, oldest park first, at most `limit`, without grouping the outbox: each
    /// lane's waiting rows are counted up to `waiting_cap` (a lower bound past it), its head
    /// read by key. What a page viewed often shows, however large the outbox.
    pub async fn parked(
        &self,
        client: &impl Executor,
        limit: i64,
        waiting_cap: i64,
    ) -> Result<Vec<LaneListing>, StorageError> {
        let rows = crate::exec::rows(
            client,
            &self.parked_page,
            &[(&limit, Type::INT8), (&waiting_cap, Type::INT8)],
            "listing parked lanes",
        )
        .await?;
        let what = "the parked lanes";
        rows.iter()
            .map(|r| {
                Ok(LaneListing {
                    lane: column(r, 0, what)?,
                    waiting: column(r, 1, what)?,
                    head_seq: column(r, 2, what)?,
                    head_attempts: column(r, 3, what)?,
                    head_error: column(r, 4, what)?,
                    parked_for: column::<Option<i64>>(r, 5, what)?.map(duration_from_micros),
                    parked_reason: column(r, 6, what)?,
                    owned: column(r, 7, what)?,
                })
            })
            .collect()
    }

    /// The parked `lane`'s head `seq`, as [`release`](Self::release) and
    /// [`skip`](Self::skip) would report it, without changing anything (`None`: the lane is
    /// not parked). What a dry run shows, however many lanes are parked.
    pub async fn parked_head(
        &self,
        client: &impl Executor,
        lane: &str,
    ) -> Result<Option<Option<i64>>, StorageError> {
        let rows = client
            .rows(&self.parked, &[(&lane, Type::TEXT)])
            .await
            .map_err(|e| StorageError::database(format!("reading the park of lane {lane:?}"), e))?;
        rows.first().map(|row| column(row, 0, &format!("the park of lane {lane:?}"))).transpose()
    }

    /// Releases the parked `lane`: its head is tried again at once with a fresh attempt
    /// count; audited as `lane.release` by `actor`. Returns the head's `seq` (`None`: the
    /// lane was not parked, and nothing was changed or audited). The dispatcher's release
    /// runs the same statement ([`LaneStatements::release_lane`]).
    pub async fn release(
        &self,
        client: &impl Executor,
        lane: &str,
        actor: &str,
    ) -> Result<Option<Option<i64>>, StorageError> {
        self.lanes.release_lane(client, lane, actor).await
    }

    /// Skips the head of the parked `lane` to the dead table; the rest of the lane goes on.
    /// Audited as `lane.skip_head` by `actor`. Returns the moved head's `seq` (`None`: the
    /// lane was not parked). The dispatcher's skip runs the same statement
    /// ([`LaneStatements::skip_lane_head`]).
    pub async fn skip(
        &self,
        client: &impl Executor,
        lane: &str,
        actor: &str,
    ) -> Result<Option<i64>, StorageError> {
        self.lanes.skip_lane_head(client, lane, actor).await
    }
}
