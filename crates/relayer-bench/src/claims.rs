//! `cargo xtask bench claims [--quick]`: what a claimed row costs PostgreSQL, in raw SQL,
//! for three ways a dispatcher could hold rows while it sends them.
//!
//! - **committed claim** (DSP-1, what relayer does): an `UPDATE` committed on its own sets
//!   the claim token and the deadline in `visible_at`, then a delete fenced by the token.
//!   `visible_at` is indexed, so every claimed row gets a new version and a new entry in
//!   each index whose predicate it matches (primary key, recovery, due).
//! - **HOT claim** (DSP-1 too, a schema relayer does not have): the deadline goes into a
//!   column no index covers, `claimed_until`, on a table with room left on each page
//!   ([`HOT_FILLFACTOR`]), so the claim can be a heap-only update that touches no index
//!   (each round prints the share that was); the due rows' scan then reads past the rows
//!   under a live claim at the head of the due index, checking each in the heap. Here
//!   only the other drainer's batch is ever under a live claim; a pipelining dispatcher
//!   keeps more.
//! - **transaction-held claim** (what DSP-1 rules out): `SELECT … FOR UPDATE SKIP LOCKED`
//!   and the delete in one transaction, the row locks being the claim.
//!
//! All three read the same columns, take two round trips a batch and commit with
//! `synchronous_commit = off`, as relayer's claims do (DSP-7a). Nothing is sent: two
//! drainers side by side (the dispatcher's default unordered loops) claim and delete
//! batches of 100 from an outbox filled through [`OutboxWriter`] before each clock starts.
//! What the first mode costs bounds the NATS ratio of the broker benchmark on a machine
//! whose cores PostgreSQL shares with the broker (docs/performance.md, "Broker
//! transports").
//!
//! The last line is `RESULT committed_claim_rows_per_s=<x> hot_claim_rows_per_s=<x>
//! held_claim_rows_per_s=<x> hot_over_committed=<x> held_over_committed=<x>`: the median
//! rates, and the medians of the per-round ratios (back-to-back runs share the machine's
//! momentary load).

use std::time::Instant;

use futures_util::future::join_all;
use relayer_core::NewMessage;
use relayer_postgres::OutboxWriter;

use crate::rounds::Spread;
use crate::scratch::{BenchResult, Scratch, body, connect, report_window};

/// Rows per claim, as the dispatcher's default batch.
const BATCH: i64 = 100;
/// Drainers side by side, as the dispatcher's default unordered loops.
const DRAINERS: usize = 2;
/// The columns a claim returns: relayer's claimed columns, which it decodes into envelopes.
const COLUMNS: &str =
    "seq, message_id, transport, destination, body, headers, trace_context, lane, created_at, attempts";

/// The HOT table's fill factor: free room on each page for its rows' claimed versions
/// (each a little wider than the row it replaces), so a claim of the whole page stays on it.
const HOT_FILLFACTOR: u32 = 40;

/// How a drainer holds the rows it claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// A token and a deadline in `visible_at` committed on their own, then a fenced delete.
    Committed,
    /// A token and a deadline in the unindexed `claimed_until`, committed on their own,
    /// then a fenced delete.
    Hot,
    /// Row locks inside one transaction that also deletes them.
    InTransaction,
}

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let rows = if quick { 60_000 } else { 200_000 };
    let rounds = crate::rounds::rounds(quick);
    println!(
        "claims benchmark: {rows} rows per run, batches of {BATCH}, {DRAINERS} drainers, \
         median of {rounds} rounds"
    );
    // relayer's schema, and a copy of it with the HOT claim's column and fill factor.
    let relayer = Scratch::new().await?;
    let (outcome, hot_dropped) = match Scratch::new().await {
        Ok(hot) => (alternate_rounds(&relayer, &hot, rows, rounds).await, hot.drop_schema().await),
        Err(error) => (Err(error), Ok(())),
    };
    // Both schemas are dropped whatever happened; the run's own error is reported first.
    let relayer_dropped = relayer.drop_schema().await;
    let medians = outcome?;
    relayer_dropped?;
    hot_dropped?;
    println!(
        "RESULT committed_claim_rows_per_s={:.0} hot_claim_rows_per_s={:.0} held_claim_rows_per_s={:.0} \
         hot_over_committed={:.2} held_over_committed={:.2}",
        medians.committed, medians.hot, medians.held, medians.hot_ratio, medians.held_ratio
    );
    Ok(())
}

