//! relayer's [`StoreSource`] on PostgreSQL: [`PgSource`] opens [`PgSession`]s on a
//! [`PgPool`], and a session implements the core store capabilities
//! ([`relayer_core::store`]) by delegating to the statement modules, through [`PgStore`].
//!
//! A source renders one namespace's statements once and shares them with every session.
//! A session holds one pooled connection; its [`Session::begin`]/[`Session::commit`] run
//! `BEGIN`/`COMMIT` on that connection, so the capabilities called in between share the
//! transaction and keep using the connection's prepared statements. A session dropped
//! inside a transaction marks its connection broken, so the pool closes it (the server
//! then rolls the transaction back) instead of lending it, mid-transaction, to another pass.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{
    AdministerLanes, CheckLease, ClaimOutbox, Claimed, CompleteOutbox, Completion, CompletionReport,
    DeadLetter, DeleteExpired, ExtendVisibility, HeadFailure, HoldBackDestination, HoldLease, InboxEntry,
    LaneClaim, LaneClaimRequest, LaneHead, Lease, LockOutbox, LockedPage, MoveDeadLetters, PageRequest,
    ReceiveQueue, ReceivedPage, RecordInbox, Requeue, ScanRecovery, SettleQueue, Store, UnderLease,
    VerifySchema, WorkLanes,
};
use relayer_core::{DeadLetterType, MessageId, Namespace, Receipt, Received, RetentionTable, Uuid};

use crate::dead_letter_policy::DeadLetterPolicyStatements;
use crate::error::StorageError;
use crate::inbox::Inbox;
use crate::lanes::LaneStatements;
use crate::leases::LeaseStatements;
use crate::outbox::OutboxStatements;
use crate::pool::{PgConnectionManager, PgPool};
use crate::queue::ConsumeStatements;
use crate::recovery::RecoveryStatements;
use crate::retention::RetentionStatements;
use crate::store::PgStore;

/// One namespace's rendered statements, shared by a source's sessions.
#[derive(Debug)]
struct Statements {
    namespace: Namespace,
    outbox: OutboxStatements,
    lanes: LaneStatements,
    recovery: RecoveryStatements,
    retention: RetentionStatements,
    leases: LeaseStatements,
    dead_letters: DeadLetterPolicyStatements,
    consume: ConsumeStatements,
    inbox: Inbox,
}

/// Opens [`PgSession`]s on a [`PgPool`] for one namespace: the store a worker is given.
///
/// Cloning is cheap (the pool and the rendered statements are shared).
#[derive(Clone, Debug)]
pub struct PgSource {
    pool: PgPool,
    statements: Arc<Statements>,
}

impl PgSource {
    /// A source of sessions on `pool` for `namespace`'s tables.
    pub fn new(pool: PgPool, namespace: &Namespace) -> Self {
        let statements = Statements {
            namespace: namespace.clone(),
            outbox: OutboxStatements::new(namespace),
            lanes: LaneStatements::new(namespace),
            recovery: RecoveryStatements::new(namespace),
            retention: RetentionStatements::new(namespace),
            leases: LeaseStatements::new(namespace),
            dead_letters: DeadLetterPolicyStatements::new(namespace),
            consume: ConsumeStatements::new(namespace),
            inbox: Inbox::new(namespace),
        };
        PgSource { pool, statements: Arc::new(statements) }
    }

    /// Claims, lane claims and recovery pages read only rows naming one of `names` (the
    /// worker's registry, TRN-6): a row of a transport this process lacks stays pending for
    /// an instance that has it (see [`OutboxStatements::with_transports`]).
    #[must_use]
    pub fn with_transports<I>(self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let namespace = &self.statements.namespace;
        let statements = Statements {
            namespace: namespace.clone(),
            outbox: OutboxStatements::new(namespace).with_transports(names.iter().cloned()),
            lanes: LaneStatements::new(namespace).with_transports(names.iter().cloned()),
            recovery: RecoveryStatements::new(namespace).with_transports(names.iter().cloned()),
            retention: RetentionStatements::new(namespace),
            leases: LeaseStatements::new(namespace),
            dead_letters: DeadLetterPolicyStatements::new(namespace),
            consume: ConsumeStatements::new(namespace),
            inbox: Inbox::new(namespace),
        };
        PgSource { pool: self.pool, statements: Arc::new(statements) }
    }

    /// The namespace whose tables the sessions use.
    pub fn namespace(&self) -> &Namespace {
        &self.statements.namespace
    }

    /// The pool sessions borrow their connections from.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl StoreSource for PgSource {
    type Session = PgSession;

    async fn open(&self) -> Result<PgSession, StorageError> {
        let connection =
            self.pool.get_owned().await.map_err(|e| StorageError::pool("opening a store session", e))?;
        Ok(PgSession { connection, statements: Arc::clone(&self.statements), in_transaction: false })
    }
}

/// One pooled connection of a [`PgSource`], with its namespace's statements.
pub struct PgSession {
    connection: bb8::PooledConnection<'static, PgConnectionManager>,
    statements: Arc<Statements>,
    in_transaction: bool,
}

