//! The store capabilities the workers need, one small trait per capability, and the pure
//! data they exchange.
//!
//! Workers do not talk to "the database"; each names only what it uses. The dispatcher
//! and the recovery sweeper claim outbox rows ([`ClaimOutbox`]) and complete them
//! ([`CompleteOutbox`]); the sweeper also scans for rows left behind ([`ScanRecovery`]);
//! retention cleanup only deletes expired rows ([`DeleteExpired`]); leaders hold leases
//! ([`HoldLease`], [`CheckLease`]); a tripped destination's rows are held back for its
//! cool-down ([`HoldBackDestination`]); the dispatcher's lane loop owns ordered lanes and
//! moves their heads ([`WorkLanes`]), and operators release and skip parked lanes
//! ([`AdministerLanes`]); the dead-letter policy worker redrives and expires
//! dead letters ([`MoveDeadLetters`]); the queue consumer receives ([`ReceiveQueue`]),
//! settles ([`SettleQueue`]) and keeps its messages invisible ([`ExtendVisibility`]), and
//! records them in its inbox ([`RecordInbox`]). A worker's bounds are therefore a readable list of what it may do to
//! the store, and a user who implements the traits for another store — or wraps relayer's
//! PostgreSQL handle to add metrics, faults or logging — implements only what the worker
//! at hand asks for. One trait per capability, never one trait with every method.
//!
//! Every capability extends [`Store`], which fixes the one error type of a store so bounds
//! such as `S: ClaimOutbox + CompleteOutbox` name a single `S::Error`. That error answers
//! [`StoreError::is_transient`], so callers decide "retry later or give up" without
//! matching on driver internals.
//!
//! Methods take `&self`: an implementation is a handle bound to one connection. Workers get
//! theirs as a [`Session`](crate::session::Session) opened by a
//! [`StoreSource`](crate::session::StoreSource); whether calls share a transaction is the
//! session's state ([`Session::begin`](crate::session::Session::begin)), not the trait's.
//! relayer's PostgreSQL session is `relayer_postgres::PgSession`, and
//! `relayer_test_support::FaultyStore` wraps any source to inject faults at chosen calls.
//! This module does no I/O.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use relayer_core::Uuid;
//! use relayer_core::store::{ClaimOutbox, CompleteOutbox, Completion, CompletionReport, StoreError};
//!
//! /// Claims `seqs` and gives every row back unsent: it needs to claim and to complete,
//! /// nothing else, so any store with those two capabilities will do.
//! async fn hand_back<S>(store: &S, seqs: &[i64]) -> Result<CompletionReport, S::Error>
//! where
//!     S: ClaimOutbox + CompleteOutbox,
//! {
//!     let token = Uuid::new_v4();
//!     let claimed = store.claim_seqs(token, Duration::from_secs(30), seqs).await?;
//!     let mut completion = Completion::new();
//!     for message in &claimed.messages {
//!         completion.defer(message.seq, Duration::ZERO);
//!     }
//!     // Rows that cannot be decoded are never handed back: they go to the dead table.
//!     completion.bury_undecodable(&claimed.undecodable);
//!     match store.complete(token, &completion).await {
//!         // The claims expire on their own; a transient failure is not worth a panic.
//!         Err(error) if error.is_transient() => Ok(CompletionReport::default()),
//!         other => other,
//!     }
//! }
//! ```

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::cursor::{PassPlan, RecoveryPage, ScanWindow};
use crate::eligibility::RetentionTable;
use crate::message::Envelope;
use crate::time::Timestamp;

mod check_lease;
mod extend_visibility;
mod hold_back;
mod lanes;
mod move_dead_letters;
mod receive_queue;
mod record_inbox;
mod settle_queue;

pub use check_lease::CheckLease;
pub use extend_visibility::ExtendVisibility;
pub use hold_back::HoldBackDestination;
pub use lanes::{AdministerLanes, HeadFailure, LaneClaim, LaneClaimRequest, LaneHead, WorkLanes};
pub use move_dead_letters::MoveDeadLetters;
pub use receive_queue::{ReceiveQueue, ReceivedPage};
pub use record_inbox::{InboxEntry, RecordInbox};
pub use settle_queue::{DeadLetter, Requeue, SettleQueue};

/// A store's error: an error that says whether retrying later may succeed.
pub trait StoreError: std::error::Error + Send + Sync + 'static {
    /// Whether retrying later may succeed (a lost connection, a timeout, a serialization
    /// failure), as opposed to a failure that will repeat (a missing schema, a bad row).
    fn is_transient(&self) -> bool;

    /// Whether this is a transient conflict with a concurrent transaction — a deadlock, a
    /// serialization failure, a lock not available — that a retry after a short pause is
    /// likely to get past ([`CONFLICT_RETRIES`](crate::backoff::CONFLICT_RETRIES),
    /// [`conflict_pause`](crate::backoff::conflict_pause)), unlike an outage, which earns
    /// the pass backoff. Implies [`is_transient`](Self::is_transient). Default: never.
    fn is_conflict(&self) -> bool {
        false
    }

    /// Whether the namespace's schema is not applied yet (no relayer tables, or no version
    /// recorded). A worker that meets it at start retries with its backoff until a migration
    /// runs (RES-4); only a wrong schema version is permanent. Default: never.
    fn is_schema_missing(&self) -> bool {
        false
    }
}

