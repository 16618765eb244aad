//! [`OutboxStatements`]: the dispatch statements of one namespace, rendered once, with the
//! index each relies on. The claim (`claim.rs`) and the completion (`completion.rs`) run them.

use relayer_core::Namespace;

use crate::row_codec::{CLAIMED_COLUMNS, RowCodec, registered_ctes};

/// The outbox dispatch statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct OutboxStatements {
    pub(super) claim_due: String,
    pub(super) claim_seqs: String,
    pub(super) hold_back: String,
    pub(super) release_held: String,
    pub(super) complete: String,
    pub(super) delete_accepted: String,
    pub(super) complete_locked: String,
    pub(super) delete_locked: String,
    pub(super) codec: RowCodec,
}

impl OutboxStatements {
    /// Renders the statements for `namespace`. Claims read rows of any transport; see
    /// [`with_transports`](Self::with_transports).
    pub fn new(namespace: &Namespace) -> Self {
        let (outbox, dead) = (namespace.table("outbox"), namespace.table("dead"));
        OutboxStatements {
            // Index: outbox_due_idx ((transport, visible_at) WHERE lane IS NULL): one ordered
            // scan per registered transport ($6, TRN-6; every transport present when NULL),
            // each stopping at $3 rows, merged oldest due first. Rows of a transport this
            // process lacks are never read, however many are due. Tripped destinations
            // ($4, $5) are filtered out (DSP-6); they are few. Each scan locks at most $3
            // rows; those the merge leaves out are unlocked when the statement commits.
            claim_due: format!(
                "UPDATE {outbox} SET claim_token = $1, \
                        visible_at = now() + $2::int8 * interval '1 microsecond' \
                 WHERE seq = ANY(ARRAY( \
                   WITH RECURSIVE {registered} \
                   SELECT due.seq FROM registered r, LATERAL ( \
                     SELECT seq, visible_at FROM {outbox} \
                     WHERE lane IS NULL AND transport = r.t AND visible_at <= now() \
                       AND (transport, destination) NOT IN \
                           (SELECT t, d FROM unnest($4::text[], $5::text[]) AS tripped(t, d)) \
                     ORDER BY visible_at LIMIT $3 FOR UPDATE SKIP LOCKED) due \
                   ORDER BY due.visible_at LIMIT $3)) \
                 RETURNING {CLAIMED_COLUMNS}",
                registered = registered_ctes(&outbox, "$6"),
            ),
            // Index: outbox_due_idx ((transport, visible_at)), per breaker trip (DSP-6), in
            // statements of at most $5 rows: the tripped destination's rows due before its
            // cool-down ends ($4, fixed by the first statement of a hold on the database
            // clock; retries just released included), oldest first — the ones claims meet
            // first — move to $8 (NULL: $4), past every row other destinations have due, so
            // later claims never step over them (a filter in the claim would heap-fetch every
            // one of them in every claim). A hold's first statement moves its head to the
            // cool-down's end, the rest park further out (DSP-6d). Each statement resumes
            // after the last row the previous one picked ($6, $7: a keyset on (visible_at,
            // seq)), so a hold of any backlog reads each row once and no statement is
            // O(backlog); rows already held beyond $4 (a parked tail) are never read again.
            // Rows another claim holds are skipped, not waited for, and rows under a live
            // claim are left to it: their owner defers them (a pass's prefetched batch,
            // DSP-1b) or sends them, and never sees its claim moved. The update reaches the
            // rows it locked by ctid (stable while locked): no primary-key descent per row.
            hold_back: format!(
                "WITH target AS ( \
                   SELECT coalesce($4::timestamptz, now() + $3::int8 * interval '1 microsecond') AS until), \
                 picked AS MATERIALIZED ( \
                   SELECT ctid, seq, visible_at FROM {outbox} \
                   WHERE lane IS NULL AND transport = $1 AND visible_at < (SELECT until FROM target) \
                     AND visible_at >= coalesce($6::timestamptz, '-infinity') \
                     AND ($6::timestamptz IS NULL OR visible_at > $6 OR seq > $7::int8) \
                     AND destination = $2 AND (claim_token IS NULL OR visible_at <= now()) \
                   ORDER BY visible_at, seq LIMIT $5::int8 FOR UPDATE SKIP LOCKED), \
                 held AS ( \
                   UPDATE {outbox} SET visible_at = coalesce($8::timestamptz, (SELECT until FROM target)) \
                   WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked)) RETURNING 1), \
                 last AS (SELECT visible_at, seq FROM picked ORDER BY visible_at DESC, seq DESC LIMIT 1) \
                 SELECT (SELECT count(*) FROM held), (SELECT until FROM target), \
                        (SELECT visible_at FROM last), (SELECT seq FROM last)"
            ),
            // Index: outbox_due_idx ((transport, visible_at)), when a breaker closes (DSP-6d):
            // the destination's rows waiting in (now, now + $3] with no claim — a parked
            // tail, and rows waiting out a retry delay — are due again at once (never
            // before deliver_at), oldest first, in statements of at most $4 rows resuming
            // after the last one ($5, $6). Rows another statement holds are skipped.
            release_held: format!(
                "WITH picked AS MATERIALIZED ( \
                   SELECT ctid, seq, visible_at FROM {outbox} \
                   WHERE lane IS NULL AND transport = $1 AND visible_at > now() \
                     AND visible_at <= now() + $3::int8 * interval '1 microsecond' \
                     AND visible_at >= coalesce($5::timestamptz, '-infinity') \
                     AND ($5::timestamptz IS NULL OR visible_at > $5 OR seq > $6::int8) \
                     AND destination = $2 AND claim_token IS NULL \
                     AND (deliver_at IS NULL OR deliver_at < visible_at) \
                   ORDER BY visible_at, seq LIMIT $4::int8 FOR UPDATE SKIP LOCKED), \
                 released AS ( \
                   UPDATE {outbox} SET visible_at = greatest(now(), coalesce(deliver_at, now())) \
                   WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked)) RETURNING 1), \
                 last AS (SELECT visible_at, seq FROM picked ORDER BY visible_at DESC, seq DESC LIMIT 1) \
                 SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM picked), \
                        (SELECT visible_at FROM last), (SELECT seq FROM last)"
            ),
            // Index: outbox_pkey (seq = ANY($3)). Commit-triggered dispatch of known rows, of
            // the registered transports only ($4, TRN-6; any when NULL).
            claim_seqs: format!(
                "UPDATE {outbox} SET claim_token = $1, \
                        visible_at = now() + $2::int8 * interval '1 microsecond' \
                 WHERE seq = ANY(ARRAY( \
                   SELECT seq FROM {outbox} \
                   WHERE seq = ANY($3::int8[]) AND lane IS NULL AND visible_at <= now() \
                     AND ($4::text[] IS NULL OR transport = ANY($4::text[])) \
                   ORDER BY seq FOR UPDATE SKIP LOCKED)) \
                 RETURNING {CLAIMED_COLUMNS}"
            ),
            // Index: outbox_pkey for every part. One statement, fenced by claim_token ($1):
            // accepted rows deleted, failed rows released or moved to dead, unsent rows
            // released. The parts touch disjoint rows.
            complete: completion_statement(&outbox, &dead, "o.claim_token = $1"),
            // The usual completion — every row accepted — as the plain fenced delete it is:
            // the five-part statement costs more to plan than this one costs to run.
            delete_accepted: accepted_statement(&outbox, "o.claim_token = $1"),
            // The same completion for rows this transaction holds locked: the row locks are
            // the claim, so no token is matched ($1 is bound as NULL). The fence is what a
            // locked page's rows are by construction — unordered, no live claim — so the
            // statement can never touch a lane row or a row a dispatcher holds, even when
            // run outside the transaction that locked its rows.
            complete_locked: completion_statement(&outbox, &dead, LOCKED_FENCE),
            delete_locked: accepted_statement(&outbox, LOCKED_FENCE),
            codec: RowCodec::new(namespace),
        }
    }

