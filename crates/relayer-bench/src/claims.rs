//! `cargo xtask bench claims [--quick]`: what a claimed row costs PostgreSQL, in raw SQL,
//! for the two ways a dispatcher could hold rows while it sends them.
//!
//! - **committed claim** (DSP-1, what relayer does): an `UPDATE` committed on its own sets
//!   the claim token and the deadline (`visible_at`, an indexed column, so every claimed
//!   row gets a new version and new index entries), then a delete fenced by the token.
//!   Both commit with `synchronous_commit = off`, as relayer's do (DSP-7a).
//! - **transaction-held claim** (what DSP-1 rules out): `SELECT … FOR UPDATE SKIP LOCKED`
//!   and the delete in one transaction, the row locks being the claim; the same columns
//!   read, the same commit setting.
//!
//! Neither sends anything: both loops only claim and delete, two drainers side by side
//! (the dispatcher's default unordered loops), batches of 100, on an outbox filled
//! through [`OutboxWriter`] before each clock starts. The broker benchmark's NATS ratio is
//! bounded by the first figure on a machine whose cores PostgreSQL shares with the broker
//! (docs/performance.md, "Broker transports"); the second says what the rejected design
//! would have bought.
//!
//! The last line is `RESULT committed_claim_rows_per_s=<x> held_claim_rows_per_s=<x>
//! held_over_committed=<x>`: the median rates, and the median of the per-round ratios.

use std::time::Instant;

use futures_util::future::join_all;
use relayer_core::NewMessage;
use relayer_postgres::OutboxWriter;

use crate::scratch::{BenchResult, Scratch, body, connect};

/// Rows per claim, as the dispatcher's default batch.
const BATCH: i64 = 100;
/// Drainers side by side, as the dispatcher's default unordered loops.
const DRAINERS: usize = 2;
/// The columns a claim returns (the dispatcher decodes these into envelopes).
const COLUMNS: &str = "seq, message_id, transport, destination, body, headers, trace_context, \
                       lane, created_at, deliver_at, attempts";

/// How a drainer holds the rows it claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// A token and a deadline committed on their own, then a fenced delete (DSP-1, DSP-3).
    Committed,
    /// Row locks inside one transaction that also deletes them.
    InTransaction,
}

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let rows = if quick { 60_000 } else { 200_000 };
    let rounds = if quick { 3 } else { 5 };
    println!(
        "claims benchmark: {rows} rows per run, batches of {BATCH}, {DRAINERS} drainers, \
         median of {rounds} rounds"
    );
    let scratch = Scratch::new().await?;
    let outcome = rounds_of(&scratch, rows, rounds).await;
    scratch.drop_schema().await?;
    let (committed, held, ratio) = outcome?;
    println!(
        "RESULT committed_claim_rows_per_s={committed:.0} held_claim_rows_per_s={held:.0} \
         held_over_committed={ratio:.2}"
    );
    Ok(())
}

/// Alternates the two runs `rounds` times; returns the median rate of each and the median
/// of the per-round ratios (back-to-back runs share the machine's momentary load).
async fn rounds_of(scratch: &Scratch, rows: usize, rounds: usize) -> BenchResult<(f64, f64, f64)> {
    let (mut committed, mut held, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let c = drain_run(scratch, rows, Hold::Committed).await?;
        let h = drain_run(scratch, rows, Hold::InTransaction).await?;
        println!(
            "  committed claim {c:>8.0} rows/s   transaction-held claim {h:>8.0} rows/s   ratio {:.2}",
            h / c
        );
        committed.push(c);
        held.push(h);
        ratios.push(h / c);
    }
    Ok((median(committed), median(held), median(ratios)))
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
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
    let due = format!(
        "SELECT seq FROM {outbox} WHERE lane IS NULL AND visible_at <= now() \
         ORDER BY visible_at LIMIT $1 FOR UPDATE SKIP LOCKED"
    );
    let claim = client
        .prepare(&format!(
            "UPDATE {outbox} SET claim_token = $2, visible_at = now() + interval '30 s' \
             WHERE seq = ANY(ARRAY({due})) RETURNING {COLUMNS}"
        ))
        .await?;
    let fenced_delete = client
        .prepare(&format!("DELETE FROM {outbox} WHERE seq = ANY($1::int8[]) AND claim_token = $2"))
        .await?;
    let lock = client
        .prepare(&format!(
            "SELECT {COLUMNS} FROM {outbox} WHERE lane IS NULL AND visible_at <= now() \
             ORDER BY visible_at LIMIT $1 FOR UPDATE SKIP LOCKED"
        ))
        .await?;
    let delete = client.prepare(&format!("DELETE FROM {outbox} WHERE seq = ANY($1::int8[])")).await?;
    let mut moved = 0;
    loop {
        let deleted = match hold {
            Hold::Committed => {
                let token = uuid::Uuid::new_v4();
                let claimed = client.query(&claim, &[&BATCH, &token]).await?;
                let seqs: Vec<i64> = claimed.iter().map(|row| row.get(0)).collect();
                if seqs.is_empty() { 0 } else { client.execute(&fenced_delete, &[&seqs, &token]).await? }
            }
            Hold::InTransaction => {
                // Two round trips, as the committed claim's: BEGIN travels with the lock,
                // COMMIT with the delete (the client pipelines requests in flight together).
                let (_, locked) =
                    tokio::try_join!(client.batch_execute("BEGIN"), client.query(&lock, &[&BATCH]))?;
                let seqs: Vec<i64> = locked.iter().map(|row| row.get(0)).collect();
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&seqs];
                let (deleted, ()) =
                    tokio::try_join!(client.execute(&delete, &params), client.batch_execute("COMMIT"))?;
                deleted
            }
        };
        if deleted == 0 {
            return Ok(moved);
        }
        moved += deleted;
    }
}
