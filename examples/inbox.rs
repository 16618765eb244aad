//! Both ends of a broker: an outbox delivering to NATS JetStream, and a receiver whose
//! effects run once per message however often JetStream delivers it (QUE-3).
//!
//! The **service** writes each order and its `orders.placed` message in one transaction; a
//! relayer **host** publishes the messages to a JetStream stream (`Nats-Msg-Id` = the
//! relayer message id). The **receiver** reads them from a durable JetStream consumer and,
//! for each delivery, opens a PostgreSQL transaction, records the message id in relayer's
//! inbox *before* its effect (a shipment row), commits, and only then acknowledges.
//!
//! JetStream delivers at least once, and the receiver is made to misbehave to show why the
//! inbox is there:
//! - order 1: the receiver commits its effect and "crashes" before acknowledging; JetStream
//!   redelivers after the consumer's `ack_wait`, the inbox finds the id and the redelivery
//!   is acknowledged without running the effect again;
//! - order 2: the effect fails before the commit (the transaction rolls back, inbox record
//!   included) and the receiver naks; the redelivery finds no record and runs the effect;
//! - order 3: delivered once, applied once.
//!
//! The summary counts shipment rows per order in the database: one each. Needs PostgreSQL
//! (as the other examples) and NATS with JetStream at `RELAYER_NATS_ADDR` (default
//! `127.0.0.1:4222`). Run: `cargo run -p relayer-examples --example inbox`.
#![allow(clippy::print_stdout)] // An example's output is its point.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use relayer::nats::async_nats::jetstream::{self, AckKind, consumer::pull, stream};
use relayer::nats::{NatsOptions, NatsTransport};
use relayer::postgres::{Inbox, InboxEntry};
use relayer::{DispatcherOptions, MessageId, Namespace, NewMessage, Relayer, RelayerHost};
use relayer_examples::{ExampleResult, database};
use tokio_postgres::Client;

/// The receiver's name in the inbox: each consumer deduplicates on its own.
const CONSUMER: &str = "shipping";

/// How long JetStream waits for an acknowledgement before it redelivers.
const ACK_WAIT: Duration = Duration::from_secs(1);

/// The orders the service places: (id, item).
const ORDERS: [(i64, &str); 3] = [(1, "book"), (2, "lamp"), (3, "desk")];

