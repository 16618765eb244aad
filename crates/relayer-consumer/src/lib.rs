//! relayer's queue consumer (§10): a pump per subscription of relayer's PostgreSQL queue.
//!
//! # The model
//!
//! A [`Consumer`] serves one [`Subscription`] — a queue, its dead-letter queue, an optional
//! invalid-message queue and [`ConsumerOptions`](relayer_core::ConsumerOptions) — with a
//! [`Handler`] (or an [`InboxHandler`]). It runs three [`relayer_worker::PassLoop`]s that
//! share the pump's state, so each gets the runtime's backoff and panic handling (RES-1):
//!
//! - **receive**: fills the free handler slots (at most `concurrency` messages in flight)
//!   in one `FOR UPDATE SKIP LOCKED` statement that makes the messages invisible for the
//!   visibility timeout and stamps them with a receipt token. It is woken by LISTEN/NOTIFY
//!   on the namespace's queue channel, by freed slots, and by itself after a full batch;
//!   polling every `poll_interval` is the fallback (QUE-1).
//! - **settle**: writes what handlers decided — ack (delete), requeue (later, handled
//!   count + 1) or dead-letter (moved to the dead-letter queue with `original_topic`,
//!   `rejection_reason`, `rejection_message` and `dead_lettered_at`) — in batches, each
//!   statement matching `(seq, receipt)`: a reader whose visibility lapsed changes nothing
//!   (QUE-2, QUE-5).
//! - **heartbeat**: every `visibility_timeout / 3` renews the visibility of every message
//!   in flight, as long as its handler is within its deadline, so a slow handler is never
//!   redelivered mid-run nor dead-lettered for a handled count it did not earn; only a dead
//!   process lets a message reappear (QUE-5).
//!
//! Each handler call runs on its own task under `handler_deadline` with panics caught; a
//! panic or an overrun is requeued like a failure, and the pump lives. After
//! `max_handled_count` failures a message is dead-lettered. A row that cannot be decoded
//! (headers not an object of strings, a negative handled count …) goes to the
//! invalid-message queue, else to the dead-letter queue as `unacceptable`, its rejection
//! message naming the table, the row's seq and the column (§15).
//!
//! The pump reaches its store only through the core capability traits (receive, settle,
//! extend visibility, record in the inbox) on sessions of a
//! [`StoreSource`](relayer_core::StoreSource), and wakes on
//! [`Notifications`](relayer_core::Notifications): relayer's are `relayer_postgres::PgSource`
//! and `relayer_postgres::PgNotifications`.
//!
//! An [`InboxHandler`] runs inside the inbox boundary (QUE-3): one transaction records the
//! message in the inbox first (`ON CONFLICT DO NOTHING`), then runs the handler with it,
//! then acks — fenced by the receipt, so a lapsed reader rolls its effects back — and
//! commits. A message already recorded is acked without calling the handler.
//!
//! Shutdown stops receiving, waits up to `shutdown_grace` for handlers in flight, writes
//! their settlements and abandons the rest; their messages reappear after the visibility
//! timeout.
//!
//! ```no_run
//! # async fn example(config: tokio_postgres::Config, pool: relayer_postgres::PgPool)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use relayer_consumer::{Consumer, Handler, Outcome, Subscription};
//! use relayer_core::{ConsumerOptions, Namespace};
//! use relayer_core::QueueMessage;
//! use relayer_postgres::{PgNotifications, PgSource};
//! use tokio_util::sync::CancellationToken;
//!
//! struct Orders;
//!
//! #[async_trait::async_trait]
//! impl Handler for Orders {
//!     async fn handle(&self, message: &QueueMessage) -> Outcome {
//!         if message.body.is_empty() { Outcome::reject("no body") } else { Outcome::Ack }
//!     }
//! }
//!
//! let subscription = Subscription::new("orders", ConsumerOptions::default())?;
//! let namespace = Namespace::default();
//! let notifications = PgNotifications::queue(config, &namespace);
//! let source = PgSource::new(pool, &namespace);
//! let consumer = Consumer::new(notifications, source, namespace, subscription, Arc::new(Orders));
//! let shutdown = CancellationToken::new();
//! let running = tokio::spawn(consumer.run(shutdown.clone()));
//! // … on host shutdown:
//! shutdown.cancel();
//! running.await??;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod consumer;
mod dispatch;
mod handler;
mod handler_call;
mod heartbeat;
mod hosted;
mod in_flight;
mod pump;
mod receive;
mod retry;
mod settle;
mod settlement;
mod stats;
mod subscription;

pub use consumer::Consumer;
pub use handler::{Handler, Handling, InboxHandler, Outcome};
pub use handler_call::{CallOutcome, HandlerCall};
pub use relayer_core::QueueMessage;
pub use stats::{ConsumerStats, StatsSnapshot};
pub use subscription::{DEAD_LETTER_SUFFIX, Subscription, SubscriptionError};
