//! Ordered lanes (LAN-1..5): one owner per lane, one message in flight per lane.
//!
//! A lane is every outbox row sharing a `lane` key; its *head* is the row with the lowest
//! `seq`. Only the head is ever sent, so a lane is delivered strictly in `seq` order.
//! Ownership lives in the `lanes` table: a dispatcher claims a lane with a token and a
//! deadline on the database clock (an upsert that only succeeds when the lane is neither
//! parked nor held by a live claim), renews the deadline each time it reads the head, and
//! fences every change to the head by its token. After a crash the deadline passes and any
//! dispatcher takes the lane over (LAN-3).
//!
//! A failed head blocks its lane: it is retried after a backoff, and rows behind it wait.
//! With `max_attempts` reached, the lane is *parked* (`parked_at`, `parked_seq`,
//! `parked_reason`): the head stays in the outbox and nothing behind it moves until an
//! operator releases the lane ([`LaneStatements::release_lane`]: the head is tried again
//! with a fresh attempt count) or skips the head ([`LaneStatements::skip_lane_head`]: it
//! moves to the dead table).
//! Both actions are recorded in the audit table (LAN-2, LAN-5). The recovery sweeper and
//! the unordered claims never touch lane rows (`lane IS NULL` everywhere, LAN-4).
//!
//! A lane whose head names a transport this process lacks is never claimed here (TRN-6):
//! it waits, whole, for an instance that has it; a lane already owned whose next head
//! names one comes back as [`LaneHead::Elsewhere`] and is let go, unjudged. A head that cannot be decoded
//! (`crate::row_codec`: malformed headers, an empty destination …) comes back as
//! [`LaneHead::Undecodable`]. Its owner parks the lane with the
//! row's description as the reason ([`HeadFailure::Park`]), exactly as for a poison head:
//! skipping it would reorder the lane, and retrying it could only fail again. The lane
//! never stays claimed and never spins; an operator fixes the row, then releases the lane,
//! or skips the head to the dead table (LAN-5).

use std::time::{Duration, SystemTime};

use relayer_core::time::database_micros;
use relayer_core::{BoundedText, Namespace, Timestamp};

use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::error::StorageError;
use crate::exec::{Executor, one_row};
use crate::row_codec::{CLAIMED_COLUMNS, RowCodec};

// The lane capability's data lives in the core (`relayer_core::store`), so a worker generic
// over the store names it without this crate; the old paths keep working.
pub use relayer_core::store::{HeadFailure, LaneClaim, LaneHead};

/// A CTE named `durable` that turns `synchronous_commit` on for the current transaction
/// only. A statement must join it (e.g. `FROM …, durable`): an unreferenced `SELECT` CTE is
/// never evaluated. It makes the statement's commit durable even on a connection built with
/// `synchronous_commit = off` (the dispatcher's, [`crate::asynchronous_commit`]): a lane
/// head's delete must never be lost (LAN-1), and an operator trusts an action that returned
/// (LAN-2, LAN-5).
const DURABLE: &str = "durable AS (SELECT set_config('synchronous_commit', 'on', true) AS setting)";

/// A CTE named `unparked` (joined with [`DURABLE`]'s `durable`) that clears the park of
/// lane `$1`, locked first, and returns `lane, parked_seq, parked_reason` as they were
/// (RETURNING gives new values, hence the read from `old`). No row: the lane was not parked.
fn unparked_cte(lanes: &str) -> String {
    format!(
        "unparked AS ( \
           UPDATE {lanes} l SET parked_at = NULL, parked_seq = NULL, parked_reason = NULL \
           FROM (SELECT lane, parked_seq, parked_reason FROM {lanes} \
                 WHERE lane = $1 AND parked_at IS NOT NULL FOR UPDATE) old, durable \
           WHERE l.lane = old.lane \
           RETURNING old.lane, old.parked_seq, old.parked_reason)"
    )
}

/// A parked lane, as operators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedLane {
    /// The lane key.
    pub lane: String,
    /// When it was parked, on the database clock.
    pub parked_at: Timestamp,
    /// The head that could not be delivered.
    pub parked_seq: Option<i64>,
    /// The head's last error.
    pub reason: Option<String>,
}

/// The lane statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct LaneStatements {
    any_lane_row: String,
    claim: String,
    head: String,
    accept_head: String,
    fail_head: String,
    release_claim: String,
    release_lane: String,
    skip_head: String,
    parked: String,
    codec: RowCodec,
}

