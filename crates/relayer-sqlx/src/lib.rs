//! relayer for services built on sqlx: enqueue into the outbox on an sqlx connection or
//! inside an sqlx transaction (DRV-1).
//!
//! [`SqlxWriter`] runs the very statement the tokio-postgres
//! [`OutboxWriter`](relayer_postgres::OutboxWriter) runs, byte for byte, with the same
//! parameters of the same types: both take the statement text and the parameter columns
//! from [`OutboxWriter::batch`](relayer_postgres::OutboxWriter::batch), the one place
//! they are made. So an sqlx enqueue is one statement (one round trip once sqlx has prepared
//! it; an unnamed one costs sqlx two), its rows exist iff the caller's
//! transaction commits, and the same `pg_notify` inside that statement wakes every
//! listening dispatcher at the commit (OUT-1, OUT-4). A rolled-back enqueue is never sent.
//!
//! Only the writing side is here. The workers (dispatcher, sweeper, cleanup) keep their own
//! tokio-postgres pools either way: start them with the `relayer` host, on the same
//! database.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use relayer_core::{Namespace, NewMessage};
//! use relayer_sqlx::SqlxWriter;
//!
//! let writer = SqlxWriter::new(&Namespace::default(), ["queue"]);
//! let mut tx = pool.begin().await?;
//! // … the service's own writes on `&mut *tx` …
//! writer.enqueue(&mut *tx, &[NewMessage::new("queue", "orders.created", b"{}".to_vec())]).await?;
//! tx.commit().await?; // sent at least once from here on; never if rolled back
//! # Ok(()) }
//! ```
//!
//! The crate depends on sqlx with PostgreSQL and the tokio runtime only (no macros, no
//! TLS of its own); it encodes the three column types that need sqlx features (uuid, jsonb,
//! timestamptz) itself, in PostgreSQL's binary format. Your application's own sqlx features
//! (TLS, macros, a runtime) unify with these: a pool you built with `tls-rustls` works here.
//!
//! Behind a transaction-mode pooler that does not track prepared statements (PgBouncer
//! before 1.21), give [`SqlxWriter`], [`SqlxQueueWriter`] and [`SqlxInbox`]
//! [`StatementMode::Unnamed`](relayer_postgres::StatementMode::Unnamed) through their
//! `with_statement_mode`.
//!
//! Also here, each running the tokio-postgres side's statement from the same source:
//! [`SqlxQueueWriter`], direct enqueue to relayer's PostgreSQL queue (QUE-4, the sqlx side
//! of `relayer_postgres::QueueWriter`), and [`SqlxInbox`], the inbox boundary inside an sqlx
//! transaction (QUE-3, the sqlx side of `relayer_postgres::Inbox`): record first, then
//! the effects, then commit.
#![deny(missing_docs)]

mod bind;
mod inbox;
mod queue_writer;
mod wire;
mod writer;

pub use inbox::{Handled, SqlxInbox, SqlxInboxError};
pub use queue_writer::SqlxQueueWriter;
pub use writer::{SqlxEnqueueError, SqlxWriter};

/// `1 message`, `2 messages`: a batch's size in an error message.
struct Messages(usize);

impl std::fmt::Display for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1 => f.write_str("1 message"),
            count => write!(f, "{count} messages"),
        }
    }
}
