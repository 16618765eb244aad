//! relayer's dispatcher: moves committed outbox rows to their transports (§4, §5).
//!
//! The model. A [`Dispatcher`] runs passes. A pass takes one pooled connection and:
//!
//! 1. claims up to `batch_size` due, unordered rows nobody holds (a conditional `UPDATE`
//!    that commits on its own and stamps the pass's random token and a deadline,
//!    DSP-1), leaving out destinations whose circuit breaker is open (DSP-6);
//! 2. groups them by (transport, destination), splits each group by the transport's batch
//!    limit (DSP-2), sends the groups concurrently, and maps every message's outcome —
//!    a transport error, a wrong number of outcomes or a panic fails the whole batch;
//! 3. completes the batch in one statement fenced by the token: accepted rows deleted,
//!    failed rows retried after the per-row backoff or, with `max_attempts`, moved to the
//!    dead table (DSP-3, DSP-5);
//! 4. claims ordered lanes and sends each lane's head, one at a time per lane and lanes
//!    side by side, parking a lane whose head is poison (LAN-1..5).
//!
//! Passes run when a notification arrives on the namespace's channel (the writer notifies
//! in its own transaction, OUT-4), at once again while a pass finds a full batch, and every
//! `poll_interval` otherwise. A failed pass is logged and retried with backoff (RES-1,
//! RES-2); nothing a transport does — errors, panics, slowness — ends the task.
//! The writing process may also call [`Dispatcher::dispatch_now`] after its commit to send
//! the rows it just wrote without waiting for a pass.
//!
//! ```no_run
//! # async fn example(transports: std::sync::Arc<relayer_core::TransportRegistry>)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use relayer_core::{DispatcherOptions, Namespace, NewMessage};
//! use relayer_dispatcher::Dispatcher;
//! use tokio_util::sync::CancellationToken;
//!
//! let config: tokio_postgres::Config = "host=127.0.0.1 user=postgres dbname=app".parse()?;
//! let dispatcher =
//!     Dispatcher::new(DispatcherOptions::default(), Namespace::default(), transports, config.clone(), 2).await?;
//! let shutdown = CancellationToken::new();
//! let worker = tokio::spawn({
//!     let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
//!     async move { dispatcher.run(shutdown).await }
//! });
//!
//! let (mut client, connection) = config.connect(tokio_postgres::NoTls).await?;
//! tokio::spawn(connection);
//! let tx = client.transaction().await?;
//! let written = dispatcher.writer().enqueue(&tx, &[NewMessage::new("queue", "orders", b"{}".to_vec())]).await?;
//! tx.commit().await?;
//! dispatcher.dispatch_now(&written).await?; // optional: send at once from this process
//!
//! shutdown.cancel();
//! worker.await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod dispatcher;
mod error;
mod lanes;
mod send;

pub use dispatcher::{Dispatcher, PassReport};
pub use error::DispatchError;
pub use send::{SendPath, SendTally};