impl LaneStatements {
    /// Renders the statements for `namespace`. Lanes of any transport are claimed; see
    /// [`with_transports`](Self::with_transports).
    pub fn new(namespace: &Namespace) -> Self {
        let (outbox, lanes, dead, audit) = (
            namespace.table("outbox"),
            namespace.table("lanes"),
            namespace.table("dead"),
            namespace.table("audit"),
        );
        LaneStatements {
            // Index: outbox_lane_idx (partial, lane rows only): one descent, one tuple at most.
            any_lane_row: format!("SELECT EXISTS (SELECT 1 FROM {outbox} WHERE lane IS NOT NULL)"),
            // Index: outbox_lane_idx ((lane, seq) INCLUDE (visible_at) WHERE lane IS NOT NULL),
            // walked as a skip scan: one index descent per distinct lane after $4, stopping
            // once $3 free due heads are found or $5 lanes were visited (so lanes that cannot
            // be claimed — parked, scheduled, backing off — cost O($5), never O(lanes));
            // lanes_pkey for ownership and the upsert. The upsert succeeds only for lanes
            // neither parked nor held by a live claim, so two dispatchers never own one lane.
            // Besides the claimed lanes, one row with `visited` set says where the next pass
            // resumes when the visit cap, not the end of the lanes, stopped this one. A lane
            // whose head goes to a tripped destination ($6, $7) is not claimed (DSP-6), nor one
            // whose head names a transport outside the registry ($8, TRN-6; any when NULL):
            // that lane waits, whole, for an instance that has it — rows behind its head
            // never overtake it. One outbox_pkey probe per due head, none without a registry
            // while no breaker is open.
            claim: format!(
                "WITH RECURSIVE heads AS ( \
                   (SELECT lane, seq, visible_at, 1 AS depth FROM {outbox} \
                    WHERE lane IS NOT NULL AND lane > $4 ORDER BY lane, seq LIMIT 1) \
                   UNION ALL \
                   SELECT next.lane, next.seq, next.visible_at, heads.depth + 1 FROM heads, LATERAL ( \
                     SELECT lane, seq, visible_at FROM {outbox} \
                     WHERE lane IS NOT NULL AND lane > heads.lane ORDER BY lane, seq LIMIT 1) next \
                   WHERE heads.depth < $5), \
                 candidates AS ( \
                   SELECT heads.lane FROM heads \
                   WHERE heads.visible_at <= now() \
                     AND NOT EXISTS (SELECT 1 FROM {lanes} l WHERE l.lane = heads.lane \
                                     AND (l.parked_at IS NOT NULL OR l.claimed_until > now())) \
                     AND (($8::text[] IS NULL AND cardinality($6::text[]) = 0) OR EXISTS ( \
                       SELECT 1 FROM {outbox} o WHERE o.seq = heads.seq \
                         AND ($8::text[] IS NULL OR o.transport = ANY($8::text[])) \
                         AND (o.transport, o.destination) NOT IN \
                           (SELECT t, d FROM unnest($6::text[], $7::text[]) AS tripped(t, d)))) \
                   LIMIT $3), \
                 claimed AS ( \
                   INSERT INTO {lanes} AS l (lane, claim_token, claimed_until) \
                   SELECT lane, $1, now() + $2::int8 * interval '1 microsecond' FROM candidates \
                   ON CONFLICT (lane) DO UPDATE \
                     SET claim_token = excluded.claim_token, claimed_until = excluded.claimed_until \
                     WHERE l.parked_at IS NULL AND (l.claimed_until IS NULL OR l.claimed_until <= now()) \
                   RETURNING l.lane) \
                 SELECT lane, NULL::text AS visited FROM claimed \
                 UNION ALL \
                 SELECT NULL, (SELECT lane FROM heads WHERE depth = $5) \
                 WHERE (SELECT count(*) FROM claimed) < $3 AND EXISTS (SELECT 1 FROM heads WHERE depth = $5)"
            ),
            // Index: lanes_pkey (renewal, fenced by token), outbox_lane_idx (head).
            head: format!(
                "WITH owned AS ( \
                   UPDATE {lanes} SET claimed_until = now() + $3::int8 * interval '1 microsecond' \
                   WHERE lane = $1 AND claim_token = $2 AND parked_at IS NULL RETURNING lane) \
                 SELECT h.*, h.visible_at <= now() AS due FROM owned LEFT JOIN LATERAL ( \
                   SELECT {CLAIMED_COLUMNS}, visible_at FROM {outbox} \
                   WHERE lane = owned.lane ORDER BY seq LIMIT 1) h ON true"
            ),
            // Index: lanes_pkey (fence, row-locked so a takeover cannot interleave), outbox_pkey.
            // Durable on any connection ([`DURABLE`]): a lost head delete would replay the
            // head after later heads of its lane were sent — out of order — where a lost
            // unordered delete only replays one message (INVARIANTS LAN-1b).
            accept_head: format!(
                "WITH {DURABLE}, \
                 owner AS (SELECT lane FROM {lanes} WHERE lane = $1 AND claim_token = $2 FOR UPDATE) \
                 DELETE FROM {outbox} o USING owner, durable WHERE o.seq = $3 AND o.lane = owner.lane"
            ),
            // Index: lanes_pkey, outbox_pkey. $6 parks the lane (max_attempts reached): the
            // claim is dropped with the park, the head stays in the outbox.
            fail_head: format!(
                "WITH owner AS ( \
                   UPDATE {lanes} SET \
                     parked_at = CASE WHEN $6 THEN now() END, \
                     parked_seq = CASE WHEN $6 THEN $3::int8 END, \
                     parked_reason = CASE WHEN $6 THEN $4::text END, \
                     claim_token = CASE WHEN $6 THEN NULL ELSE claim_token END, \
                     claimed_until = CASE WHEN $6 THEN NULL ELSE claimed_until END \
                   WHERE lane = $1 AND claim_token = $2 RETURNING lane) \
                 UPDATE {outbox} o SET attempts = o.attempts + 1, last_error = $4, \
                        visible_at = now() + $5::int8 * interval '1 microsecond' \
                 FROM owner WHERE o.seq = $3 AND o.lane = owner.lane"
            ),
            // Index: lanes_pkey, outbox_lane_idx. An empty, unparked lane's row is deleted
            // so the lanes table holds only live lanes; otherwise the claim is dropped.
            release_claim: format!(
                "WITH gone AS ( \
                   DELETE FROM {lanes} WHERE lane = $1 AND claim_token = $2 AND parked_at IS NULL \
                     AND NOT EXISTS (SELECT 1 FROM {outbox} WHERE lane = $1) RETURNING lane) \
                 UPDATE {lanes} SET claim_token = NULL, claimed_until = NULL \
                 WHERE lane = $1 AND claim_token = $2 AND NOT EXISTS (SELECT 1 FROM gone)"
            ),
            // Index: lanes_pkey, outbox_pkey. The head starts over with no attempts and is due
            // at once (LAN-2: released means tried again in full); `last_error` stays.
            release_lane: format!(
                "WITH {DURABLE}, {unparked}, \
                 fresh AS ( \
                   UPDATE {outbox} o SET visible_at = now(), attempts = 0 FROM unparked u \
                   WHERE o.seq = u.parked_seq AND o.lane = u.lane RETURNING o.seq), \
                 audited AS ( \
                   INSERT INTO {audit} (actor, action, subject, detail) \
                   SELECT $2, 'lane.release', u.lane, \
                          jsonb_build_object('seq', u.parked_seq, 'reason', u.parked_reason, \
                                             'head_found', (SELECT count(*) FROM fresh) > 0, \
                                             'attempts_reset', true) \
                   FROM unparked u RETURNING id) \
                 SELECT u.parked_seq FROM unparked u, audited",
                unparked = unparked_cte(&lanes),
            ),
            // Index: lanes_pkey, outbox_pkey; the head moves to dead in the same statement.
            skip_head: format!(
                "WITH {DURABLE}, {unparked}, \
                 buried AS ( \
                   DELETE FROM {outbox} o USING unparked u WHERE o.seq = u.parked_seq AND o.lane = u.lane \
                   RETURNING o.seq, o.message_id, o.transport, o.destination, o.body, o.headers, \
                             o.trace_context, o.lane, o.created_at, o.deliver_at, o.attempts, o.last_error), \
                 moved AS ( \
                   INSERT INTO {dead} (seq, message_id, transport, destination, body, headers, \
                                       trace_context, lane, created_at, deliver_at, attempts, last_error) \
                   SELECT * FROM buried RETURNING seq), \
                 audited AS ( \
                   INSERT INTO {audit} (actor, action, subject, detail) \
                   SELECT $2, 'lane.skip_head', u.lane, \
                          jsonb_build_object('seq', u.parked_seq, 'reason', u.parked_reason) \
                   FROM unparked u RETURNING id) \
                 SELECT (SELECT count(*) FROM audited), (SELECT seq FROM moved)",
                unparked = unparked_cte(&lanes),
            ),
            // Index: lanes_parked_idx.
            parked: format!(
                "SELECT lane, parked_at, parked_seq, parked_reason FROM {lanes} \
                 WHERE parked_at IS NOT NULL ORDER BY parked_at, lane"
            ),
            codec: RowCodec::new(namespace),
        }
    }