/// The medians over the rounds.
struct Medians {
    committed: f64,
    hot: f64,
    held: f64,
    hot_ratio: f64,
    held_ratio: f64,
}

/// Runs the three modes back to back `rounds` times.
async fn alternate_rounds(
    relayer: &Scratch,
    hot: &Scratch,
    rows: usize,
    rounds: usize,
) -> BenchResult<Medians> {
    let hot_outbox = hot.namespace.table("outbox");
    connect(&hot.config)
        .await?
        .batch_execute(&format!(
            "ALTER TABLE {hot_outbox} ADD COLUMN claimed_until timestamptz, SET (fillfactor = {HOT_FILLFACTOR})"
        ))
        .await?;
    let mut rates: [Spread; 5] = Default::default();
    for _ in 0..rounds {
        let committed_rate = drain_run(relayer, rows, Hold::Committed).await?;
        let updates_before = updates(hot).await?;
        let hot_rate = drain_run(hot, rows, Hold::Hot).await?;
        let (all, heap_only) = updates(hot).await?;
        #[allow(clippy::cast_precision_loss)]
        let heap_only_share = (heap_only - updates_before.1) as f64 / (all - updates_before.0).max(1) as f64;
        let held_rate = drain_run(relayer, rows, Hold::InTransaction).await?;
        println!(
            "  committed claim {committed_rate:>8.0} rows/s   HOT claim {hot_rate:>8.0} rows/s ({:.2}, {:.1}% heap-only)   \
             transaction-held claim {held_rate:>8.0} rows/s ({:.2})",
            hot_rate / committed_rate,
            heap_only_share * 100.0,
            held_rate / committed_rate
        );
        for (series, rate) in rates.iter_mut().zip([
            committed_rate,
            hot_rate,
            held_rate,
            hot_rate / committed_rate,
            held_rate / committed_rate,
        ]) {
            series.push(rate);
        }
    }
    let [committed, hot, held, hot_ratio, held_ratio] = rates;
    println!(
        "  committed claim {} rows/s   HOT claim {} rows/s, ratio {hot_ratio}   transaction-held claim {} rows/s, \
         ratio {held_ratio}",
        committed.rate(),
        hot.rate(),
        held.rate()
    );
    let [committed, hot, held, hot_ratio, held_ratio] =
        [committed, hot, held, hot_ratio, held_ratio].map(|spread| spread.median());
    Ok(Medians { committed, hot, held, hot_ratio, held_ratio })
}