impl std::fmt::Debug for PgSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSession")
            .field("namespace", &self.statements.namespace)
            .field("in_transaction", &self.in_transaction)
            .finish_non_exhaustive()
    }
}

impl PgSession {
    /// The pooled connection, for statements of relayer-postgres that no capability covers
    /// (within this session's transaction when one is open).
    pub fn connection(&self) -> &crate::PgClient {
        &self.connection
    }

    fn on<'a, S>(&'a self, statements: &'a S) -> PgStore<'a, crate::PgClient, S> {
        PgStore::new(&self.connection, statements)
    }

    async fn run(&mut self, sql: &str, what: &str) -> Result<(), StorageError> {
        let connection = &*self.connection;
        connection
            .bounded(connection.batch_execute(sql), crate::error::timed_out)
            .await
            .map_err(|e| StorageError::database(what, e))
    }
}

impl Drop for PgSession {
    fn drop(&mut self) {
        if self.in_transaction {
            // Never lend a connection mid-transaction: the pool closes it instead.
            self.connection.discard();
        }
    }
}

impl Store for PgSession {
    type Error = StorageError;
}

#[async_trait]
impl Session for PgSession {
    async fn begin(&mut self) -> Result<(), StorageError> {
        // Marked first: a BEGIN whose answer was lost may still have started one.
        self.in_transaction = true;
        // RES-5: a transaction whose client went silent (a black-holed connection the
        // client already gave up) must not keep its locks — a lease row, claimed rows, an
        // inbox key — until the server's TCP gives up: the server ends it once idle past
        // the pool's bound, and probes the connection while it lasts. One round trip.
        let mut sql = String::from("BEGIN");
        if let Some(idle) = self.connection.transaction_idle_timeout() {
            sql.push_str(&format!("; SET LOCAL idle_in_transaction_session_timeout = {}", idle.as_millis()));
        }
        sql.push_str(self.connection.server_probe());
        self.run(&sql, "beginning a transaction").await
    }

    async fn commit(&mut self) -> Result<(), StorageError> {
        self.run("COMMIT", "committing a transaction").await?;
        self.in_transaction = false;
        Ok(())
    }

    async fn rollback(&mut self) -> Result<(), StorageError> {
        self.run("ROLLBACK", "rolling back a transaction").await?;
        self.in_transaction = false;
        Ok(())
    }
}

#[async_trait]
impl VerifySchema for PgSession {
    async fn verify_schema(&self) -> Result<i32, StorageError> {
        let connection = &*self.connection;
        let namespace = &self.statements.namespace;
        connection
            .bounded(crate::migrate::verify_schema(&**connection, namespace), || {
                StorageError::database(
                    format!("checking the schema of {namespace}"),
                    crate::error::timed_out(),
                )
            })
            .await
    }
}

#[async_trait]
impl ClaimOutbox for PgSession {
    async fn claim_due(
        &self,
        token: Uuid,
        claim: Duration,
        limit: u32,
        tripped: &[(String, String)],
    ) -> Result<Claimed, StorageError> {
        self.on(&self.statements.outbox).claim_due(token, claim, limit, tripped).await
    }

    async fn claim_seqs(&self, token: Uuid, claim: Duration, seqs: &[i64]) -> Result<Claimed, StorageError> {
        self.on(&self.statements.outbox).claim_seqs(token, claim, seqs).await
    }
}

#[async_trait]
impl CompleteOutbox for PgSession {
    async fn complete(&self, token: Uuid, completion: &Completion) -> Result<CompletionReport, StorageError> {
        self.on(&self.statements.outbox).complete(token, completion).await
    }
}

#[async_trait]
impl LockOutbox for PgSession {
    async fn complete_locked(&self, completion: &Completion) -> Result<CompletionReport, StorageError> {
        self.on(&self.statements.outbox).complete_locked(completion).await
    }
}

#[async_trait]
impl ScanRecovery for PgSession {
    async fn lock_recovery_page(
        &self,
        request: &PageRequest<'_>,
    ) -> Result<Option<LockedPage>, StorageError> {
        self.on(&self.statements.recovery).lock_recovery_page(request).await
    }
}

#[async_trait]
impl DeleteExpired for PgSession {
    async fn delete_expired(
        &self,
        table: RetentionTable,
        retention: Duration,
        limit: u32,
        lease: Option<UnderLease<'_>>,
    ) -> Result<Option<u64>, StorageError> {
        self.on(&self.statements.retention).delete_expired(table, retention, limit, lease).await
    }
}

