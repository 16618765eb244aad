//! The outbox: writing messages (OUT-1..4), claiming them (DSP-1) and completing them
//! (DSP-3, DSP-5).
//!
//! A row's life is one column, `visible_at`: a row is free to claim iff
//! `visible_at <= now()` on the database clock (NS-4). The writer sets it to the delivery
//! time (or `now()`); a claim moves it to `now() + claim_duration` and stamps a random
//! `claim_token`; completion either deletes the row (accepted), moves it forward by the
//! retry delay and clears the token (failed), or moves it to the dead table (poison). Every
//! completion is fenced by the claim token, so a dispatcher whose claim expired and was
//! taken over changes nothing.
//!
//! Every worker statement runs on an [`Executor`](crate::Executor): prepared once per
//! connection and then only bound (a [`Prepared`](crate::Prepared) client), or sent unnamed
//! with explicit parameter types. Every "take a batch of n" statement has the
//! `seq = ANY(ARRAY(SELECT … LIMIT n FOR UPDATE SKIP LOCKED))` shape, which stays correct
//! under a generic plan made while the table was empty (docs/performance.md, "Raw
//! limits"). Ordered (lane) rows are never claimed here: see [`crate::lanes`].
//!
//! One file per part: the writer (`writer.rs`, `batch.rs`, `columns.rs`), the
//! statements (`statements.rs`), the claim (`claim.rs`), the completion (`completion.rs`)
//! and the channel names (`channel.rs`). Row decoding lives in `crate::row_codec`.

mod batch;
mod channel;
mod claim;
mod columns;
mod completion;
mod statements;
mod writer;

// Pure data, defined in the core crate next to the store traits; re-exported so
// `relayer_postgres::outbox::ClaimedMessage` and friends keep working.
pub use relayer_core::store::{Claimed, ClaimedMessage, Completion, CompletionReport, UndecodableRow};

pub(crate) use self::batch::insert_and_read_back;
#[cfg(test)]
pub(crate) use self::batch::placeholders;
pub use self::batch::{EnqueueBatch, EnqueueParam};
pub use self::channel::notify_channel;
pub(crate) use self::channel::{channel, lane_lock_prefix};
pub use self::claim::{HOLD_BACK_BATCH, HOLD_BACK_HEAD, PARKED_COOL_DOWNS};
pub(crate) use self::columns::WrittenColumns;
pub use self::statements::OutboxStatements;
pub use self::writer::{DEFAULT_MAX_BODY_BYTES, EnqueueError, Enqueued, OutboxWriter};

#[cfg(test)]
mod tests;
