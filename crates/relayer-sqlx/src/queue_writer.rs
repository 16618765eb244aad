//! [`SqlxQueueWriter`]: direct enqueue to relayer's PostgreSQL queue (QUE-4) on sqlx
//! connections and transactions.

use std::time::Duration;

use relayer_core::{Namespace, NewMessage};
use relayer_postgres::{Enqueued, QueueWriter, StatementMode};
use sqlx::Postgres;

use crate::writer::SqlxEnqueueError;

/// Writes messages straight into the namespace's queue table inside the caller's sqlx
/// transaction, skipping the outbox (QUE-4): they become receivable iff it commits.
///
/// It wraps a tokio-postgres [`QueueWriter`] and runs the statement that writer renders,
/// byte for byte, with the same parameters (DRV-1): the same validation, the same
/// scheduling on the database clock, and the same throttled NOTIFY that wakes consumers.
/// Clones share the throttle; keep one and clone it.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use relayer_core::{Namespace, NewMessage};
/// use relayer_sqlx::SqlxQueueWriter;
///
/// let writer = SqlxQueueWriter::new(&Namespace::default(), "queue");
/// let mut tx = pool.begin().await?;
/// // … the service's own writes on `&mut *tx` …
/// writer.enqueue(&mut *tx, &[NewMessage::new("queue", "orders", b"{}".to_vec())]).await?;
/// tx.commit().await?; // receivable by the queue's consumers from here on
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqlxQueueWriter {
    writer: QueueWriter,
    persistent: bool,
}

impl SqlxQueueWriter {
    /// A writer for `namespace`'s queue table accepting messages whose transport is
    /// `queue_transport` (see [`QueueWriter::new`]).
    pub fn new(namespace: &Namespace, queue_transport: impl Into<String>) -> Self {
        SqlxQueueWriter::from(QueueWriter::new(namespace, queue_transport))
    }

    /// Notifies each queue at most once per `interval` (see
    /// [`QueueWriter::with_notify_interval`]).
    #[must_use]
    pub fn with_notify_interval(self, interval: Duration) -> Self {
        SqlxQueueWriter { writer: self.writer.with_notify_interval(interval), ..self }
    }

    /// How the statement is sent (see [`SqlxWriter::with_statement_mode`](crate::SqlxWriter::with_statement_mode):
    /// unnamed behind a transaction-mode pooler only inside a transaction).
    #[must_use]
    pub fn with_statement_mode(mut self, mode: StatementMode) -> Self {
        self.persistent = mode == StatementMode::Prepared;
        self
    }

    /// The tokio-postgres writer this one runs the statements of.
    pub fn queue_writer(&self) -> &QueueWriter {
        &self.writer
    }

    /// Writes `messages` on `executor` (`&mut *transaction`, a `&mut PgConnection`, or a
    /// `&PgPool`, which commits at once) in one statement and returns their rows in order.
    /// Every message is validated first (OUT-3, and no lane); on any refusal nothing is
    /// written.
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

impl From<QueueWriter> for SqlxQueueWriter {
    fn from(writer: QueueWriter) -> Self {
        SqlxQueueWriter { writer, persistent: true }
    }
}