#[async_trait]
impl HoldLease for PgSession {
    async fn acquire(
        &self,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, StorageError> {
        self.on(&self.statements.leases).acquire(job, owner, lease_duration).await
    }

    async fn renew(&self, lease: &Lease, lease_duration: Duration) -> Result<Option<Lease>, StorageError> {
        self.on(&self.statements.leases).renew(lease, lease_duration).await
    }

    async fn release(&self, job: &str, owner: &str) -> Result<bool, StorageError> {
        self.on(&self.statements.leases).release(job, owner).await
    }
}

#[async_trait]
impl HoldBackDestination for PgSession {
    async fn hold_back(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, StorageError> {
        self.statements.outbox.hold_back(&*self.connection, transport, destination, cool_down).await
    }

    async fn release_held(
        &self,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, StorageError> {
        let horizon = cool_down.saturating_mul(crate::outbox::PARKED_COOL_DOWNS);
        self.statements.outbox.release_held(&*self.connection, transport, destination, horizon).await
    }
}

#[async_trait]
impl WorkLanes for PgSession {
    async fn any_lane_row(&self) -> Result<bool, StorageError> {
        self.statements.lanes.any_lane_row(&*self.connection).await
    }

    async fn claim_lanes(
        &self,
        token: Uuid,
        request: &LaneClaimRequest<'_>,
    ) -> Result<LaneClaim, StorageError> {
        let LaneClaimRequest { claim, limit, after, visit_cap, tripped } = *request;
        self.statements.lanes.claim(&*self.connection, token, claim, limit, after, visit_cap, tripped).await
    }

    async fn lane_head(&self, lane: &str, token: Uuid, claim: Duration) -> Result<LaneHead, StorageError> {
        self.statements.lanes.head(&*self.connection, lane, token, claim).await
    }

    async fn accept_head(&self, lane: &str, token: Uuid, seq: i64) -> Result<bool, StorageError> {
        self.statements.lanes.accept_head(&*self.connection, lane, token, seq).await
    }

    async fn fail_head(
        &self,
        lane: &str,
        token: Uuid,
        seq: i64,
        failure: HeadFailure<'_>,
    ) -> Result<bool, StorageError> {
        self.statements.lanes.fail_head(&*self.connection, lane, token, seq, failure).await
    }

    async fn release_lane_claim(&self, lane: &str, token: Uuid) -> Result<(), StorageError> {
        self.statements.lanes.release_claim(&*self.connection, lane, token).await
    }
}

#[async_trait]
impl AdministerLanes for PgSession {
    async fn release_lane(&self, lane: &str, actor: &str) -> Result<bool, StorageError> {
        Ok(self.statements.lanes.release_lane(&*self.connection, lane, actor).await?.is_some())
    }

    async fn skip_lane_head(&self, lane: &str, actor: &str) -> Result<Option<i64>, StorageError> {
        self.statements.lanes.skip_lane_head(&*self.connection, lane, actor).await
    }
}

#[async_trait]
impl CheckLease for PgSession {
    async fn holds(&self, lease: &Lease) -> Result<bool, StorageError> {
        self.statements.leases.holds(&*self.connection, lease).await
    }
}

#[async_trait]
impl MoveDeadLetters for PgSession {
    async fn redrive_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        self.statements
            .dead_letters
            .redrive(&*self.connection, message_type, after, give_up_after, limit)
            .await
    }

    async fn expire_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        limit: u32,
    ) -> Result<u64, StorageError> {
        self.statements.dead_letters.expire(&*self.connection, message_type, after, limit).await
    }

    async fn count_stuck_dead_letters(
        &self,
        message_type: &DeadLetterType,
        after: Duration,
        give_up_after: Duration,
    ) -> Result<u64, StorageError> {
        self.statements.dead_letters.stuck(&*self.connection, message_type, after, give_up_after).await
    }
}

#[async_trait]
impl ReceiveQueue for PgSession {
    async fn receive(
        &self,
        queue: &str,
        limit: u32,
        visibility: Duration,
    ) -> Result<Vec<Received>, StorageError> {
        self.statements.consume.receive(&*self.connection, queue, limit, visibility).await
    }

    async fn receive_from(
        &self,
        queue: &str,
        limit: u32,
        visibility: Duration,
        from: Option<i64>,
    ) -> Result<ReceivedPage, StorageError> {
        self.statements.consume.receive_from(&*self.connection, queue, limit, visibility, from).await
    }
}

#[async_trait]
impl SettleQueue for PgSession {
    async fn ack(&self, receipts: &[Receipt]) -> Result<Vec<i64>, StorageError> {
        self.statements.consume.ack(&*self.connection, receipts).await
    }

    async fn requeue(&self, requeues: &[Requeue]) -> Result<Vec<i64>, StorageError> {
        self.statements.consume.requeue(&*self.connection, requeues).await
    }

    async fn dead_letter(&self, dead_letters: &[DeadLetter]) -> Result<Vec<i64>, StorageError> {
        self.statements.consume.dead_letter(&*self.connection, dead_letters).await
    }
}

#[async_trait]
impl ExtendVisibility for PgSession {
    async fn extend(&self, receipts: &[Receipt], visibility: Duration) -> Result<u64, StorageError> {
        self.statements.consume.extend(&*self.connection, receipts, visibility).await
    }

    async fn release_received(&self, receipts: &[Receipt]) -> Result<u64, StorageError> {
        self.statements.consume.release(&*self.connection, receipts).await
    }
}

#[async_trait]
impl RecordInbox for PgSession {
    async fn record(&self, consumer: &str, message_id: MessageId) -> Result<InboxEntry, StorageError> {
        self.statements.inbox.record(&*self.connection, consumer, message_id).await
    }
}