/// The outbox's updates so far, all and heap-only, from the statistics the drainers
/// flushed as they finished.
async fn updates(scratch: &Scratch) -> BenchResult<(i64, i64)> {
    let client = connect(&scratch.config).await?;
    let row = client
        .query_one(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
            &[&scratch.namespace.table("outbox")],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Fills the outbox with `rows` due rows (untimed), then times `DRAINERS` drainers
/// emptying it. Returns rows per second.
async fn drain_run(scratch: &Scratch, rows: usize, hold: Hold) -> BenchResult<f64> {
    scratch.truncate().await?;
    let mut client = connect(&scratch.config).await?;
    let writer = OutboxWriter::new(&scratch.namespace, ["nats"]).without_notify();
    let tx = client.transaction().await?;
    for start in (0..rows).step_by(1000) {
        let batch: Vec<NewMessage> =
            (start..(start + 1000).min(rows)).map(|n| NewMessage::new("nats", "orders", body(n))).collect();
        writer.enqueue(&tx, &batch).await?;
    }
    tx.commit().await?;
    let outbox = scratch.namespace.table("outbox");
    client.batch_execute(&format!("VACUUM ANALYZE {outbox}")).await?;

    let mut drainers = Vec::with_capacity(DRAINERS);
    for _ in 0..DRAINERS {
        let client = connect(&scratch.config).await?;
        client.batch_execute("SET synchronous_commit = off").await?;
        drainers.push(client);
    }
    let started = Instant::now();
    let drained = join_all(drainers.iter().map(|client| drain(client, &outbox, hold))).await;
    let elapsed = started.elapsed().as_secs_f64();
    report_window(&format!("{hold:?} claim"), started);
    let mut moved = 0;
    for outcome in drained {
        moved += outcome?;
    }
    if moved != rows as u64 {
        return Err(format!("{hold:?} run deleted {moved} of {rows} rows").into());
    }
    #[allow(clippy::cast_precision_loss)]
    Ok(moved as f64 / elapsed)
}

/// One drainer: claims and deletes batches until a claim comes back empty.
async fn drain(client: &tokio_postgres::Client, outbox: &str, hold: Hold) -> BenchResult<u64> {
    let claim = match hold {
        Hold::Committed => format!(
            "UPDATE {outbox} SET claim_token = $2, visible_at = now() + interval '30 s' \
             WHERE seq = ANY(ARRAY( \
               SELECT seq FROM {outbox} WHERE lane IS NULL AND visible_at <= now() \
               ORDER BY visible_at LIMIT $1 FOR UPDATE SKIP LOCKED)) \
             RETURNING {COLUMNS}"
        ),
        Hold::Hot => format!(
            "UPDATE {outbox} SET claim_token = $2, claimed_until = now() + interval '30 s' \
             WHERE seq = ANY(ARRAY( \
               SELECT seq FROM {outbox} WHERE lane IS NULL AND visible_at <= now() \
                 AND (claimed_until IS NULL OR claimed_until <= now()) \
               ORDER BY visible_at LIMIT $1 FOR UPDATE SKIP LOCKED)) \
             RETURNING {COLUMNS}"
        ),
        Hold::InTransaction => format!(
            "SELECT {COLUMNS} FROM {outbox} WHERE lane IS NULL AND visible_at <= now() \
             ORDER BY visible_at LIMIT $1 FOR UPDATE SKIP LOCKED"
        ),
    };
    let claim = client.prepare(&claim).await?;
    let fenced_delete = client
        .prepare(&format!("DELETE FROM {outbox} WHERE seq = ANY($1::int8[]) AND claim_token = $2"))
        .await?;
    let delete = client.prepare(&format!("DELETE FROM {outbox} WHERE seq = ANY($1::int8[])")).await?;
    let mut moved = 0;
    loop {
        let deleted = if hold == Hold::InTransaction {
            // Two round trips, as the committed claims take: BEGIN travels with the lock,
            // COMMIT with the delete (the client pipelines requests in flight together).
            let (_, locked) =
                tokio::try_join!(client.batch_execute("BEGIN"), client.query(&claim, &[&BATCH]))?;
            let seqs: Vec<i64> = locked.iter().map(|row| row.get(0)).collect();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&seqs];
            let (deleted, ()) =
                tokio::try_join!(client.execute(&delete, &params), client.batch_execute("COMMIT"))?;
            deleted
        } else {
            let token = uuid::Uuid::new_v4();
            let claimed = client.query(&claim, &[&BATCH, &token]).await?;
            let seqs: Vec<i64> = claimed.iter().map(|row| row.get(0)).collect();
            if seqs.is_empty() { 0 } else { client.execute(&fenced_delete, &[&seqs, &token]).await? }
        };
        if deleted == 0 {
            // This session's counters reach pg_stat_user_tables when it next goes idle.
            client.batch_execute("SELECT pg_stat_force_next_flush()").await?;
            return Ok(moved);
        }
        moved += deleted;
    }
}
