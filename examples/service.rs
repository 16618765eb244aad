//! A service's write path: its own row and the message announcing it commit in one
//! transaction, and a relayer host delivers the message afterwards.
//!
//! The order is inserted and `order.created` enqueued on the same transaction. Commit and
//! both exist — the message is then delivered at least once, even if the process dies
//! right after the commit (the recovery sweeper would find it). Roll back and neither
//! exists: no message announces an order that was never written. Run:
//! `cargo run -p relayer-examples --example service`.
#![allow(clippy::print_stdout)] // An example's output is its point.

use std::sync::Arc;
use std::time::Duration;

use relayer::{DispatcherOptions, Namespace, NewMessage, Relayer, RelayerHost};
use relayer_examples::receiver::Receiver;
use relayer_examples::webhook::WebhookTransport;
use relayer_examples::{ExampleResult, database};
use tokio_postgres::Client;

/// Places an order: the row and its message in one transaction, committed unless `abort`.
async fn place_order(
    client: &mut Client,
    host: &RelayerHost,
    namespace: &Namespace,
    order: i64,
    item: &str,
    abort: bool,
) -> ExampleResult<String> {
    let tx = client.transaction().await?;
    let orders = format!("\"{}\".orders", namespace.schema());
    tx.execute(&format!("INSERT INTO {orders} (id, item) VALUES ($1, $2)"), &[&order, &item]).await?;
    let message =
        NewMessage::new("webhook", "/hooks/orders", format!(r#"{{"order":{order},"item":"{item}"}}"#))
            .header("content-type", "application/json")
            .header("event", "order.created");
    let id = message.message_id().to_string();
    host.writer().enqueue(&tx, &[message]).await?;
    if abort {
        tx.rollback().await?; // e.g. payment failed: the order and its message vanish together
    } else {
        tx.commit().await?;
    }
    Ok(id)
}

#[tokio::main]
async fn main() -> ExampleResult {
    let receiver = Receiver::start(false).await?;
    let config = database::config()?;
    let mut client = database::connect(&config).await?;
    let namespace = database::fresh_namespace(&mut client, "service").await?;
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{}\".orders (id bigint PRIMARY KEY, item text NOT NULL)",
            namespace.schema()
        ))
        .await?;

    let options = DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build()?;
    let host = Relayer::builder(config, namespace.clone())
        .transport(Arc::new(WebhookTransport::new("webhook", receiver.address())))
        .dispatcher(options)
        .start()
        .await?;

    let kept = place_order(&mut client, &host, &namespace, 1, "book", false).await?;
    let aborted = place_order(&mut client, &host, &namespace, 2, "lamp", true).await?;
    let also_kept = place_order(&mut client, &host, &namespace, 3, "desk", false).await?;

    tokio::time::timeout(Duration::from_secs(30), receiver.wait_for(2))
        .await
        .map_err(|_| "the committed orders' messages were not delivered within 30 s")?;
    // The receiver answers before the host deletes the rows it sent: wait for that too.
    let pending = database::outbox_left(&client, &namespace).await?;
    host.shutdown().await;

    let orders: Vec<i64> = client
        .query(&format!("SELECT id FROM \"{}\".orders ORDER BY id", namespace.schema()), &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let delivered: Vec<String> = receiver.deliveries().into_iter().map(|d| d.id).collect();
    println!(
        "orders written: {orders:?}; messages delivered: {}; outbox rows left: {pending}",
        delivered.len()
    );
    if orders != [1, 3] || delivered.len() != 2 || pending != 0 {
        return Err("expected orders 1 and 3, their two messages delivered and an empty outbox".into());
    }
    if !delivered.contains(&kept) || !delivered.contains(&also_kept) || delivered.contains(&aborted) {
        return Err("the delivered messages are not exactly those of the committed orders".into());
    }
    println!("the rolled-back order left neither a row nor a message");
    database::drop_namespace(&client, &namespace).await?;
    Ok(())
}