/// Places an order: the row and its message in one transaction.
async fn place_order(
    client: &mut Client,
    host: &RelayerHost,
    namespace: &Namespace,
    subject: &str,
    (order, item): (i64, &str),
) -> ExampleResult {
    let tx = client.transaction().await?;
    let orders = format!("\"{}\".orders", namespace.schema());
    tx.execute(&format!("INSERT INTO {orders} (id, item) VALUES ($1, $2)"), &[&order, &item]).await?;
    let body = format!(r#"{{"order":{order},"item":"{item}"}}"#);
    let message = NewMessage::new("nats", subject, body)
        .header("content-type", "application/json")
        .header("order-id", order.to_string());
    host.writer().enqueue(&tx, &[message]).await?;
    tx.commit().await?;
    Ok(())
}

/// What the receiver saw of one order.
#[derive(Debug, Default)]
struct Seen {
    deliveries: u32,
    dropped_by_inbox: u32,
    rolled_back: u32,
}

/// The receiving side: one JetStream delivery handled inside one PostgreSQL transaction.
struct Receiver {
    client: Client,
    inbox: Inbox,
    shipments: String,
    seen: BTreeMap<i64, Seen>,
}

impl Receiver {
    /// Handles one delivery; says whether to acknowledge it.
    async fn handle(&mut self, message: &jetstream::Message) -> ExampleResult<Reply> {
        let header = |name: &str| {
            message.headers.as_ref().and_then(|headers| headers.get(name)).map(|value| value.as_str())
        };
        let id = MessageId::from_uuid(header("Nats-Msg-Id").ok_or("a message without Nats-Msg-Id")?.parse()?);
        let order: i64 = header("order-id").ok_or("a message without order-id")?.parse()?;
        // JetStream's own count of this message's deliveries.
        let delivery = message.info()?.delivered;
        let seen = self.seen.entry(order).or_default();
        seen.deliveries += 1;
        let first_delivery = delivery == 1;

        let tx = self.client.transaction().await?;
        // The record comes first: the effect runs only when it took.
        match self.inbox.record(&tx, CONSUMER, id).await? {
            InboxEntry::Duplicate => {
                tx.commit().await?;
                seen.dropped_by_inbox += 1;
                println!("  order {order}: delivery {delivery}: already in the inbox, dropped");
                return Ok(Reply::Ack);
            }
            InboxEntry::First => {}
        }
        tx.execute(&format!("INSERT INTO {} (order_id) VALUES ($1)", self.shipments), &[&order]).await?;
        if order == 2 && first_delivery {
            tx.rollback().await?; // the effect failed: neither it nor the record stays
            seen.rolled_back += 1;
            println!("  order {order}: delivery 1: the effect failed and rolled back, nak");
            return Ok(Reply::Nak);
        }
        tx.commit().await?;
        if order == 1 && first_delivery {
            println!("  order {order}: delivery 1: effect committed, then a crash before the ack");
            return Ok(Reply::None);
        }
        println!("  order {order}: delivery {delivery}: effect committed, ack");
        Ok(Reply::Ack)
    }

    /// Whether every order was applied and both misbehaviours were followed by their
    /// redelivery.
    fn done(&self) -> bool {
        let seen = |order: i64| self.seen.get(&order);
        seen(1).is_some_and(|s| s.dropped_by_inbox >= 1)
            && seen(2).is_some_and(|s| s.rolled_back == 1 && s.deliveries >= 2)
            && seen(3).is_some()
    }
}

/// What the receiver tells JetStream after handling a delivery.
enum Reply {
    Ack,
    Nak,
    /// Nothing: the process "crashed" after its commit.
    None,
}

#[tokio::main]
async fn main() -> ExampleResult {
    let nats_address = std::env::var("RELAYER_NATS_ADDR").unwrap_or_else(|_| "127.0.0.1:4222".to_owned());
    // NATS first: without it nothing is created.
    let nats = relayer::nats::async_nats::connect(nats_address.as_str())
        .await
        .map_err(|e| format!("NATS with JetStream is not reachable at {nats_address}: {e}"))?;
    let config = database::config()?;
    let mut client = database::connect(&config).await?;
    let namespace = database::fresh_namespace(&mut client, "inbox").await?;
    let schema = namespace.schema().to_owned();
    client
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".orders (id bigint PRIMARY KEY, item text NOT NULL);
             CREATE TABLE \"{schema}\".shipments (order_id bigint NOT NULL); -- no key: a second effect would show"
        ))
        .await?;

    // The stream and the receiver's durable consumer (names after the namespace's schema).
    let jetstream = jetstream::new(nats);
    let subject = format!("{schema}.orders.placed");
    let stream = jetstream
        .create_stream(stream::Config {
            name: schema.clone(),
            subjects: vec![format!("{schema}.>")],
            ..Default::default()
        })
        .await?;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.to_owned()),
            ack_wait: ACK_WAIT,
            ..Default::default()
        })
        .await?;

    let transport = NatsTransport::connect(&nats_address, NatsOptions::default()).await?;
    let options = DispatcherOptions::builder().poll_interval(Duration::from_millis(100)).build()?;
    let host = Relayer::builder(config.clone(), namespace.clone())
        .transport(Arc::new(transport))
        .dispatcher(options)
        .start()
        .await?;
    for order in ORDERS {
        place_order(&mut client, &host, &namespace, &subject, order).await?;
    }
    println!("service: {} orders written, each with its message in the same transaction", ORDERS.len());

    println!("receiver ({CONSUMER}):");
    let mut receiver = Receiver {
        client: database::connect(&config).await?,
        inbox: Inbox::new(&namespace),
        shipments: format!("\"{schema}\".shipments"),
        seen: BTreeMap::new(),
    };
    let mut messages = consumer.messages().await?;
    let received = tokio::time::timeout(Duration::from_secs(60), async {
        while !receiver.done() {
            let message = messages.next().await.ok_or("the JetStream consumer ended")??;
            match receiver.handle(&message).await? {
                Reply::Ack => message.ack().await?,
                Reply::Nak => message.ack_with(AckKind::Nak(None)).await?,
                Reply::None => {}
            }
        }
        ExampleResult::Ok(())
    })
    .await;
    received.map_err(|_| "the receiver did not see every order and both redeliveries within 60 s")??;
    // The stream acknowledged each publish before the host deleted its row: wait for that too.
    let pending = database::outbox_left(&client, &namespace).await?;
    host.shutdown().await;

    // The proof is in the database: shipments per order, and the inbox's records.
    let applied: BTreeMap<i64, i64> = client
        .query(&format!("SELECT order_id, count(*) FROM \"{schema}\".shipments GROUP BY order_id"), &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let recorded: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {} WHERE consumer = $1", namespace.table("inbox")),
            &[&CONSUMER],
        )
        .await?
        .get(0);
    let deliveries: u32 = receiver.seen.values().map(|s| s.deliveries).sum();
    let dropped: u32 = receiver.seen.values().map(|s| s.dropped_by_inbox).sum();
    println!("summary:");
    for (order, seen) in &receiver.seen {
        println!(
            "  order {order}: delivered {}x, effect applied {}x in the database",
            seen.deliveries,
            applied.get(order).copied().unwrap_or(0)
        );
    }
    println!(
        "RESULT orders={} deliveries={deliveries} effects={} dropped_by_inbox={dropped} inbox_records={recorded} outbox_left={pending}",
        ORDERS.len(),
        applied.values().sum::<i64>()
    );
    jetstream.delete_stream(&schema).await?;
    database::drop_namespace(&client, &namespace).await?;

    let once_each = ORDERS.iter().all(|(order, _)| applied.get(order) == Some(&1));
    if !once_each || applied.len() != ORDERS.len() || dropped == 0 || recorded != 3 || pending != 0 {
        return Err("expected each order's effect exactly once, a redelivery dropped by the inbox, \
                    three inbox records and an empty outbox"
            .into());
    }
    println!("each effect ran once: the redelivery after the crash was dropped by the inbox");
    Ok(())
}
