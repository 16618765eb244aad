//! A custom transport end to end: relayer delivers outbox messages to an HTTP webhook.
//!
//! The receiving server runs inside this example and refuses each message once (503), so
//! the run shows a transient failure, the retry relayer schedules, and the receiver
//! deduplicating by `Webhook-Id`. Run: `cargo run -p relayer-examples --example webhook`.
#![allow(clippy::print_stdout)] // An example's output is its point.

use std::sync::Arc;
use std::time::Duration;

use relayer::{DispatcherOptions, NewMessage, Relayer};
use relayer_examples::receiver::Receiver;
use relayer_examples::webhook::WebhookTransport;
use relayer_examples::{ExampleResult, database};

#[tokio::main]
async fn main() -> ExampleResult {
    let receiver = Receiver::start(true).await?;
    let config = database::config()?;
    let mut client = database::connect(&config).await?;
    let namespace = database::fresh_namespace(&mut client, "webhook").await?;

    let webhook = WebhookTransport::new("webhook", receiver.address());
    let options = DispatcherOptions::builder()
        .poll_interval(Duration::from_millis(100))
        .retry_base(Duration::from_millis(100))
        .retry_max(Duration::from_millis(100))
        .build()?;
    let host = Relayer::builder(config, namespace.clone())
        .transport(Arc::new(webhook))
        .dispatcher(options)
        .start()
        .await?;

    let messages: Vec<NewMessage> = (1..=3)
        .map(|order| {
            NewMessage::new("webhook", "/hooks/orders", format!(r#"{{"order":{order}}}"#))
                .header("content-type", "application/json")
                .trace_context(format!("00-{order:032x}-{order:016x}-01"))
        })
        .collect();
    let tx = client.transaction().await?;
    let written = host.writer().enqueue(&tx, &messages).await?;
    tx.commit().await?;
    println!("enqueued {} messages; the receiver refuses each once", written.len());

    tokio::time::timeout(Duration::from_secs(30), receiver.wait_for(written.len()))
        .await
        .map_err(|_| "the webhook did not receive every message within 30 s")?;
    host.shutdown().await;
    for delivery in receiver.deliveries() {
        println!(
            "POST {} id={} created_at={} body={}",
            delivery.path,
            delivery.id,
            delivery.headers.get("relayer-created-at").map_or("?", String::as_str),
            String::from_utf8_lossy(&delivery.body)
        );
    }
    let delivered: Vec<String> = receiver.deliveries().into_iter().map(|d| d.id).collect();
    for message in &written {
        if !delivered.contains(&message.id.to_string()) {
            return Err(format!("message {} was not delivered", message.id).into());
        }
    }
    println!(
        "delivered {} messages after {} refusals (each retried by relayer)",
        delivered.len(),
        receiver.refused()
    );
    database::drop_namespace(&client, &namespace).await?;
    Ok(())
}