    /// Claims read only rows naming one of `names` (the worker's registry, TRN-6): a row
    /// of a transport this process lacks stays pending, unread, for an instance that has
    /// it — never claimed, never counted as an attempt, never buried.
    pub fn with_transports<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.codec = self.codec.with_transports(names);
        self
    }
}

/// The one-statement completion (DSP-3, DSP-5), fenced by `fence` (a predicate over `o`).
fn completion_statement(outbox: &str, dead: &str, fence: &str) -> String {
    format!(
        "WITH accepted AS ( \
           DELETE FROM {outbox} o WHERE o.seq = ANY($2::int8[]) AND {fence} RETURNING o.seq), \
         failed AS ( \
           SELECT * FROM unnest($3::int8[], $4::text[], $5::int8[], $6::bool[]) \
             AS f(seq, error, delay_us, dead)), \
         buried AS ( \
           DELETE FROM {outbox} o USING failed f \
           WHERE o.seq = f.seq AND f.dead AND {fence} \
           RETURNING o.seq, o.message_id, o.transport, o.destination, o.body, o.headers, \
                     o.trace_context, o.lane, o.created_at, o.deliver_at, o.attempts + 1, f.error), \
         moved AS ( \
           INSERT INTO {dead} (seq, message_id, transport, destination, body, headers, \
                               trace_context, lane, created_at, deliver_at, attempts, last_error) \
           SELECT * FROM buried RETURNING seq), \
         released AS ( \
           UPDATE {outbox} o SET attempts = o.attempts + 1, last_error = f.error, \
                  claim_token = NULL, visible_at = now() + f.delay_us * interval '1 microsecond' \
           FROM failed f WHERE o.seq = f.seq AND NOT f.dead AND {fence} \
           RETURNING o.seq), \
         deferred AS ( \
           UPDATE {outbox} o SET claim_token = NULL, \
                  visible_at = now() + d.delay_us * interval '1 microsecond' \
           FROM unnest($7::int8[], $8::int8[]) AS d(seq, delay_us) \
           WHERE o.seq = d.seq AND {fence} RETURNING o.seq) \
         SELECT (SELECT count(*) FROM accepted), (SELECT count(*) FROM released), \
                (SELECT count(*) FROM moved), (SELECT count(*) FROM deferred)"
    )
}

/// The fence of completions of rows the caller's transaction locked: unordered rows with no
/// live claim. Inside that transaction the locked rows always qualify (`now()` is the
/// transaction's start, and no one else can change a locked row).
const LOCKED_FENCE: &str = "$1::uuid IS NULL AND o.lane IS NULL AND o.visible_at <= now()";

/// The accepted part of [`completion_statement`] alone: a fenced delete, counted.
fn accepted_statement(outbox: &str, fence: &str) -> String {
    format!(
        "WITH accepted AS ( \
           DELETE FROM {outbox} o WHERE o.seq = ANY($2::int8[]) AND {fence} RETURNING 1) \
         SELECT count(*) FROM accepted"
    )
}
