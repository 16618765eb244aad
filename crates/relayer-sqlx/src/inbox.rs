//! [`SqlxInbox`]: the inbox boundary (QUE-3) inside an sqlx transaction — record first,
//! then the effects, then commit.

use std::fmt;

use relayer_core::{MessageId, Namespace, error_chain};
use relayer_postgres::{Inbox, InboxEntry, StatementMode, StorageError};
use sqlx::{Acquire, Postgres};

use crate::wire::PgUuid;

/// Processes each message effectively once for a consumer whose effects live in the same
/// database: the inbox row `(consumer, message id)` and the effects commit together, and a
/// message already recorded runs no effect (QUE-3).
///
/// It runs the record statement of the tokio-postgres [`Inbox`], byte for byte (DRV-1), so
/// both drivers share one inbox table and deduplicate against each other.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool, id: relayer_core::MessageId) -> Result<(), Box<dyn std::error::Error>> {
/// use relayer_core::Namespace;
/// use relayer_sqlx::{Handled, SqlxInbox};
///
/// let inbox = SqlxInbox::new(&Namespace::default());
/// let handled = inbox
///     .handle(&pool, "billing", id, async |tx: &mut sqlx::PgConnection| {
///         sqlx::query("UPDATE accounts SET paid = true WHERE id = 7").execute(&mut *tx).await?;
///         Ok::<_, sqlx::Error>(())
///     })
///     .await?;
/// if let Handled::Duplicate = handled { /* recorded before: nothing ran */ }
/// // … then acknowledge the message to its broker.
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqlxInbox {
    inbox: Inbox,
    /// Whether sqlx prepares the record statement and caches it per connection.
    persistent: bool,
}

/// What [`SqlxInbox::handle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled<T> {
    /// The message was new: the effects ran and committed with its inbox row.
    Applied(T),
    /// The message was recorded before: no effect ran.
    Duplicate,
}

/// Why [`SqlxInbox::handle`] or [`SqlxInbox::record`] did not complete. Whatever it is,
/// nothing of the transaction was committed.
///
/// Its message says what failed and why, the whole cause chain, and it has no
/// [`source`](std::error::Error::source) (as [`SqlxEnqueueError`](crate::SqlxEnqueueError)):
/// the typed cause is the variant's field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlxInboxError {
    /// The consumer name is empty or has a NUL.
    #[error(transparent)]
    Refused(StorageError),
    /// A statement, the begin or the commit failed.
    #[error("{context} through sqlx: {}", error_chain(error))]
    Database {
        /// What was being done, naming the message and the consumer.
        context: String,
        /// What sqlx reported.
        error: sqlx::Error,
    },
    /// The effects failed; their transaction was rolled back, the message is not recorded.
    ///
    /// The effects' error is `error`, its chain in the message. If the rollback failed
    /// too, `rollback` holds why and the message says so: the transaction still ends
    /// uncommitted (PostgreSQL rolls back a transaction whose session is lost).
    #[error("the effects of message {message_id} for {consumer:?} failed: {}{}", error_chain(&**error), RollbackFailure(rollback.as_ref()))]
    Effects {
        /// The message.
        message_id: MessageId,
        /// The consumer.
        consumer: String,
        /// What the effects returned.
        error: Box<dyn std::error::Error + Send + Sync>,
        /// Why the rollback that followed failed, if it did.
        rollback: Option<sqlx::Error>,
    },
}

/// The tail of an [`SqlxInboxError::Effects`] message: nothing, or the rollback's failure.
struct RollbackFailure<'a>(Option<&'a sqlx::Error>);

impl fmt::Display for RollbackFailure<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => Ok(()),
            Some(error) => write!(f, " (and rolling back then failed too: {})", error_chain(error)),
        }
    }
}

impl SqlxInbox {
    /// The inbox of `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        SqlxInbox { inbox: Inbox::new(namespace), persistent: true }
    }

    /// How the record statement is sent: [`StatementMode::Prepared`] (the default) lets
    /// sqlx prepare it once per connection and cache it; [`StatementMode::Unnamed`] sends
    /// it unnamed every time, as behind a transaction-mode pooler that does not track
    /// prepared statements (PgBouncer before 1.21). The transaction's `BEGIN`, `COMMIT`
    /// and `ROLLBACK` are simple queries either way; the effects' statements are yours.
    #[must_use]
    pub fn with_statement_mode(mut self, mode: StatementMode) -> Self {
        self.persistent = mode == StatementMode::Prepared;
        self
    }

    /// Records `message_id` for `consumer` on `executor` — the transaction that will carry
    /// the effects (`&mut *tx`). Call it before any effect; it waits while another open
    /// transaction holds the same record. [`InboxEntry::First`]: run the effects, then
    /// commit; [`InboxEntry::Duplicate`]: skip them.
    pub async fn record<'c, E>(
        &self,
        executor: E,
        consumer: &str,
        message_id: MessageId,
    ) -> Result<InboxEntry, SqlxInboxError>
    where
        E: sqlx::Executor<'c, Database = Postgres>,
    {
        let statement = self.inbox.record_statement(consumer, message_id).map_err(SqlxInboxError::Refused)?;
        let done = sqlx::query(statement)
            .persistent(self.persistent)
            .bind(consumer)
            .bind(PgUuid(*message_id.as_uuid()))
            .execute(executor)
            .await
            .map_err(|error| SqlxInboxError::Database {
                context: format!("recording message {message_id} in the inbox of {consumer:?}"),
                error,
            })?;
        Ok(InboxEntry::from_inserted(done.rows_affected()))
    }

    /// The whole boundary: begins a transaction on `connection` (a `&PgPool` or a
    /// `&mut PgConnection`), records the message, runs `effects` on the transaction only if
    /// the message is new, and commits. Effects that fail roll everything back, the inbox
    /// row included, so a redelivery runs them again.
    pub async fn handle<'a, A, T, E>(
        &self,
        connection: A,
        consumer: &str,
        message_id: MessageId,
        effects: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, E>,
    ) -> Result<Handled<T>, SqlxInboxError>
    where
        A: Acquire<'a, Database = Postgres>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let database = |context: &str| {
            let context = format!("{context} for message {message_id} of {consumer:?}");
            move |error| SqlxInboxError::Database { context, error }
        };
        let mut tx = connection.begin().await.map_err(database("beginning the inbox transaction"))?;
        if !self.record(&mut *tx, consumer, message_id).await?.is_first() {
            tx.rollback().await.map_err(database("ending the inbox transaction"))?;
            return Ok(Handled::Duplicate);
        }
        let output = match effects(&mut *tx).await {
            Ok(output) => output,
            Err(error) => {
                // The effects' error is the one to return; a failed rollback (the session is
                // likely gone, which ends the transaction uncommitted anyway) rides along.
                let rollback = tx.rollback().await.err();
                return Err(SqlxInboxError::Effects {
                    message_id,
                    consumer: consumer.to_owned(),
                    error: error.into(),
                    rollback,
                });
            }
        };
        tx.commit().await.map_err(database("committing the inbox transaction"))?;
        Ok(Handled::Applied(output))
    }
}
