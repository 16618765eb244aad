//! relayer's RabbitMQ transport (TRN-3).
//!
//! # The model
//!
//! A message's destination is a routing key on the transport's exchange
//! ([`RabbitMqOptions::with_exchange`]; the default exchange `""` routes a key to the
//! queue of that name). A send takes a channel from the transport's pool, publishes the
//! whole batch on it — persistent (`delivery_mode` 2) and **mandatory** — and then awaits
//! every publisher confirm together. A message counts as accepted only when the broker
//! confirmed it (`basic.ack`) and did not return it.
//!
//! **Properties.** The message id is the AMQP `message-id` property (where the receiver's
//! inbox finds it), `timestamp` is the creation time in seconds, and the headers table
//! holds the caller's headers, then the creation context (see
//! [`relayer_core::context_headers`]).
//!
//! **Errors** (TRN-2). An unroutable message — no queue bound for its routing key, so the
//! broker returns it (`basic.return`, 312 NO_ROUTE) before confirming — is a **permanent**
//! failure of that message, as are a missing exchange (404) or refused access (403) and a
//! header AMQP cannot carry. A `basic.nack`, a lost connection or a confirm that does not
//! come within [`RabbitMqOptions::confirm_timeout`] is **transient**.
//!
//! **Deadlines.** Taking a channel (waiting for a free one, reconnecting) is bounded by
//! [`RabbitMqOptions::confirm_timeout`], and so, from then on, are publishing and awaiting
//! every confirm: a broker that accepts the connection and never answers fails the batch
//! transiently after that long, whatever deadline the caller adds around the send (TRN-5;
//! the dispatcher's `send_timeout` cuts it shorter when it is). A channel whose confirms
//! did not all arrive is closed rather than reused.
//!
//! **Connections.** `amqp://` is plaintext; `amqps://` is TLS through rustls, the
//! broker's certificate chain and host name always verified — against the CA files of
//! [`RabbitMqOptions::with_ca_file`] when given (then the only trusted roots), else the
//! system's trusted roots. An `amqps` connection never falls back to plaintext: a broker
//! that does not complete the handshake fails the send transiently, naming the address,
//! what was verified and why it was refused. A CA file under `amqp://` is refused at
//! construction. An IP-literal host (`amqp://10.0.0.5`, `amqp://[::1]:5672`) is
//! connected to as written. No error, log line or `Debug` output shows the URI's user
//! info or secret query values (`token`, `auth`, `password`, …): they read `***`.
//!
//! ```no_run
//! # fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use relayer_rabbitmq::{RabbitMqOptions, RabbitMqTransport};
//!
//! let options = RabbitMqOptions::default().with_ca_file("/etc/ssl/broker-ca.pem");
//! let rabbitmq = RabbitMqTransport::new("amqps://app:secret@broker.example:5671/%2f", options)?;
//! assert_eq!(rabbitmq.redacted_uri(), "amqps://app:***@broker.example:5671/%2f");
//! # Ok(()) }
//! ```
//!
//! **Reconnection.** The connection is opened on the first send and again whenever it is
//! found closed: after the broker restarts, the next send reconnects, without restarting
//! the process. Sends fail transiently while the broker is away.
//!
//! **The channel pool.** Each send holds one channel; at most
//! [`RabbitMqOptions::with_channels`] sends run at once (others wait for a channel within
//! their deadline). [`RabbitMqOptions::with_channels_for`] sizes it from the dispatcher's
//! options: its `concurrency` unordered loops, its ordered-lanes loop, and one recovery
//! sweeper; the default fits the default dispatcher (4).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use relayer_rabbitmq::{RabbitMqOptions, RabbitMqTransport};
//!
//! let dispatcher = relayer_core::DispatcherOptions::builder().concurrency(4).build()?;
//! let options = RabbitMqOptions::default().with_exchange("orders").with_channels_for(&dispatcher);
//! let rabbitmq = RabbitMqTransport::new("amqp://guest:guest@127.0.0.1:5672/%2f", options)?;
//! let registry = relayer_core::TransportRegistry::new().with(Arc::new(rabbitmq))?;
//! // NewMessage::new("rabbitmq", "order.created", body) is now published to the `orders`
//! // exchange with routing key `order.created`.
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod address;
mod channels;
mod classify;
mod options;
mod properties;
mod tls;
mod transport;

pub use options::{OptionError, RabbitMqOptions};
pub use transport::RabbitMqTransport;

/// The lapin version this crate is built on.
pub use lapin;
