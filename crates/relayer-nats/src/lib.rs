//! relayer's NATS JetStream transport (TRN-3).
//!
//! # The model
//!
//! A message's destination is a NATS subject that a JetStream stream captures. A send
//! publishes every message of the batch at once — pipelined on the connection, each with
//! `Nats-Msg-Id` set to the relayer message id — and then awaits all the stream's
//! acknowledgements together. A message counts as accepted only when its stream
//! acknowledged it: a publish the server received but the stream never stored is not a
//! delivery.
//!
//! **Deduplication.** JetStream drops a second message with the same `Nats-Msg-Id` inside
//! the stream's duplicate window (`duplicate_window`, two minutes by default), and still
//! acknowledges it (as a duplicate). relayer delivers at least once: a process that
//! crashes after the stream stored a message but before its outbox row was deleted sends
//! it again once the claim expires (the recovery sweeper). Inside the window that replay
//! is dropped by the stream, so subscribers see the message once; after the window it is
//! stored again, and the receiver's inbox (QUE-3) is the place to deduplicate. The
//! transport declares this with [`Capabilities::deduplicates_by_id`](relayer_core::Capabilities).
//! Keep the recovery delay and claim duration well inside the stream's window to get the
//! most from it.
//!
//! **Headers.** The message's headers travel as NATS headers, then the creation context
//! (see [`relayer_core::context_headers`]): `relayer-created-at`, and
//! `relayer-trace-context` and `relayer-lane` when present.
//!
//! **Errors** are classified by what retrying can do (TRN-2): no stream captures the
//! subject (the server answers "no responders"), an invalid subject or header, a message
//! larger than the server's `max_payload`, or a refusal by the stream that a retry cannot
//! change (the message exceeds the stream's `max_msg_size`, the stream is sealed or was
//! deleted, JetStream is disabled, a `Nats-Expected-*` header is unmet) is **permanent**;
//! a timeout waiting for the acknowledgement, a lost connection, too many acks in flight,
//! or any other refusal by the stream (full for now, electing a leader) is **transient**.
//! Once one publish of a batch fails transiently the rest of the batch is failed with the
//! same error rather than each waiting out its own timeout.
//!
//! **Deadlines.** Every publish and every acknowledgement wait is bounded by
//! [`NatsOptions::ack_timeout`], so a server that accepts the connection but never
//! answers fails the batch transiently after that long, whatever deadline the caller
//! adds around the send (TRN-5). The client reconnects in the background after the
//! server goes away; sends fail transiently meanwhile and succeed again once it is back,
//! without a restart.
//!
//! **Connections.** [`NatsTransport::connect`] takes the URL's credentials
//! (`user:password@`, `token@`) out of the addresses and authenticates with them; no
//! error, log line or `Debug` output shows them. `tls://`, a CA file
//! ([`NatsOptions::with_ca_file`], then the only trusted roots) or
//! [`NatsOptions::with_tls_first`] require TLS, always verified (chain and host name,
//! against the CA files or else the system's roots); a server that cannot complete the
//! handshake is refused, never spoken to in plaintext.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use relayer_nats::{NatsOptions, NatsTransport};
//!
//! let options = NatsOptions::default().with_ca_file("/etc/ssl/nats-ca.pem");
//! // Authenticates as `app`; every message shows `tls://app:***@nats.example:4222`.
//! let nats = NatsTransport::connect("tls://app:secret@nats.example:4222", options).await?;
//! # Ok(()) }
//! ```
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use relayer_nats::{NatsOptions, NatsTransport};
//!
//! let nats = NatsTransport::connect("nats://127.0.0.1:4222", NatsOptions::default()).await?;
//! let registry = relayer_core::TransportRegistry::new().with(Arc::new(nats))?;
//! // NewMessage::new("nats", "orders.created", body) is now published to the stream that
//! // captures `orders.created`.
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod classify;
mod options;
mod publish;
mod servers;
mod tls;
mod transport;

pub use options::{NatsOptions, OptionError};
pub use transport::{CONNECT_TIMEOUT, ConnectError, NatsTransport};

/// The async-nats version this crate is built on, for building a client yourself
/// ([`NatsTransport::new`]).
pub use async_nats;
