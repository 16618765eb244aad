//! [`SqlxWriter`]: the outbox writer on sqlx connections and transactions.

use relayer_core::{MessageError, Namespace, NewMessage, TransportRegistry, error_chain};
use relayer_postgres::{Enqueued, OutboxWriter, StatementMode};
use sqlx::Postgres;

/// Writes messages into the outbox inside the caller's sqlx transaction (OUT-1..4, DRV-1).
///
/// It wraps an [`OutboxWriter`] and runs the statement that writer renders, so everything
/// the writer is configured with (transports, largest body, notification) holds here too.
#[derive(Clone, Debug)]
pub struct SqlxWriter {
    writer: OutboxWriter,
    persistent: bool,
}

/// Why [`SqlxWriter::enqueue`] or [`SqlxQueueWriter::enqueue`](crate::SqlxQueueWriter::enqueue)
/// wrote nothing.
///
/// As every top-level relayer error, its message says what failed and why, the whole cause
/// chain, and it has no [`source`](std::error::Error::source): printing the chain says
/// nothing twice; the typed cause is the variant's field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlxEnqueueError {
    /// A message of the batch was refused (OUT-3); nothing was written.
    #[error(transparent)]
    Invalid(#[from] MessageError),
    /// The statement failed; the caller's transaction is likely aborted.
    #[error("enqueueing {} through sqlx: {}", crate::Messages(*count), error_chain(error))]
    Database {
        /// How many messages the batch had.
        count: usize,
        /// What sqlx reported.
        error: sqlx::Error,
    },
}

impl SqlxWriter {
    /// A writer for `namespace` accepting messages for the named transports (see
    /// [`OutboxWriter::new`]).
    pub fn new<I>(namespace: &Namespace, transports: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        SqlxWriter::from(OutboxWriter::new(namespace, transports))
    }

    /// A writer accepting exactly the transports of `registry`.
    pub fn for_registry(namespace: &Namespace, registry: &TransportRegistry) -> Self {
        SqlxWriter::from(OutboxWriter::for_registry(namespace, registry))
    }

    /// How the statement is sent: [`StatementMode::Prepared`] (the default) lets sqlx
    /// prepare it once per connection and cache it; [`StatementMode::Unnamed`] sends it
    /// unnamed every time, as behind a transaction-mode pooler that does not track prepared
    /// statements (PgBouncer before 1.21).
    ///
    /// Behind such a pooler, run unnamed statements **inside a transaction** (`&mut *tx`):
    /// sqlx sends an unnamed statement in two exchanges, and outside a transaction the
    /// pooler may hand the server connection to another client between them (the second
    /// then fails, or binds another client's statement). tokio-postgres's unnamed mode sends
    /// everything at once and has no such gap.
    pub fn with_statement_mode(mut self, mode: StatementMode) -> Self {
        self.persistent = mode == StatementMode::Prepared;
        self
    }

    /// The tokio-postgres writer this one runs the statements of.
    pub fn outbox_writer(&self) -> &OutboxWriter {
        &self.writer
    }

    /// Writes `messages` on `executor` in one statement and returns their rows in order.
    ///
    /// `executor` is anything sqlx runs queries on: `&mut *transaction` (the usual case),
    /// a `&mut PgConnection`, or a `&PgPool` (the rows then commit at once). Every message
    /// is validated first; on any refusal nothing is written. The rows become visible, and
    /// dispatchers listening on the namespace's channel wake, iff the transaction commits.
    pub async fn enqueue<'c, E>(
        &self,
        executor: E,
        messages: &[NewMessage],
    ) -> Result<Vec<Enqueued>, SqlxEnqueueError>
    where
        E: sqlx::Executor<'c, Database = Postgres>,
    {
        let batch = self.writer.batch(messages)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let count = batch.len();
        crate::bind::run_enqueue(executor, batch.statement(), batch.params(), self.persistent)
            .await
            .map_err(|error| SqlxEnqueueError::Database { count, error })
    }
}

impl From<OutboxWriter> for SqlxWriter {
    fn from(writer: OutboxWriter) -> Self {
        SqlxWriter { writer, persistent: true }
    }
}