    /// Lanes whose head names a transport outside `names` (the worker's registry) are not
    /// claimed (TRN-6): the lane waits, neither parked nor skipped, for an instance that
    /// has the transport.
    pub fn with_transports<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.codec = self.codec.with_transports(names);
        self
    }

    /// Claims up to `limit` lanes whose head is due and which are neither parked nor held,
    /// scanning lane keys after `after` (`""` from the start) and visiting at most
    /// `visit_cap` lanes, for `claim`. A lane whose head goes to one of the `tripped`
    /// (transport, destination) pairs is left alone (DSP-6). Returns the lanes now owned
    /// under `token`, in key order, and where the next claim should resume.
    #[allow(clippy::too_many_arguments)] // Each is one bound parameter of the statement.
    pub async fn claim(
        &self,
        client: &impl Executor,
        token: Uuid,
        claim: Duration,
        limit: u32,
        after: &str,
        visit_cap: u32,
        tripped: &[(String, String)],
    ) -> Result<LaneClaim, StorageError> {
        let (claim_us, limit_rows, cap) =
            (database_micros(claim), i64::from(limit), i64::from(visit_cap.max(1)));
        let tripped_transports: Vec<&str> = tripped.iter().map(|(t, _)| t.as_str()).collect();
        let tripped_destinations: Vec<&str> = tripped.iter().map(|(_, d)| d.as_str()).collect();
        let rows = crate::exec::rows(
            client,
            &self.claim,
            &[
                (&token, Type::UUID),
                (&claim_us, Type::INT8),
                (&limit_rows, Type::INT8),
                (&after, Type::TEXT),
                (&cap, Type::INT8),
                (&tripped_transports, Type::TEXT_ARRAY),
                (&tripped_destinations, Type::TEXT_ARRAY),
                (&self.codec.registered(), Type::TEXT_ARRAY),
            ],
            "claiming lanes",
        )
        .await?;
        let mut lanes = Vec::new();
        let mut visited_to = None;
        for row in &rows {
            match (row.get::<_, Option<String>>(0), row.get::<_, Option<String>>(1)) {
                (Some(lane), _) => lanes.push(lane),
                (None, visited) => visited_to = visited,
            }
        }
        lanes.sort();
        // Resume after the last lane claimed while claims fill the limit, after the last
        // lane visited when the cap stopped the walk, and from the start otherwise.
        let resume_after = match (lanes.last(), visited_to) {
            (Some(last), _) if lanes.len() >= limit as usize => last.clone(),
            (_, Some(visited)) => visited,
            _ => String::new(),
        };
        Ok(LaneClaim { lanes, resume_after })
    }

    /// Renews the claim on `lane` for `claim` and reads its head.
    pub async fn head(
        &self,
        client: &impl Executor,
        lane: &str,
        token: Uuid,
        claim: Duration,
    ) -> Result<LaneHead, StorageError> {
        let claim_us = database_micros(claim);
        let row = crate::exec::rows(
            client,
            &self.head,
            &[(&lane, Type::TEXT), (&token, Type::UUID), (&claim_us, Type::INT8)],
            format!("reading the head of lane {lane:?}"),
        )
        .await?;
        let Some(row) = row.into_iter().next() else { return Ok(LaneHead::Lost) };
        let seq: Option<i64> = row.get(0);
        if seq.is_none() {
            return Ok(LaneHead::Empty);
        }
        let due: bool = row.get("due");
        if !due {
            return Ok(LaneHead::NotDue);
        }
        // Judged before decoding: a head of another instance's transport is not this
        // process's to send, nor — when it cannot be decoded — to park (TRN-6).
        if let Ok(Some(transport)) = row.try_get::<_, Option<&str>>("transport")
            && !self.codec.serves(transport)
        {
            return Ok(LaneHead::Elsewhere);
        }
        Ok(match self.codec.decode(&row, 0)? {
            Ok(head) => LaneHead::Due(head),
            Err(undecodable) => LaneHead::Undecodable(undecodable),
        })
    }

    /// Deletes the accepted head `seq` of `lane`, fenced by the lane claim. Returns whether
    /// it was deleted (false: the lane is no longer ours).
    pub async fn accept_head(
        &self,
        client: &impl Executor,
        lane: &str,
        token: Uuid,
        seq: i64,
    ) -> Result<bool, StorageError> {
        let deleted = crate::exec::affected(
            client,
            &self.accept_head,
            &[(&lane, Type::TEXT), (&token, Type::UUID), (&seq, Type::INT8)],
            format!("deleting the head of lane {lane:?}"),
        )
        .await?;
        Ok(deleted == 1)
    }

    /// Records a failed send of head `seq` of `lane`, fenced by the lane claim: attempts
    /// plus one and the error; then the head is retried later, or the lane parked behind it
    /// (LAN-2). Returns whether the head was updated (false: the lane is no longer ours).
    pub async fn fail_head(
        &self,
        client: &impl Executor,
        lane: &str,
        token: Uuid,
        seq: i64,
        failure: HeadFailure<'_>,
    ) -> Result<bool, StorageError> {
        let (error, retry_after, park) = match failure {
            HeadFailure::Retry { error, after } => (error, after, false),
            HeadFailure::Park { error } => (error, Duration::ZERO, true),
        };
        let delay_us = database_micros(retry_after);
        // External text (SPEC §15): a NUL would fail the statement and the lane would
        // never count the attempt nor park.
        let error = BoundedText::error(error);
        let updated = crate::exec::affected(
            client,
            &self.fail_head,
            &[
                (&lane, Type::TEXT),
                (&token, Type::UUID),
                (&seq, Type::INT8),
                (&error, Type::TEXT),
                (&delay_us, Type::INT8),
                (&park, Type::BOOL),
            ],
            format!("recording a failed send on lane {lane:?}"),
        )
        .await?;
        Ok(updated == 1)
    }

    /// Gives up the claim on `lane` (forgetting the lane when it is empty and not parked).
    pub async fn release_claim(
        &self,
        client: &impl Executor,
        lane: &str,
        token: Uuid,
    ) -> Result<(), StorageError> {
        crate::exec::affected(
            client,
            &self.release_claim,
            &[(&lane, Type::TEXT), (&token, Type::UUID)],
            format!("releasing the claim on lane {lane:?}"),
        )
        .await?;
        Ok(())
    }

    /// Operator action (LAN-2, LAN-5): un-parks `lane`; its head is tried again at once
    /// with a fresh attempt count (`attempts = 0`, so it gets the full `max_attempts`
    /// again; its `last_error` stays). Recorded in the audit table with `actor`, in the
    /// same statement, and committed durably on any connection. Returns the park's head
    /// `seq` (`None`: the lane was not parked, and nothing was changed or audited).
    pub async fn release_lane(
        &self,
        client: &impl Executor,
        lane: &str,
        actor: &str,
    ) -> Result<Option<Option<i64>>, StorageError> {
        let rows = crate::exec::rows(
            client,
            &self.release_lane,
            &[(&lane, Type::TEXT), (&BoundedText::actor(actor), Type::TEXT)],
            format!("releasing lane {lane:?}"),
        )
        .await?;
        Ok(rows.first().map(|row| row.get(0)))
    }

    /// Operator action (LAN-5): moves the head of the parked `lane` to the dead table and
    /// un-parks the lane, so the rows behind it flow. Recorded in the audit table with
    /// `actor`, in the same statement, and committed durably on any connection. Returns the moved head's `seq`, or `None` when the lane was not parked.
    pub async fn skip_lane_head(
        &self,
        client: &impl Executor,
        lane: &str,
        actor: &str,
    ) -> Result<Option<i64>, StorageError> {
        let what = format!("skipping the head of lane {lane:?}");
        let row = one_row(
            client,
            &self.skip_head,
            &[(&lane, Type::TEXT), (&BoundedText::actor(actor), Type::TEXT)],
            &what,
        )
        .await?;
        let audited: i64 = row.get(0);
        Ok(if audited == 0 { None } else { row.get(1) })
    }

    /// Whether the outbox holds any lane row (a namespace that never had one has no lane to
    /// claim).
    pub async fn any_lane_row(&self, client: &impl Executor) -> Result<bool, StorageError> {
        let rows = crate::exec::rows(client, &self.any_lane_row, &[], "looking for lane rows").await?;
        Ok(rows.first().is_some_and(|row| row.get(0)))
    }

    /// Every parked lane, oldest park first (O(parked lanes)).
    pub async fn parked_lanes(&self, client: &impl Executor) -> Result<Vec<ParkedLane>, StorageError> {
        let rows = crate::exec::rows(client, &self.parked, &[], "listing parked lanes").await?;
        Ok(rows
            .iter()
            .map(|row| ParkedLane {
                lane: row.get(0),
                parked_at: Timestamp::from_system_time(row.get::<_, SystemTime>(1)),
                parked_seq: row.get(2),
                reason: row.get(3),
            })
            .collect())
    }
}
