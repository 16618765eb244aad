//! `relayer-bench explain`: plans of the hot statements on a 1M-row outbox.
//!
//! The outbox is filled through the writer: 1% due unordered rows, 1% lane rows over 500
//! lanes, 98% scheduled an hour ahead (a large backlog that is mostly not due — the case
//! where an index that does not fit the statement shows). Plans are captured with
//! `auto_explain` at NOTICE level on the session, so they are the plans of the exact
//! statements relayer sends (`query_typed`, custom plans), not of hand-copied SQL.

use std::future::poll_fn;
use std::time::Duration;

use relayer_core::store::PageRequest;
use relayer_core::{Delivery, NewMessage, PassPlan};
use relayer_postgres::recovery::RecoveryStatements;
use relayer_postgres::{Completion, LaneStatements, OutboxStatements, OutboxWriter};
use tokio_postgres::{AsyncMessage, NoTls};

use crate::scratch::{BenchResult, Scratch, connect};

pub(crate) async fn run(quick: bool) -> BenchResult<()> {
    let scratch = Scratch::new().await?;
    let outcome = run_in(&scratch, if quick { 100_000 } else { 1_000_000 }).await;
    scratch.drop_schema().await?;
    outcome
}

async fn run_in(scratch: &Scratch, rows: usize) -> BenchResult<()> {
    let ns = &scratch.namespace;
    let writer = OutboxWriter::new(ns, ["queue"]);
    let filler = connect(&scratch.config).await?;
    for start in (0..rows).step_by(5_000) {
        let batch: Vec<NewMessage> = (start..(start + 5_000).min(rows))
            .map(|i| {
                let message = NewMessage::new("queue", "orders", format!("{{\"n\":{i}}}").into_bytes());
                match i % 100 {
                    0 => message,
                    1 => message.lane(format!("lane-{}", (i / 100) % 500)),
                    _ => message.delivery(Delivery::After(Duration::from_secs(3600))),
                }
            })
            .collect();
        writer.enqueue(&filler, &batch).await?;
    }
    filler.batch_execute(&format!("VACUUM ANALYZE {}", ns.table("outbox"))).await?;
    let by_seq: Vec<i64> = filler
        .query(
            &format!(
                "SELECT seq FROM {} WHERE lane IS NULL AND visible_at <= now() ORDER BY seq DESC LIMIT 100",
                ns.table("outbox")
            ),
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    println!("outbox filled with {rows} rows ({} due unordered, {} on 500 lanes)", rows / 100, rows / 100);

    let (client, mut connection) = scratch.config.connect(NoTls).await?;
    let (notices_tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notice(notice) = message {
                let _ = notices_tx.send(notice.message().to_owned());
            }
        }
    });
    client
        .batch_execute(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on; \
             SET auto_explain.log_buffers = on; SET auto_explain.log_level = 'notice'",
        )
        .await?;
    let mut show = |title: &str| {
        println!("\n=== {title}");
        while let Ok(plan) = notices.try_recv() {
            println!("{plan}");
        }
    };

    let outbox = OutboxStatements::new(ns);
    let token = uuid::Uuid::new_v4();
    let claim = Duration::from_secs(30);
    let batch: Vec<NewMessage> = (0..10)
        .map(|i| NewMessage::new("queue", "orders", format!("{{\"new\":{i}}}").into_bytes()))
        .collect();
    writer.enqueue(&client, &batch).await?;
    show("enqueue, 10 messages in one statement");
    let claimed = outbox.claim_due(&client, token, claim, 100, &[]).await?.messages;
    show("claim due, 100 rows");
    let by_seq_claimed = outbox.claim_seqs(&client, token, claim, &by_seq).await?.messages;
    show("claim by seq, 100 rows");
    let mut completion = Completion::new();
    for (index, message) in claimed.iter().chain(&by_seq_claimed).enumerate() {
        if index % 2 == 0 {
            completion.accept(message.seq);
        } else {
            completion.retry(message.seq, "transient send failure: bench", Duration::from_secs(1));
        }
    }
    outbox.complete(&client, token, &completion).await?;
    show(&format!("complete {} rows: half deleted, half released", completion.len()));
    let recovery = RecoveryStatements::new(ns);
    client.batch_execute("BEGIN").await?;
    let request = PageRequest {
        plan: PassPlan::CaptureBoundary,
        recovery_delay: Duration::ZERO,
        limit: 100,
        leader: None,
    };
    recovery.lock_page(&client, &request).await?;
    client.batch_execute("ROLLBACK").await?;
    show("recovery page: boundary, 100 rows from the start, locked");
    LaneStatements::new(ns).claim(&client, uuid::Uuid::new_v4(), claim, 100, "", 400, &[]).await?;
    show("lane claim, 100 lanes");
    Ok(())
}