/// The base of every store capability: the error its methods return.
pub trait Store: Send + Sync {
    /// The store's error.
    type Error: StoreError;
}

/// Claiming outbox rows (DSP-1, OUT-4): the dispatcher and the recovery sweeper.
///
/// A claim stamps `token` on the rows and hides them for `claim`; a completion under the
/// same token settles them ([`CompleteOutbox`]). Rows come back in `seq` order. Ordered
/// (lane) rows are never returned. A claimed row that cannot be decoded comes back as an
/// [`UndecodableRow`], still claimed: the caller buries it with the rest of the batch's
/// completion ([`Completion::bury_undecodable`]), so one bad row never stalls its batch.
#[async_trait]
pub trait ClaimOutbox: Store {
    /// Claims up to `limit` due, unordered rows no one holds, oldest due first. Rows of the
    /// `tripped` (transport, destination) pairs are left alone (DSP-6).
    async fn claim_due(
        &self,
        token: Uuid,
        claim: Duration,
        limit: u32,
        tripped: &[(String, String)],
    ) -> Result<Claimed, Self::Error>;

    /// Claims those of `seqs` that are unordered, due and free.
    async fn claim_seqs(&self, token: Uuid, claim: Duration, seqs: &[i64]) -> Result<Claimed, Self::Error>;
}

/// Completing claimed outbox rows (DSP-3, DSP-5): the dispatcher and the recovery sweeper.
#[async_trait]
pub trait CompleteOutbox: Store {
    /// Writes `completion` for rows claimed with `token`, all at once, fenced by the token:
    /// rows no longer held under it are left alone and counted as
    /// [`CompletionReport::fenced_out`].
    async fn complete(&self, token: Uuid, completion: &Completion) -> Result<CompletionReport, Self::Error>;
}

/// Completing outbox rows held by the caller's transaction, for a worker whose sends and
/// completion commit together with its leadership (the recovery sweeper, SWP-4). The row
/// locks taken by [`ScanRecovery::lock_recovery_page`] are the claim: nothing outside the
/// transaction could see a claim written inside it, so none is written.
#[async_trait]
pub trait LockOutbox: Store {
    /// Writes `completion` for rows this transaction locked; the locks fence it.
    async fn complete_locked(&self, completion: &Completion) -> Result<CompletionReport, Self::Error>;
}

/// The recovery sweeper's read (SWP-2, SWP-3, SWP-4), paged by the
/// [`KeysetCursor`](crate::KeysetCursor).
#[async_trait]
pub trait ScanRecovery: Store {
    /// Reads one recovery page and locks its rows until the caller's transaction ends, in
    /// one step: up to `request.limit` recovery-eligible `seq`s of the window — unordered,
    /// due, and at least `recovery_delay` old — reading a bounded number of rows of it and
    /// saying how far it read when that bound stopped it ([`RecoveryPage`]); then those
    /// rows as [`lock`](LockedPage::locked)ed, skipping any another holds (a live claim,
    /// another transaction's lock).
    ///
    /// `None` when `request.leader` is set and that lease is not held: nothing was read or
    /// locked. A pass may send this in the same round trip as its lease acquisition.
    async fn lock_recovery_page(&self, request: &PageRequest<'_>) -> Result<Option<LockedPage>, Self::Error>;
}

/// What [`ScanRecovery::lock_recovery_page`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRequest<'a> {
    /// The window to scan, or [`PassPlan::CaptureBoundary`]: capture a new traversal's
    /// boundary (the highest pending unordered `seq`) and scan up to it.
    pub plan: PassPlan,
    /// How old a row must be before recovery takes it (SWP-2).
    pub recovery_delay: Duration,
    /// The most eligible rows to return.
    pub limit: u32,
    /// Read nothing unless this lease is live and held by its owner.
    pub leader: Option<LeaderCheck<'a>>,
}

/// A lease a read is conditional on: `job` held, unexpired, by `owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderCheck<'a> {
    /// The lease's job.
    pub job: &'a str,
    /// The owner that must hold it.
    pub owner: &'a str,
}

