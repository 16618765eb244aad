//! Listings read what they show (DLP-7, SPEC §15): `list_*` leave bodies in the table and
//! give their size; `show_*` reads one body whole.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

mod common;

use common::{db_now, dead_letter, failing_dispatcher, send, setup};
use relayer_core::NewMessage;
use relayer_postgres::{DeadLetterApi, OutboxDeadFilter, OutboxWriter, QueueDeadLetterFilter};

/// DLP-7: a dead outbox row with a 1 MiB body is listed without it (`body` empty,
/// `body_bytes` its size) and shown with it.
#[tokio::test]
async fn outbox_dead_rows_are_listed_without_their_bodies_and_shown_with_them_dlp_7() {
    let (db, client) = setup().await;
    let (dispatcher, _transport) = failing_dispatcher(&db).await;
    let body = vec![7u8; 1 << 20];
    let message = NewMessage::new("switch", "orders", body.clone());
    OutboxWriter::new(db.namespace(), ["switch"])
        .enqueue(&*client, std::slice::from_ref(&message))
        .await
        .unwrap();
    assert_eq!(dispatcher.run_once().await.unwrap().dead, 1);
    let api = DeadLetterApi::new(db.namespace());
    let listed = api.list_outbox(&*client, &OutboxDeadFilter::new()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].body.is_empty(), "a listing reads no body");
    assert_eq!(listed[0].body_bytes, 1 << 20);
    let shown = api.show_outbox(&*client, message.message_id()).await.unwrap().unwrap();
    assert_eq!((shown.body, shown.body_bytes), (body, 1 << 20));
}

/// DLP-7: queue dead letters are listed without their bodies and shown with them.
#[tokio::test]
async fn queue_dead_letters_are_listed_without_their_bodies_and_shown_with_them_dlp_7() {
    let (db, client) = setup().await;
    let ids = send(&db, "orders", 2, db_now(&client).await).await;
    dead_letter(&client, &db, "orders", "dead", "handler", 2).await;
    let api = DeadLetterApi::new(db.namespace());
    let listed = api.list_queue(&*client, &QueueDeadLetterFilter::new()).await.unwrap();
    assert_eq!(listed.len(), 2);
    for letter in &listed {
        assert!(letter.body.is_empty(), "a listing reads no body");
        assert_eq!(letter.body_bytes, 9, "\"orders #0\" is 9 bytes");
    }
    let shown = api.show_queue(&*client, ids[1]).await.unwrap().unwrap();
    assert_eq!((shown.body.as_slice(), shown.body_bytes), (&b"orders #1"[..], 9));
}
