//! relayer's dispatcher: moves committed outbox rows to their transports (§4, §5).
//!
//! The model. A [`Dispatcher`] runs passes, like every relayer worker, on relayer-worker's
//! [`PassLoop`](relayer_worker::PassLoop): `concurrency` loops of unordered passes and one
//! loop of lane passes. It reaches its store only through the core capability traits its
//! sessions implement ([`DispatchSession`]), never through a database type. A pass opens
//! one session (one pooled connection, LIF-2) and:
//!
//! 1. claims up to `batch_size` due, unordered rows nobody holds (a conditional `UPDATE`
//!    that commits on its own and stamps the pass's random token and a deadline,
//!    DSP-1), leaving out destinations whose circuit breaker is open (DSP-6);
//! 2. sends them through the transport-generic [`SendPath`](relayer_delivery::SendPath)
//!    (grouping by destination, batch limits, per-message outcomes, a deadline per batch
//!    and for the whole send step so no send outlives the claim, TRN-5; DSP-2..6);
//! 3. completes the batch in one statement fenced by the token: accepted rows deleted,
//!    failed rows retried after the per-row backoff or, with `max_attempts`, moved to the
//!    dead table ([`retry_or_bury`](relayer_core::retry_or_bury), DSP-3, DSP-5); and when
//!    a destination's breaker tripped, holds back its other due rows for the cool-down in
//!    one statement, so no later claim reads them; rows that could not be decoded move to
//!    the dead table with the reason (SPEC §15);
//! 4. (lane passes) claims ordered lanes whose head goes to no tripped destination and
//!    sends each lane's head, one at a time per lane and lanes side by side, parking a lane
//!    whose head is poison or cannot be decoded (LAN-1..5, SPEC §15).
//!
//! Claims read only rows of the transports in the dispatcher's registry (TRN-6, with the
//! source built `with_transports`): a row, or a lane whose head, names a transport this
//! process lacks stays pending, unclaimed and unjudged, for an instance that has it.
//!
//! An unordered pass overlaps steps 1–3 of consecutive batches (DSP-1b): while one batch
//! is at its transport it claims the next (after a full batch) and completes the previous
//! one, on its one session, up to a bound of batches; a batch it claimed but does not
//! send is released at once, with no attempt counted.
//!
//! Passes run when a notification arrives on the namespace's channel (the writer notifies
//! in its own transaction, OUT-4; see [`Dispatcher::listening`]), at once again while a
//! pass finds a full batch and moves rows, and every `poll_interval` otherwise. A pass that
//! moved nothing never triggers another at once, so an open breaker cannot make a loop
//! spin. A failed pass is logged and retried with backoff (RES-1, RES-2); nothing a
//! transport does — errors, panics, hangs — ends a loop. The writing process may also call
//! [`Dispatcher::dispatch_now`] after its commit to send the rows it just wrote without
//! waiting for a pass. Tests and health checks follow the loops through
//! [`Dispatcher::subscribe`].
//!
//! With relayer's PostgreSQL store:
//!
//! ```no_run
//! # async fn example(transports: std::sync::Arc<relayer_core::TransportRegistry>)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use relayer_core::{DispatcherOptions, Namespace, NewMessage};
//! use relayer_dispatcher::Dispatcher;
//! use relayer_postgres::{OutboxWriter, PgNotifications, PgSource, asynchronous_commit, connect_pool};
//! use tokio_util::sync::CancellationToken;
//!
//! let config: tokio_postgres::Config = "host=127.0.0.1 user=postgres dbname=app".parse()?;
//! let namespace = Namespace::default();
//! let pool = connect_pool(asynchronous_commit(config.clone()), 2).await?;
//! let source = PgSource::new(pool, &namespace).with_transports(transports.names());
//! let writer = OutboxWriter::for_registry(&namespace, &transports);
//! let dispatcher = Dispatcher::new(source, namespace.clone(), DispatcherOptions::default(), transports)?
//!     .listening(PgNotifications::outbox(config.clone(), &namespace));
//! let shutdown = CancellationToken::new();
//! let worker = tokio::spawn({
//!     let (dispatcher, shutdown) = (dispatcher.clone(), shutdown.clone());
//!     async move { dispatcher.run(shutdown).await }
//! });
//!
//! let (mut client, connection) = config.connect(tokio_postgres::NoTls).await?;
//! tokio::spawn(connection);
//! let tx = client.transaction().await?;
//! let written = writer.enqueue(&tx, &[NewMessage::new("queue", "orders", b"{}".to_vec())]).await?;
//! tx.commit().await?;
//! dispatcher.dispatch_now(&written).await?; // optional: send at once from this process
//!
//! shutdown.cancel();
//! worker.await??;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod dispatcher;
mod error;
mod hosted;
mod lanes;
mod pass;
mod report;
mod session;
mod shared;
mod unordered;
mod wake;

pub use dispatcher::Dispatcher;
/// The error every dispatcher operation returns: transient or not, with its cause chain.
pub use relayer_worker::WorkerError;
pub use report::PassReport;
pub use session::DispatchSession;