/// What [`ScanRecovery::lock_recovery_page`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockedPage {
    /// The window scanned: the request's, or `(START, boundary]` for a boundary captured
    /// now; `None` when a capture found nothing pending.
    pub window: Option<ScanWindow>,
    /// The eligible `seq`s and how far the scan read: what the cursor records.
    pub page: RecoveryPage,
    /// The page's rows this transaction now holds, in `seq` order.
    pub locked: Vec<ClaimedMessage>,
    /// Rows this transaction now holds that could not be decoded, in `seq` order: the
    /// pass buries them with its completion ([`Completion::bury_undecodable`]).
    pub undecodable: Vec<UndecodableRow>,
}

/// Retention deletes (RET-1..3): retention cleanup.
#[async_trait]
pub trait DeleteExpired: Store {
    /// Deletes up to `limit` rows of `table` older than `retention`, as one short
    /// transaction; returns how many. Fewer than `limit` means the backlog is gone for now.
    /// The outbox never expires by age (RET-1): for it this deletes nothing.
    ///
    /// Under a lease, the batch's transaction also locks the lease row, acts only while the
    /// lease is still its holder's (same owner and term) and unexpired, and renews it for
    /// the lease's duration (LDR-2, LDR-6). `None` then means it was not — taken over, or
    /// lapsed, or its row held by a contender's probe at that instant — and nothing was
    /// deleted or renewed. Without a lease the answer is always `Some`.
    async fn delete_expired(
        &self,
        table: RetentionTable,
        retention: Duration,
        limit: u32,
        lease: Option<UnderLease<'_>>,
    ) -> Result<Option<u64>, Self::Error>;
}

/// A lease that a batch runs under and renews (LDR-2, LDR-6).
#[derive(Clone, Copy, Debug)]
pub struct UnderLease<'a> {
    /// The lease as its holder took it: the batch acts only while owner and term still match.
    pub lease: &'a Lease,
    /// How long the lease lasts after the batch renewed it.
    pub lease_duration: Duration,
}

/// Checking that the namespace holds the schema version this build needs: every worker's
/// first step, retried while the store is unreachable.
#[async_trait]
pub trait VerifySchema: Store {
    /// The version found; a permanent error when the schema is missing, older than this
    /// build needs, or newer than it knows.
    async fn verify_schema(&self) -> Result<i32, Self::Error>;
}

/// Leadership leases (LDR-2, LDR-6): the sweeper's and cleanup's leaders.
#[async_trait]
pub trait HoldLease: Store {
    /// Tries to lead `job` as `owner` for `lease_duration`, never waiting for another
    /// pass. `None`: another owner leads this turn.
    async fn acquire(
        &self,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, Self::Error>;

    /// Restarts the expiry of `lease`. `None`: the lease is no longer this holder's.
    async fn renew(&self, lease: &Lease, lease_duration: Duration) -> Result<Option<Lease>, Self::Error>;

    /// Ends `owner`'s lease on `job` now; returns whether a live lease was released.
    async fn release(&self, job: &str, owner: &str) -> Result<bool, Self::Error>;
}

/// An outbox row held under a claim: where it goes and what the transport receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedMessage {
    /// The row's sequence number.
    pub seq: i64,
    /// The transport name.
    pub transport: String,
    /// The destination within the transport.
    pub destination: String,
    /// What the transport receives; `attempts` counts earlier failed sends.
    pub envelope: Envelope,
}

/// One message a writer wrote into the outbox: its row and its id. What
/// `Dispatcher::dispatch_now` sends at once after the caller's commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Enqueued {
    /// The outbox row's sequence number (the `seq` column), growing in enqueue order.
    pub seq: i64,
    /// The message id.
    pub id: crate::message::MessageId,
}

/// What a claim returned: the rows decoded into messages, and those that could not be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claimed {
    /// The claimed rows, decoded, in `seq` order.
    pub messages: Vec<ClaimedMessage>,
    /// The claimed rows that could not be decoded, in `seq` order. They are held under the
    /// claim like the others; bury them with the batch's completion.
    pub undecodable: Vec<UndecodableRow>,
}

/// A row a worker holds but cannot turn into a message it can send (SPEC §15): a column
/// the codec cannot read (headers that are not an object of strings, jsonb `null`, an
/// empty destination …). A row naming a transport the worker lacks is not one (TRN-6): it
/// waits for an instance that has the transport.
///
/// Its [`Display`](std::fmt::Display) names the table, the `seq`, the column and the
/// reason; it is what the dead table's `last_error` (or a parked lane's reason) records:
///
/// ```
/// use relayer_core::store::UndecodableRow;
/// let row = UndecodableRow {
///     table: "app.relayer_outbox".into(),
///     seq: 7,
///     column: "headers".into(),
///     reason: "expected a JSON object of strings, found null".into(),
/// };
/// assert_eq!(
///     row.to_string(),
///     "undecodable row app.relayer_outbox seq 7: column headers: expected a JSON object of strings, found null"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndecodableRow {
    /// The table, `schema.table` unquoted.
    pub table: String,
    /// The row's `seq`.
    pub seq: i64,
    /// The column that could not be decoded.
    pub column: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for UndecodableRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "undecodable row {} seq {}: column {}: {}", self.table, self.seq, self.column, self.reason)
    }
}

