//! Claiming outbox rows (DSP-1): due unordered rows, oldest first, or the rows a writer of
//! this process just committed; and holding back a tripped destination's rows (DSP-6).

use std::time::{Duration, SystemTime};

use relayer_core::store::Claimed;
use relayer_core::time::database_micros;
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::statements::OutboxStatements;
use crate::error::StorageError;
use crate::exec::Executor;

/// The most rows one hold-back (or release) statement moves (DSP-6): a hold of a larger
/// backlog takes several statements, so none holds the locks of, or writes, the whole
/// backlog at once.
pub const HOLD_BACK_BATCH: u32 = 5_000;

/// The rows of a hold that wait for the cool-down's end, the oldest (DSP-6d): enough for
/// the breaker's probe and a first claim after it. The rest of the backlog parks
/// [`PARKED_COOL_DOWNS`] cool-downs out, so a failed probe re-holds only these and the
/// rows written since, not the backlog.
pub const HOLD_BACK_HEAD: u32 = 1_000;

/// How many cool-downs a hold parks the rows past its head (DSP-6d): a breaker that closes
/// in the holding process makes them due at once; otherwise they come back by themselves
/// then — a destination down that long costs one move of its backlog per this many
/// cool-downs, not per cool-down.
pub const PARKED_COOL_DOWNS: u32 = 10;

impl OutboxStatements {
    /// Claims up to `limit` due, unordered rows no one holds, oldest due first, for
    /// `claim` (DSP-1), of the registered transports only (TRN-6). Rows of the `tripped`
    /// (transport, destination) pairs are left alone (DSP-6). The claim commits on its own when `client` is not in a transaction.
    pub async fn claim_due(
        &self,
        client: &impl Executor,
        token: Uuid,
        claim: Duration,
        limit: u32,
        tripped: &[(String, String)],
    ) -> Result<Claimed, StorageError> {
        let claim_us = database_micros(claim);
        let limit = i64::from(limit);
        let tripped_transports: Vec<&str> = tripped.iter().map(|(t, _)| t.as_str()).collect();
        let tripped_destinations: Vec<&str> = tripped.iter().map(|(_, d)| d.as_str()).collect();
        let rows = crate::exec::rows(
            client,
            &self.claim_due,
            &[
                (&token, Type::UUID),
                (&claim_us, Type::INT8),
                (&limit, Type::INT8),
                (&tripped_transports, Type::TEXT_ARRAY),
                (&tripped_destinations, Type::TEXT_ARRAY),
                (&self.codec.registered(), Type::TEXT_ARRAY),
            ],
            "claiming due outbox rows",
        )
        .await?;
        self.codec.decode_all(&rows, 0)
    }

