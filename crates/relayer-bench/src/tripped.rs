//! What a tripped destination's backlog costs another destination's claim (DSP-6, NS-5).
//!
//! A large outbox (1% due rows of a healthy destination, the rest scheduled an hour ahead)
//! is vacuumed, and one 100-row claim is measured (auto_explain, buffers) and rolled back:
//! `claim_buffers`. Then 100,000 due rows of a failing destination are written, the
//! dispatcher's trip statement holds them back (what a dispatcher runs once when that
//! destination's breaker trips), the table is vacuumed, and the same claim — with the
//! destination in its tripped list — is measured again: `tripped_claim_buffers`. The claim
//! before vacuum (dead index entries the hold-back left) and the hold-back itself are
//! printed too.

use std::time::Duration;

use relayer_core::{Delivery, NewMessage};
use relayer_postgres::{OutboxStatements, OutboxWriter};
use uuid::Uuid;

use crate::maintenance::{ExplainedSession, vacuum};
use crate::{BenchResult, Scratch, connect};

/// Rows of the failing destination's backlog.
const BACKLOG: usize = 100_000;

/// Returns (claim_buffers, tripped_claim_buffers).
pub(crate) async fn claim_buffers(scratch: &Scratch, quick: bool) -> BenchResult<(u64, u64)> {
    scratch.truncate().await?;
    let rows = if quick { 200_000 } else { 1_000_000 };
    let writer = OutboxWriter::new(&scratch.namespace, ["queue"]);
    let filler = connect(&scratch.config).await?;
    for start in (0..rows).step_by(5_000) {
        let batch: Vec<NewMessage> = (start..(start + 5_000).min(rows))
            .map(|i| {
                let message = NewMessage::new("queue", "orders", format!("{{\"n\":{i}}}").into_bytes());
                if i % 100 == 0 {
                    message
                } else {
                    message.delivery(Delivery::After(Duration::from_secs(3600)))
                }
            })
            .collect();
        writer.enqueue(&filler, &batch).await?;
    }
    vacuum(&filler, scratch).await?;
    let outbox = OutboxStatements::new(&scratch.namespace);
    let mut session = ExplainedSession::open(scratch).await?;
    let claim = Duration::from_secs(30);
    let down = vec![("queue".to_owned(), "down".to_owned())];
    let measure = |what: &str, session: &mut ExplainedSession| {
        let claim_buffers: u64 =
            session.drain().iter().filter(|s| s.query.contains("claim_token = $1")).map(|s| s.buffers).sum();
        println!("  {what}: {claim_buffers} buffers");
        claim_buffers
    };

    let claim_once = async |session: &mut ExplainedSession,
                            tripped: &[(String, String)]|
           -> BenchResult<usize> {
        session.client.batch_execute("BEGIN").await?;
        let claimed = outbox.claim_due(&*session.client, Uuid::new_v4(), claim, 100, tripped).await?.len();
        session.client.batch_execute("ROLLBACK").await?;
        Ok(claimed)
    };
    let _ = session.drain();
    let claimed = claim_once(&mut session, &[]).await?;
    let without = measure(&format!("one {claimed}-row claim on {rows} rows"), &mut session);

    for start in (0..BACKLOG).step_by(5_000) {
        let batch: Vec<NewMessage> = (start..start + 5_000)
            .map(|i| NewMessage::new("queue", "down", format!("{{\"down\":{i}}}").into_bytes()))
            .collect();
        writer.enqueue(&filler, &batch).await?;
    }
    vacuum(&filler, scratch).await?;
    let _ = session.drain();
    claim_once(&mut session, &down).await?;
    measure(
        &format!("the same claim with {BACKLOG} due rows of a tripped destination, filtered (no hold-back)"),
        &mut session,
    );
    let held = outbox.hold_back(&*session.client, "queue", "down", claim).await?;
    let hold_back: u64 = session.drain().iter().map(|s| s.buffers).sum();
    println!("  hold-back at the trip (once per trip): {held} rows, {hold_back} buffers");
    claim_once(&mut session, &down).await?;
    measure("the claim right after the hold-back, before vacuum", &mut session);
    vacuum(&filler, scratch).await?;
    let _ = session.drain();
    let claimed = claim_once(&mut session, &down).await?;
    let with =
        measure(&format!("one {claimed}-row claim with the held-back backlog, after vacuum"), &mut session);
    Ok((without, with))
}
