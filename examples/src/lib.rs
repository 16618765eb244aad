//! Shared pieces of relayer's examples (TRN-4), written against relayer's public API only:
//!
//! - [`webhook`]: a custom [`Transport`](relayer::Transport) that POSTs each message to an
//!   HTTP endpoint, classifying failures by status code;
//! - [`receiver`]: the endpoint — a minimal HTTP/1.1 server on plain tokio TCP that
//!   records what it received and can refuse a message once, to show a retry;
//! - [`database`]: a throwaway namespace on the local PostgreSQL.
//!
//! The examples themselves are `webhook.rs`, `service.rs` and `inbox.rs` beside this crate.
#![deny(missing_docs)]

pub mod database;
pub mod receiver;
pub mod webhook;

/// An example's error: anything, with its message.
pub type ExampleResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
