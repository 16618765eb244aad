//! Redriving and expiring dead letters per message type (DLP-3, DLP-5).

use std::time::Duration;

use async_trait::async_trait;

use super::Store;
use crate::dead_letter::DeadLetterType;

/// Applying dead-letter policies (§11): the dead-letter policy worker.
///
/// Every method is one statement, committed on its own: a move picks its rows with
/// `SKIP LOCKED` semantics and changes them at once, so replicas running side by side
/// without a leader move each dead letter exactly once (DLP-3). Every method matches both
/// the dead-letter queue and the original topic of a queue type (DLP-4), and leaves an
/// outbox type's lane rows alone (LAN-5).
#[async_trait]
pub trait MoveDeadLetters: Store {
    /// Moves up to `limit` dead letters of `message_type` back where they came from:
    /// those dead-lettered at least `after` ago and created less than `give_up_after` ago.
    /// Returns how many moved; fewer than `limit` means none is due for now.
    async fn redrive_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
        limit: u32,
    ) -> Result<u64, Self::Error>;

    /// Deletes up to `limit` dead letters of `message_type` dead-lettered at least `after`
    /// ago; returns how many.
    async fn expire_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        limit: u32,
    ) -> Result<u64, Self::Error>;

    /// Counts the dead letters of `message_type` whose redrive gave up: due (`after`) but
    /// created `give_up_after` ago or earlier (DLP-5). A plain read, and a bounded one: a
    /// store may stop counting at a cap of its own (relayer-postgres: 10,000) and return
    /// the cap, meaning "at least that many".
    async fn count_stuck_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
    ) -> Result<u64, Self::Error>;
}
