//! Completing claimed rows in one statement (DSP-3, DSP-5): accepted rows deleted, failed
//! rows released with their retry delay or moved to the dead table, deferred rows released.
//! Every part is fenced, by the claim token or by what a locked page's rows are.

use relayer_core::BoundedText;
use relayer_core::store::{Completion, CompletionReport};
use tokio_postgres::types::Type;
use uuid::Uuid;

use super::statements::OutboxStatements;
use crate::error::StorageError;
use crate::exec::{Executor, one_row};

impl OutboxStatements {
    /// Writes `completion` for rows claimed with `token`, in one statement (DSP-3, DSP-5).
    pub async fn complete(
        &self,
        client: &impl Executor,
        token: Uuid,
        completion: &Completion,
    ) -> Result<CompletionReport, StorageError> {
        self.run_completion(client, [&self.complete, &self.delete_accepted], Some(token), completion).await
    }

    /// Runs `statements[0]`, the full completion, or `statements[1]`, the accepted-only
    /// delete, when every row of `completion` was accepted.
    async fn run_completion(
        &self,
        client: &impl Executor,
        statements: [&str; 2],
        token: Option<Uuid>,
        completion: &Completion,
    ) -> Result<CompletionReport, StorageError> {
        if completion.is_empty() {
            return Ok(CompletionReport::default());
        }
        let c = completion.columns();
        let requested = u64::try_from(completion.len()).unwrap_or(u64::MAX);
        if c.failed_seq.is_empty() && c.deferred_seq.is_empty() {
            let deleted = one_row(
                client,
                statements[1],
                &[(&token, Type::UUID), (&c.accepted, Type::INT8_ARRAY)],
                "deleting accepted outbox rows",
            )
            .await?;
            let deleted = u64::try_from(deleted.get::<_, i64>(0)).unwrap_or(0);
            return Ok(CompletionReport {
                deleted,
                fenced_out: requested.saturating_sub(deleted),
                ..CompletionReport::default()
            });
        }
        let statement = statements[0];
        // A transport's error is external text: one with a NUL would fail this statement,
        // and the batch would be sent again forever, never counted (SPEC §15).
        let failed_error: Vec<BoundedText> = c.failed_error.iter().map(|e| BoundedText::error(e)).collect();
        let row = one_row(
            client,
            statement,
            &[
                (&token, Type::UUID),
                (&c.accepted, Type::INT8_ARRAY),
                (&c.failed_seq, Type::INT8_ARRAY),
                (&failed_error, Type::TEXT_ARRAY),
                (&c.failed_delay_us, Type::INT8_ARRAY),
                (&c.failed_dead, Type::BOOL_ARRAY),
                (&c.deferred_seq, Type::INT8_ARRAY),
                (&c.deferred_delay_us, Type::INT8_ARRAY),
            ],
            "completing claimed outbox rows",
        )
        .await?;
        let count = |index: usize| u64::try_from(row.get::<_, i64>(index)).unwrap_or(0);
        let (deleted, released, dead, deferred) = (count(0), count(1), count(2), count(3));
        let touched = deleted + released + dead + deferred;
        Ok(CompletionReport {
            deleted,
            released,
            dead,
            deferred,
            fenced_out: requested.saturating_sub(touched),
        })
    }

    /// Writes `completion` for rows the caller's transaction locked (the sweeper's
    /// [`RecoveryStatements::lock_page`](crate::recovery::RecoveryStatements::lock_page)).
    /// Rows are matched by `seq` and fenced by what such rows are: unordered and without a
    /// live claim, so a lane row or a row a dispatcher holds is never changed (reached
    /// through [`LockOutbox`](relayer_core::store::LockOutbox) on a [`PgStore`](crate::PgStore)).
    pub(crate) async fn complete_locked(
        &self,
        client: &impl Executor,
        completion: &Completion,
    ) -> Result<CompletionReport, StorageError> {
        self.run_completion(client, [&self.complete_locked, &self.delete_locked], None, completion).await
    }
}
