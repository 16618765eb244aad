//! What a tripped destination's backlog costs another destination's claim (DSP-6, NS-5).
//!
//! A large outbox (1% due rows of a healthy destination, the rest scheduled an hour ahead)
//! is vacuumed, and one 100-row claim is measured (auto_explain, buffers) and rolled back:
//! `claim_buffers`. Then the same outbox is filled again behind 100,000 older due rows of a
//! failing destination; the claim with that destination in its tripped list is printed
//! (the filter alone), the dispatcher's trip statement holds the backlog back (what a
//! dispatcher runs once when that destination's breaker trips, in statements of at most
//! `HOLD_BACK_BATCH` rows, DSP-6b), and after vacuum the same claim is measured again:
//! `tripped_claim_buffers`. The claim before vacuum (dead index entries the hold-back
//! left) and the hold-back itself (every statement, and the largest) are printed too.
//!
//! Last, the same outbox behind 100,000 older due rows of a transport the claiming process
//! does not register (TRN-6: a rolling deploy adding it, another service's): the claim of
//! a process registering only `queue` is measured: `unregistered_claim_buffers`.

use std::time::Duration;

use relayer_core::{Delivery, NewMessage};
use relayer_postgres::{OutboxStatements, OutboxWriter};
use uuid::Uuid;

use crate::maintenance::{ExplainedSession, vacuum};
use crate::scratch::{BenchResult, Scratch, connect};

/// Rows of the failing destination's backlog.
const BACKLOG: usize = 100_000;

/// Returns (claim_buffers, tripped_claim_buffers, unregistered_claim_buffers).
pub(crate) async fn claim_buffers(scratch: &Scratch, quick: bool) -> BenchResult<(u64, u64, u64)> {
    let rows = if quick { 200_000 } else { 1_000_000 };
    let filler = connect(&scratch.config).await?;
    let outbox = OutboxStatements::new(&scratch.namespace);
    let mut session = ExplainedSession::open(scratch).await?;
    let down = vec![("queue".to_owned(), "down".to_owned())];

    fill(scratch, &filler, rows, None).await?;
    let _ = session.drain();
    let claimed = claim_once(&mut session, &outbox, &[]).await?;
    let without = measure(&format!("one {claimed}-row claim on {rows} rows"), &mut session);

    // The same outbox, with the failing destination's backlog older than every healthy
    // due row: the order a backlog builds up in, and the one a claim meets it in.
    fill(scratch, &filler, rows, Some("queue")).await?;
    let _ = session.drain();
    claim_once(&mut session, &outbox, &down).await?;
    measure(
        &format!("the same claim behind {BACKLOG} due rows of a tripped destination, filtered only"),
        &mut session,
    );
    let held = outbox.hold_back(&**session.client(), "queue", "down", Duration::from_secs(30)).await?;
    let statements: Vec<u64> = session.drain().iter().map(|statement| statement.buffers).collect();
    println!(
        "  hold-back when the breaker trips (once per trip): {held} rows in {} statements of at most {} rows, \
         {} buffers (the largest statement {})",
        statements.len(),
        relayer_postgres::HOLD_BACK_BATCH,
        statements.iter().sum::<u64>(),
        statements.iter().max().copied().unwrap_or(0)
    );
    claim_once(&mut session, &outbox, &down).await?;
    measure("the claim right after the hold-back, before vacuum", &mut session);
    vacuum(&filler, scratch).await?;
    let _ = session.drain();
    let claimed = claim_once(&mut session, &outbox, &down).await?;
    let with =
        measure(&format!("one {claimed}-row claim with the held-back backlog, after vacuum"), &mut session);

    // TRN-6: the backlog belongs to a transport this process lacks; its claims read `queue`.
    fill(scratch, &filler, rows, Some("elsewhere")).await?;
    let _ = session.drain();
    let registered = OutboxStatements::new(&scratch.namespace).with_transports(["queue"]);
    let claimed = claim_once(&mut session, &registered, &[]).await?;
    let unregistered = measure(
        &format!("one {claimed}-row claim behind {BACKLOG} due rows of a transport this process lacks"),
        &mut session,
    );
    Ok((without, with, unregistered))
}

/// An empty outbox filled with `rows` rows of `queue`, 1% of them due for a healthy
/// destination and the rest scheduled an hour ahead — after, with a `backlog` transport,
/// [`BACKLOG`] due rows of it to the failing destination written first — then vacuumed.
async fn fill(
    scratch: &Scratch,
    filler: &tokio_postgres::Client,
    rows: usize,
    backlog: Option<&str>,
) -> BenchResult<()> {
    scratch.truncate().await?;
    let writer = OutboxWriter::new(&scratch.namespace, ["queue", "elsewhere"]);
    if let Some(transport) = backlog {
        for start in (0..BACKLOG).step_by(5_000) {
            let batch: Vec<NewMessage> = (start..start + 5_000)
                .map(|i| NewMessage::new(transport, "down", format!("{{\"down\":{i}}}").into_bytes()))
                .collect();
            writer.enqueue(filler, &batch).await?;
        }
    }
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
        writer.enqueue(filler, &batch).await?;
    }
    vacuum(filler, scratch).await
}

/// One 100-row claim, rolled back so the outbox stays as it was; returns the rows claimed.
async fn claim_once(
    session: &mut ExplainedSession,
    outbox: &OutboxStatements,
    tripped: &[(String, String)],
) -> BenchResult<usize> {
    session.client().batch_execute("BEGIN").await?;
    let claimed = outbox
        .claim_due(&**session.client(), Uuid::new_v4(), Duration::from_secs(30), 100, tripped)
        .await?
        .messages
        .len();
    session.client().batch_execute("ROLLBACK").await?;
    Ok(claimed)
}

/// The buffers of the claims `session` ran since the last drain, printed with their plans.
fn measure(what: &str, session: &mut ExplainedSession) -> u64 {
    let claims: Vec<_> = session
        .drain()
        .into_iter()
        .filter(|statement| statement.query.contains("claim_token = $1"))
        .collect();
    let buffers: u64 = claims.iter().map(|statement| statement.buffers).sum();
    println!("  {what}: {buffers} buffers");
    for claim in &claims {
        print!("{}", claim.plan);
    }
    buffers
}