/// What became of a claimed batch, to be written by [`CompleteOutbox::complete`].
///
/// Each row appears at most once: accepted, failed (retried or buried) or deferred.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    accepted: Vec<i64>,
    failed_seq: Vec<i64>,
    failed_error: Vec<String>,
    failed_delay_us: Vec<i64>,
    failed_dead: Vec<bool>,
    deferred_seq: Vec<i64>,
    deferred_delay_us: Vec<i64>,
}

/// A [`Completion`] as parallel columns, the shape a store binds as array parameters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CompletionColumns<'a> {
    /// Rows the transport accepted: delete them.
    pub accepted: &'a [i64],
    /// Failed rows.
    pub failed_seq: &'a [i64],
    /// Each failed row's error.
    pub failed_error: &'a [String],
    /// Each failed row's retry delay, in microseconds (0 when buried).
    pub failed_delay_us: &'a [i64],
    /// Whether each failed row is poison: moved to the dead table instead of retried.
    pub failed_dead: &'a [bool],
    /// Rows released unsent, without counting an attempt.
    pub deferred_seq: &'a [i64],
    /// Each deferred row's delay, in microseconds.
    pub deferred_delay_us: &'a [i64],
}

impl Completion {
    /// An empty completion.
    pub fn new() -> Self {
        Completion::default()
    }

    /// The transport accepted row `seq`: delete it.
    pub fn accept(&mut self, seq: i64) {
        self.accepted.push(seq);
    }

    /// Sending row `seq` failed with `error`: count the attempt, record the error and make
    /// it visible again `delay` from now (DSP-3).
    pub fn retry(&mut self, seq: i64, error: impl Into<String>, delay: Duration) {
        self.failed_seq.push(seq);
        self.failed_error.push(error.into());
        self.failed_delay_us.push(crate::time::database_micros(delay));
        self.failed_dead.push(false);
    }

    /// Sending row `seq` failed with `error` and it is poison: count the attempt and move it
    /// to the dead table (DSP-5).
    pub fn bury(&mut self, seq: i64, error: impl Into<String>) {
        self.failed_seq.push(seq);
        self.failed_error.push(error.into());
        self.failed_delay_us.push(0);
        self.failed_dead.push(true);
    }

    /// The claimed `rows` cannot be decoded: move each to the dead table with its
    /// description (table, `seq`, column, reason) as `last_error`, in the same statement
    /// as the rest of the batch (SPEC §15). Like a poison row, it counts one attempt.
    pub fn bury_undecodable(&mut self, rows: &[UndecodableRow]) {
        for row in rows {
            self.bury(row.seq, row.to_string());
        }
    }

    /// Row `seq` was not sent (its destination is tripped, or shutdown began): release the
    /// claim without counting an attempt, visible again `delay` from now.
    pub fn defer(&mut self, seq: i64, delay: Duration) {
        self.deferred_seq.push(seq);
        self.deferred_delay_us.push(crate::time::database_micros(delay));
    }

    /// How many rows this completion covers.
    pub fn len(&self) -> usize {
        self.accepted.len() + self.failed_seq.len() + self.deferred_seq.len()
    }

    /// Whether it covers no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The completion as parallel columns, for store implementations.
    pub fn columns(&self) -> CompletionColumns<'_> {
        CompletionColumns {
            accepted: &self.accepted,
            failed_seq: &self.failed_seq,
            failed_error: &self.failed_error,
            failed_delay_us: &self.failed_delay_us,
            failed_dead: &self.failed_dead,
            deferred_seq: &self.deferred_seq,
            deferred_delay_us: &self.deferred_delay_us,
        }
    }
}

/// What [`CompleteOutbox::complete`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionReport {
    /// Accepted rows deleted.
    pub deleted: u64,
    /// Failed rows released for a retry.
    pub released: u64,
    /// Failed rows moved to the dead table.
    pub dead: u64,
    /// Unsent rows released without counting an attempt.
    pub deferred: u64,
    /// Rows no longer held under this claim (it expired and another dispatcher took them):
    /// left untouched.
    pub fenced_out: u64,
}

/// A lease held by `owner` for `job`, as the store recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The job the lease is for (`sweeper`, `cleanup`, …).
    pub job: String,
    /// The holder's identity, unique per worker instance.
    pub owner: String,
    /// Grows by one with each new holder; fenced statements compare it (LDR-6).
    pub term: i64,
    /// When the lease lapses unless renewed (database clock).
    pub expires_at: Timestamp,
}
