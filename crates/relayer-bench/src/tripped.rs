//! What a tripped destination's backlog costs another destination's claim (DSP-6, NS-5).
//!
//! A large outbox (1% due rows of a healthy destination, the rest scheduled an hour ahead)
//! is vacuumed, and one 100-row claim is measured (auto_explain, buffers) and rolled back:
//! `claim_buffers`. Then the same outbox is filled again behind 100,000 older due rows of a
//! failing destination; the claim with that destination in its tripped list is printed
//! (the filter alone), the dispatcher's trip statement holds the backlog back (what a
//! dispatcher runs once when that destination's breaker trips: its head to the cool-down's
//! end, the rest parked, in statements of at most `HOLD_BACK_BATCH` rows, DSP-6b, DSP-6d):
//! `hold_buffers`; and after vacuum the same claim is measured again:
//! `tripped_claim_buffers`. The claim before vacuum (dead index entries the hold-back
//! left) is printed too.
//!
//! Then the cool-down is made to pass (every row of the destination is moved 30 s earlier,
//! not measured, and vacuumed) and the probe is taken to have failed: the hold a re-trip
//! runs is measured, `retrip_hold_buffers` — the head and nothing parked. Last of this
//! part, the breaker closing: the release of what the hold parked, `release_buffers`.
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

/// What the tripped-destination part measured, in shared buffers.
pub(crate) struct TrippedBuffers {
    /// One claim without a backlog.
    pub(crate) claim: u64,
    /// The same claim with the held-back backlog, after vacuum.
    pub(crate) tripped_claim: u64,
    /// The same claim behind a backlog of a transport the process lacks (TRN-6).
    pub(crate) unregistered_claim: u64,
    /// The hold when the breaker trips (every statement).
    pub(crate) hold: u64,
    /// The hold when the probe fails, one cool-down later (every statement).
    pub(crate) retrip_hold: u64,
    /// The release of the parked rows when the breaker closes (every statement).
    pub(crate) release: u64,
}

impl TrippedBuffers {
    /// The `RESULT` keys of this part.
    pub(crate) fn result(&self) -> String {
        format!(
            "claim_buffers={} tripped_claim_buffers={} unregistered_claim_buffers={} hold_buffers={} \
             retrip_hold_buffers={} release_buffers={}",
            self.claim,
            self.tripped_claim,
            self.unregistered_claim,
            self.hold,
            self.retrip_hold,
            self.release
        )
    }
}

/// Measures the claims, holds and release described in the module docs.
pub(crate) async fn claim_buffers(scratch: &Scratch, quick: bool) -> BenchResult<TrippedBuffers> {
    let rows = if quick { 200_000 } else { 1_000_000 };
    let filler = connect(&scratch.config).await?;
    let outbox = OutboxStatements::new(&scratch.namespace);
    let mut session = ExplainedSession::open(scratch).await?;
    let down = vec![("queue".to_owned(), "down".to_owned())];
    let cool_down = Duration::from_secs(30);

    fill(scratch, &filler, rows, None).await?;
    let _ = session.drain();
    let claimed = claim_once(&mut session, &outbox, &[]).await?;
    let claim = measure(&format!("one {claimed}-row claim on {rows} rows"), &mut session);

    // The same outbox, with the failing destination's backlog older than every healthy
    // due row: the order a backlog builds up in, and the one a claim meets it in.
    fill(scratch, &filler, rows, Some("queue")).await?;
    let _ = session.drain();
    claim_once(&mut session, &outbox, &down).await?;
    measure(
        &format!("the same claim behind {BACKLOG} due rows of a tripped destination, filtered only"),
        &mut session,
    );
    let held = outbox.hold_back(&**session.client(), "queue", "down", cool_down).await?;
    let hold = statements("hold-back when the breaker trips", held, &mut session);
    claim_once(&mut session, &outbox, &down).await?;
    measure("the claim right after the hold-back, before vacuum", &mut session);
    vacuum(&filler, scratch).await?;
    let _ = session.drain();
    let claimed = claim_once(&mut session, &outbox, &down).await?;
    let tripped_claim =
        measure(&format!("one {claimed}-row claim with the held-back backlog, after vacuum"), &mut session);

    // A cool-down later the probe fails: the breaker trips again and holds again.
    let table = scratch.namespace.table("outbox");
    filler
        .execute(
            &format!("UPDATE {table} SET visible_at = visible_at - $1::int8 * interval '1 second' WHERE destination = 'down'"),
            &[&i64::try_from(cool_down.as_secs()).unwrap_or(30)],
        )
        .await?;
    vacuum(&filler, scratch).await?;
    let _ = session.drain();
    let held = outbox.hold_back(&**session.client(), "queue", "down", cool_down).await?;
    let retrip_hold = statements("hold-back when the probe fails, a cool-down later", held, &mut session);
    let horizon = cool_down.saturating_mul(relayer_postgres::PARKED_COOL_DOWNS);
    let released = outbox.release_held(&**session.client(), "queue", "down", horizon).await?;
    let release = statements("release when the breaker closes", released, &mut session);

    // TRN-6: the backlog belongs to a transport this process lacks; its claims read `queue`.
    fill(scratch, &filler, rows, Some("elsewhere")).await?;
    let _ = session.drain();
    let registered = OutboxStatements::new(&scratch.namespace).with_transports(["queue"]);
    let claimed = claim_once(&mut session, &registered, &[]).await?;
    let unregistered_claim = measure(
        &format!("one {claimed}-row claim behind {BACKLOG} due rows of a transport this process lacks"),
        &mut session,
    );
    Ok(TrippedBuffers { claim, tripped_claim, unregistered_claim, hold, retrip_hold, release })
}

/// The buffers of every statement `session` ran since the last drain (a hold or release
/// of `rows` rows), printed with the largest statement's plan; returns their sum.
fn statements(what: &str, rows: u64, session: &mut ExplainedSession) -> u64 {
    let statements = session.drain();
    let buffers: Vec<u64> = statements.iter().map(|statement| statement.buffers).collect();
    let total = buffers.iter().sum::<u64>();
    println!(
        "  {what}: {rows} rows in {} statements of at most {} rows, {total} buffers ({:.1} a row; the largest \
         statement {})",
        buffers.len(),
        relayer_postgres::HOLD_BACK_BATCH,
        total as f64 / rows.max(1) as f64,
        buffers.iter().max().copied().unwrap_or(0)
    );
    if let Some(largest) = statements.iter().max_by_key(|statement| statement.buffers) {
        print!("{}", largest.plan);
    }
    total
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
