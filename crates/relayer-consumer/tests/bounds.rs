//! What a handler hands back is bounded before it reaches a statement (SPEC §15): its
//! requeue delay by `max_requeue_delay`, its rejection message by length and without NUL.
#![allow(clippy::unwrap_used)] // In tests, a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Scripted, count, enqueue, fast, pool, rows, setup, start};
use relayer_consumer::{Outcome, Subscription};
use relayer_core::bounded_text::{MAX_ERROR_BYTES, NUL_REPLACEMENT};
use relayer_test_support::eventually;

/// QUE-2: a handler asking for a year's requeue delay gets `max_requeue_delay` (50 ms
/// here): the message comes back and is handled again, instead of hiding for a year.
#[tokio::test]
async fn a_requeue_delay_beyond_max_requeue_delay_is_clamped_to_it_que_2() {
    let db = setup().await;
    let id = enqueue(&db, "orders", 1).await[0];
    let handler = Scripted::new(|_, call| async move {
        if call == 1 {
            Outcome::requeue_after(Duration::from_secs(365 * 86_400), "next year")
        } else {
            Outcome::Ack
        }
    });
    let options = fast().build().unwrap();
    assert_eq!(options.max_requeue_delay(), Duration::from_millis(50));
    let subscription = Subscription::new("orders", options).unwrap();
    let running = start(&db, pool(&db, "p", 2).await.0, subscription, Arc::clone(&handler)).await;
    eventually("the requeued message is handled again and acked", || async {
        count(&db, "orders").await == 0
    })
    .await;
    running.stop().await;
    assert_eq!(handler.calls(id), 2);
}

/// QUE-2, SPEC §15: a rejection message holding a NUL and 100 000 bytes is dead-lettered
/// with the NUL replaced and the text cut to `MAX_ERROR_BYTES`; nothing is lost.
#[tokio::test]
async fn a_rejection_message_with_a_nul_and_no_end_is_stored_bounded_que_2() {
    let db = setup().await;
    enqueue(&db, "orders", 1).await;
    let handler =
        Scripted::new(|_, _| async { Outcome::reject(format!("bad \0 order {}", "x".repeat(100_000))) });
    let options = fast().build().unwrap();
    let subscription = Subscription::new("orders", options).unwrap().with_dead_letter_queue("dead").unwrap();
    let running = start(&db, pool(&db, "p", 2).await.0, subscription, Arc::clone(&handler)).await;
    eventually("the message is dead-lettered", || async { count(&db, "dead").await == 1 }).await;
    running.stop().await;
    let message = rows(&db, "dead").await.remove(0).rejection_message.unwrap();
    assert!(message.contains(&format!("bad {NUL_REPLACEMENT} order xxx")), "{message}");
    assert!(!message.contains('\0') && message.len() <= MAX_ERROR_BYTES, "{} bytes", message.len());
}