    /// Holds back the unordered rows of a destination whose circuit breaker just tripped
    /// that would be due within `cool_down` (DSP-6): none is due again before its breaker
    /// lets a probe through, so claims in the meantime never read them. Attempts are not
    /// counted. The oldest [`HOLD_BACK_HEAD`] rows wait for the cool-down's end, the probe's
    /// moment; the rest park [`PARKED_COOL_DOWNS`] cool-downs out (DSP-6d), so a probe that
    /// fails again re-holds the head and the rows written since, never a parked tail
    /// (rows already held beyond the cool-down are not read). The rows move in statements
    /// of at most [`HOLD_BACK_BATCH`] rows each, oldest first; outside a transaction each
    /// commits on its own, so no statement holds more than a batch of row locks however
    /// large the backlog. Returns how many rows were held back.
    pub async fn hold_back(
        &self,
        client: &impl Executor,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, StorageError> {
        let cool_down_us = database_micros(cool_down);
        let park_after = cool_down.saturating_mul(PARKED_COOL_DOWNS - 1);
        // The head first (to the cool-down's end), then the tail (parked), each in batches.
        let (mut until, mut to): (Option<SystemTime>, Option<SystemTime>) = (None, None);
        let mut after: (Option<SystemTime>, i64) = (None, 0);
        let mut head_left = i64::from(HOLD_BACK_HEAD);
        let mut total = 0;
        loop {
            let batch = if head_left > 0 {
                head_left.min(i64::from(HOLD_BACK_BATCH))
            } else {
                i64::from(HOLD_BACK_BATCH)
            };
            let rows = crate::exec::rows(
                client,
                &self.hold_back,
                &[
                    (&transport, Type::TEXT),
                    (&destination, Type::TEXT),
                    (&cool_down_us, Type::INT8),
                    (&until, Type::TIMESTAMPTZ),
                    (&batch, Type::INT8),
                    (&after.0, Type::TIMESTAMPTZ),
                    (&after.1, Type::INT8),
                    (&to, Type::TIMESTAMPTZ),
                ],
                "holding back a tripped destination's rows",
            )
            .await?;
            let Some(row) = rows.first() else { break };
            let held: i64 = row.get(0);
            total += u64::try_from(held).unwrap_or(0);
            until = row.get(1);
            let full = held >= batch;
            if head_left > 0 {
                head_left -= held;
                if head_left <= 0 {
                    to = until.and_then(|until| until.checked_add(park_after));
                }
            }
            match (row.get::<_, Option<SystemTime>>(2), row.get::<_, Option<i64>>(3)) {
                // A full batch: more may follow, after its last row.
                (Some(visible_at), Some(seq)) if full => after = (Some(visible_at), seq),
                _ => break,
            }
        }
        Ok(total)
    }

    /// Makes the destination's unordered rows that wait, unclaimed, at most `horizon` from
    /// now due at once (never before their `deliver_at`): what a breaker that closes does
    /// to the tail its hold parked (DSP-6d), and to rows waiting out a retry delay, since
    /// the destination just accepted a send. In statements of at most [`HOLD_BACK_BATCH`]
    /// rows, oldest first. Returns how many rows were released.
    pub async fn release_held(
        &self,
        client: &impl Executor,
        transport: &str,
        destination: &str,
        horizon: Duration,
    ) -> Result<u64, StorageError> {
        let horizon_us = database_micros(horizon);
        let batch = i64::from(HOLD_BACK_BATCH);
        let mut after: (Option<SystemTime>, i64) = (None, 0);
        let mut total = 0;
        loop {
            let rows = crate::exec::rows(
                client,
                &self.release_held,
                &[
                    (&transport, Type::TEXT),
                    (&destination, Type::TEXT),
                    (&horizon_us, Type::INT8),
                    (&batch, Type::INT8),
                    (&after.0, Type::TIMESTAMPTZ),
                    (&after.1, Type::INT8),
                ],
                "releasing a recovered destination's held rows",
            )
            .await?;
            let Some(row) = rows.first() else { break };
            let released: i64 = row.get(0);
            let picked: i64 = row.get(1);
            total += u64::try_from(released).unwrap_or(0);
            match (row.get::<_, Option<SystemTime>>(2), row.get::<_, Option<i64>>(3)) {
                (Some(visible_at), Some(seq)) if picked >= batch => after = (Some(visible_at), seq),
                _ => break,
            }
        }
        Ok(total)
    }

    /// Claims those of `seqs` that are unordered, due, free and of a registered transport
    /// (TRN-6), for `claim`: the
    /// commit-triggered fast path for rows this process just wrote (OUT-4).
    pub async fn claim_seqs(
        &self,
        client: &impl Executor,
        token: Uuid,
        claim: Duration,
        seqs: &[i64],
    ) -> Result<Claimed, StorageError> {
        if seqs.is_empty() {
            return Ok(Claimed::default());
        }
        let claim_us = database_micros(claim);
        let rows = crate::exec::rows(
            client,
            &self.claim_seqs,
            &[
                (&token, Type::UUID),
                (&claim_us, Type::INT8),
                (&seqs, Type::INT8_ARRAY),
                (&self.codec.registered(), Type::TEXT_ARRAY),
            ],
            "claiming outbox rows by seq",
        )
        .await?;
        self.codec.decode_all(&rows, 0)
    }
}
