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
//! Every hot statement runs through `query_typed`: one round trip, an unnamed statement
//! with explicit parameter types, planned for the values at hand (no generic plan cached
//! while the table was empty, see docs/performance.md, "Raw limits"). Every "take a batch of n" statement has
//! the `seq = ANY(ARRAY(SELECT … LIMIT n FOR UPDATE SKIP LOCKED))` shape, which stays
//! correct even under a stale generic plan. Ordered (lane) rows are never claimed here:
//! see [`crate::lanes`].

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use relayer_core::{
    Delivery, MessageError, MessageId, Namespace, NewMessage, TransportRegistry, advisory_lock_key,
};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use crate::error::StorageError;
use crate::exec::{Executor, one_row};
use crate::recovery::micros;
use crate::row_codec::{CLAIMED_COLUMNS, RowCodec, headers_to_json};

// Pure data, defined in the core crate next to the store traits; re-exported so
// `relayer_postgres::outbox::ClaimedMessage` and friends keep working.
pub use relayer_core::store::{Claimed, ClaimedMessage, Completion, CompletionReport, UndecodableRow};

/// The default largest body [`OutboxWriter`] accepts: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// The LISTEN/NOTIFY channel of a namespace's outbox (OUT-4).
///
/// `relayer_` followed by 16 hex digits of SHA-1 over the schema and prefix: short,
/// deterministic, the same in every process and well within PostgreSQL's 63-byte limit
/// whatever the namespace.
pub fn notify_channel(namespace: &Namespace) -> String {
    channel("outbox-channel", namespace)
}

/// `relayer_` + 16 hex digits of SHA-1(`relayer:` + `kind:{schema}.{prefix}`).
pub(crate) fn channel(kind: &str, namespace: &Namespace) -> String {
    // advisory_lock_key is the first 8 bytes of SHA-1("relayer:" + resource).
    let key =
        relayer_core::advisory_lock_key(&format!("{kind}:{}.{}", namespace.schema(), namespace.prefix()));
    format!("relayer_{:016x}", u64::from_be_bytes(key.to_be_bytes()))
}

/// `lane:{schema}.{prefix}:`: a lane's writer-lock resource is this plus its key (LAN-1c).
/// Everything that inserts lane rows takes the same lock.
pub(crate) fn lane_lock_prefix(namespace: &Namespace) -> String {
    format!("lane:{}.{}:", namespace.schema(), namespace.prefix())
}

/// One message written by [`OutboxWriter::enqueue`]: its outbox row and its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Enqueued {
    /// The outbox row's sequence number (the `seq` column), growing in enqueue order.
    pub seq: i64,
    /// The message id.
    pub id: MessageId,
}

/// Why [`OutboxWriter::enqueue`] wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// A message of the batch was refused (OUT-3); nothing was written.
    #[error(transparent)]
    Invalid(#[from] MessageError),
    /// The insert failed; the caller's transaction is likely aborted.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Writes messages into the outbox inside the caller's transaction (OUT-1..4).
///
/// ```no_run
/// # async fn example(client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use relayer_core::{Namespace, NewMessage};
/// use relayer_postgres::OutboxWriter;
///
/// let writer = OutboxWriter::new(&Namespace::default(), ["queue"]);
/// let tx = client.transaction().await?;
/// // … the service's own writes on `tx` …
/// let written = writer.enqueue(&tx, &[NewMessage::new("queue", "orders.created", b"{}".to_vec())]).await?;
/// tx.commit().await?; // the messages exist (and dispatchers wake) iff this commits
/// # let _ = written; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct OutboxWriter {
    /// `lane:{schema}.{prefix}:`: a lane's advisory-lock resource is this plus its key.
    lane_lock_prefix: String,
    /// The insert for batches without lane rows.
    unordered: InsertStatements,
    /// The insert for batches with lane rows: it takes the lanes' locks first.
    ordered: InsertStatements,
    notify: bool,
    channel: String,
    transports: BTreeSet<String>,
    max_body_bytes: usize,
}

/// One rendering of the enqueue statement, with and without the NOTIFY.
#[derive(Clone, Debug)]
struct InsertStatements {
    notifying: String,
    silent: String,
}

impl OutboxWriter {
    /// A writer for `namespace` accepting messages for the named transports, with bodies up
    /// to [`DEFAULT_MAX_BODY_BYTES`].
    pub fn new<I>(namespace: &Namespace, transports: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let outbox = namespace.table("outbox");
        // One multi-row insert (raw limits in docs/performance.md: 3-5x single inserts) plus, unless silenced, the
        // wake-up of other processes, delivered by PostgreSQL only when the caller's
        // transaction commits. The `notified` CTE is referenced so it runs, once.
        // Indexes: pkey, outbox_due_idx / outbox_lane_idx / outbox_recovery_idx maintenance only.
        // Writers of one lane serialize (LAN-1): before any seq is drawn, the statement takes
        // a transaction-scoped advisory lock per distinct lane key ($10, sorted so two writers
        // of several lanes cannot deadlock), held until the caller commits. A lane's seq order
        // is then its commit order: an earlier seq never commits after a later one was sent.
        // The scalar sub-select is an InitPlan, evaluated once before the insert draws a seq.
        // Only a batch with lane rows pays for the lock (`locked`), and only a notifying
        // writer for the NOTIFY: four renderings of one statement, chosen per call.
        let insert = |lanes: bool| {
            let (locked, gate) = if lanes {
                (
                    "WITH locked AS ( \
                       SELECT count(*) AS lanes FROM ( \
                         SELECT key, pg_advisory_xact_lock(key) FROM ( \
                           SELECT DISTINCT key FROM unnest($10::int8[]) AS k(key) ORDER BY key) AS keys) AS taken), ",
                    "WHERE (SELECT lanes FROM locked) >= 0",
                )
            } else {
                ("WITH ", "")
            };
            let inserted = format!(
                "{locked}inserted AS ( \
                   INSERT INTO {outbox} (message_id, transport, destination, body, headers, trace_context, \
                                         lane, deliver_at, visible_at) \
                   SELECT m.id, m.transport, m.destination, m.body, m.headers, m.trace_context, m.lane, \
                          coalesce(m.deliver_at, now() + m.delay_us * interval '1 microsecond'), \
                          coalesce(m.deliver_at, now() + m.delay_us * interval '1 microsecond', now()) \
                   FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::text[], \
                               $7::text[], $8::timestamptz[], $9::int8[]) WITH ORDINALITY \
                        AS m(id, transport, destination, body, headers, trace_context, lane, deliver_at, \
                             delay_us, ord) \
                   {gate} \
                   ORDER BY m.ord \
                   RETURNING seq, message_id)"
            );
            InsertStatements {
                notifying: format!(
                    "{inserted}, notified AS (SELECT pg_notify($11::text, '') AS done) \
                     SELECT inserted.seq, inserted.message_id FROM inserted, notified ORDER BY inserted.seq"
                ),
                silent: format!("{inserted} SELECT seq, message_id FROM inserted ORDER BY seq"),
            }
        };
        OutboxWriter {
            unordered: insert(false),
            ordered: insert(true),
            channel: notify_channel(namespace),
            lane_lock_prefix: lane_lock_prefix(namespace),
            transports: transports.into_iter().map(Into::into).collect(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            notify: true,
        }
    }

    /// A writer accepting exactly the transports of `registry`.
    pub fn for_registry(namespace: &Namespace, registry: &TransportRegistry) -> Self {
        OutboxWriter::new(namespace, registry.names())
    }

    /// Sets the largest body accepted, in bytes, at most
    /// [`MAX_BODY_BYTES_LIMIT`](relayer_core::options::MAX_BODY_BYTES_LIMIT) (1 GiB,
    /// PostgreSQL's largest `bytea`): a larger value means that limit, so a body PostgreSQL
    /// would refuse inside the caller's transaction is refused before it (OUT-3).
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes.min(relayer_core::options::MAX_BODY_BYTES_LIMIT);
        self
    }

    /// Leaves out the `pg_notify` (OUT-4) from every enqueue.
    ///
    /// Why you might: PostgreSQL (through version 17 at least) serializes the commits of all
    /// transactions that issued NOTIFY, flush included, under one database-wide lock, so
    /// concurrent one-message transactions lose group commit (docs/performance.md measures
    /// it). A process whose rows are dispatched by its own dispatcher can wake it without
    /// the database — `Dispatcher::committed()` after each commit — and dispatchers in
    /// other processes then find the rows on their next poll instead of at once.
    pub fn without_notify(mut self) -> Self {
        self.notify = false;
        self
    }

    /// The channel this writer notifies on commit.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Writes `messages` on `client` (a client, a transaction or a pooled connection) in
    /// one round trip, and returns their rows in order.
    ///
    /// Every message is validated first; on any refusal nothing is written. The rows become
    /// visible, and dispatchers listening on the namespace's channel wake, iff the caller's
    /// transaction commits.
    pub async fn enqueue(
        &self,
        client: &impl Executor,
        messages: &[NewMessage],
    ) -> Result<Vec<Enqueued>, EnqueueError> {
        let batch = self.batch(messages)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let encoded = batch.params();
        let params: Vec<(&(dyn ToSql + Sync), Type)> = encoded.iter().map(EnqueueParam::typed).collect();
        let count = messages.len();
        let rows = client.rows(batch.statement(), &params).await.map_err(|e| {
            StorageError::database(format!("enqueueing {}", crate::error::messages(count)), e)
        })?;
        Ok(rows
            .iter()
            .map(|row| Enqueued { seq: row.get(0), id: MessageId::from_uuid(row.get(1)) })
            .collect())
    }

    /// Validates `messages` and encodes them as the parameters of the one enqueue statement
    /// this writer would run for them: the single source of the statement text and its
    /// parameters for every driver (the tokio-postgres [`enqueue`](Self::enqueue) and the
    /// sqlx adapter run exactly this).
    ///
    /// Every message is validated first (OUT-3); on any refusal there is no batch.
    pub fn batch<'a>(&'a self, messages: &'a [NewMessage]) -> Result<EnqueueBatch<'a>, MessageError> {
        for (index, message) in messages.iter().enumerate() {
            message.validate(index, self.max_body_bytes, |name| self.transports.contains(name))?;
        }
        // The columns every writer binds come from one place (the direct queue writer too).
        let WrittenColumns { ids, destinations, bodies, headers, trace_contexts, deliver_at, delays } =
            WrittenColumns::of(messages);
        let mut batch = EnqueueBatch {
            statement: "",
            ids,
            transports: messages.iter().map(NewMessage::transport).collect(),
            destinations,
            bodies,
            headers,
            trace_contexts,
            lanes: messages.iter().map(NewMessage::lane_key).collect(),
            deliver_at,
            delays,
            lane_keys: Vec::new(),
            channel: self.notify.then_some(self.channel.as_str()),
        };
        batch.lane_keys = batch
            .lanes
            .iter()
            .flatten()
            .map(|lane| advisory_lock_key(&format!("{}{lane}", self.lane_lock_prefix)))
            .collect();
        let statements = if batch.lane_keys.is_empty() { &self.unordered } else { &self.ordered };
        batch.statement = if self.notify { &statements.notifying } else { &statements.silent };
        Ok(batch)
    }
}

/// One validated batch of messages encoded for the enqueue statement (see
/// [`OutboxWriter::batch`]): the statement text and its parameters in order.
///
/// A driver runs [`statement`](Self::statement) with [`params`](Self::params) bound as
/// `$1, $2, …` in the order given, each with the PostgreSQL type its [`EnqueueParam`]
/// variant names, and reads back `(seq int8, message_id uuid)` per message, in enqueue
/// order.
#[derive(Debug)]
pub struct EnqueueBatch<'a> {
    statement: &'a str,
    ids: Vec<Uuid>,
    transports: Vec<&'a str>,
    destinations: Vec<&'a str>,
    bodies: Vec<&'a [u8]>,
    headers: Vec<serde_json::Value>,
    trace_contexts: Vec<Option<&'a str>>,
    lanes: Vec<Option<&'a str>>,
    deliver_at: Vec<Option<SystemTime>>,
    delays: Vec<Option<i64>>,
    lane_keys: Vec<i64>,
    /// The channel to notify on commit, unless the writer is silent.
    channel: Option<&'a str>,
}

/// One parameter of the enqueue statement, by its PostgreSQL type.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum EnqueueParam<'b> {
    /// `uuid[]`.
    Uuids(&'b [Uuid]),
    /// `text[]` without NULLs.
    Texts(&'b [&'b str]),
    /// `text[]` with NULLs.
    OptionalTexts(&'b [Option<&'b str>]),
    /// `bytea[]`.
    Bytes(&'b [&'b [u8]]),
    /// `jsonb[]`.
    Jsons(&'b [serde_json::Value]),
    /// `timestamptz[]` with NULLs.
    OptionalTimestamps(&'b [Option<SystemTime>]),
    /// `int8[]` with NULLs.
    OptionalInt8s(&'b [Option<i64>]),
    /// `int8[]` without NULLs.
    Int8s(&'b [i64]),
    /// `text`.
    Text(&'b str),
}

impl EnqueueParam<'_> {
    /// The value for tokio-postgres, with the PostgreSQL type it is bound as.
    pub fn typed(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            EnqueueParam::Uuids(values) => (values, Type::UUID_ARRAY),
            EnqueueParam::Texts(values) => (values, Type::TEXT_ARRAY),
            EnqueueParam::OptionalTexts(values) => (values, Type::TEXT_ARRAY),
            EnqueueParam::Bytes(values) => (values, Type::BYTEA_ARRAY),
            EnqueueParam::Jsons(values) => (values, Type::JSONB_ARRAY),
            EnqueueParam::OptionalTimestamps(values) => (values, Type::TIMESTAMPTZ_ARRAY),
            EnqueueParam::OptionalInt8s(values) => (values, Type::INT8_ARRAY),
            EnqueueParam::Int8s(values) => (values, Type::INT8_ARRAY),
            EnqueueParam::Text(value) => (value, Type::TEXT),
        }
    }
}

impl<'a> EnqueueBatch<'a> {
    /// Whether the batch has no message (then nothing needs to run).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The statement to run: one of four renderings, chosen by whether the batch has lane
    /// rows and whether the writer notifies.
    pub fn statement(&self) -> &'a str {
        self.statement
    }

    /// The statement's parameters, `$1` first.
    pub fn params(&self) -> Vec<EnqueueParam<'_>> {
        let mut params = vec![
            EnqueueParam::Uuids(&self.ids),
            EnqueueParam::Texts(&self.transports),
            EnqueueParam::Texts(&self.destinations),
            EnqueueParam::Bytes(&self.bodies),
            EnqueueParam::Jsons(&self.headers),
            EnqueueParam::OptionalTexts(&self.trace_contexts),
            EnqueueParam::OptionalTexts(&self.lanes),
            EnqueueParam::OptionalTimestamps(&self.deliver_at),
            EnqueueParam::OptionalInt8s(&self.delays),
            EnqueueParam::Int8s(&self.lane_keys),
        ];
        if let Some(channel) = self.channel {
            params.push(EnqueueParam::Text(channel));
        }
        params
    }
}

/// The columns every writer binds (outbox and direct queue), one array per column, in the
/// messages' order.
pub(crate) struct WrittenColumns<'a> {
    pub(crate) ids: Vec<uuid::Uuid>,
    pub(crate) destinations: Vec<&'a str>,
    pub(crate) bodies: Vec<&'a [u8]>,
    pub(crate) headers: Vec<serde_json::Value>,
    pub(crate) trace_contexts: Vec<Option<&'a str>>,
    /// A delivery instant, or `None`.
    pub(crate) deliver_at: Vec<Option<SystemTime>>,
    /// A delay in microseconds, computed on the database clock (NS-4): `now() + delay`.
    pub(crate) delays: Vec<Option<i64>>,
}

impl<'a> WrittenColumns<'a> {
    pub(crate) fn of(messages: &'a [NewMessage]) -> Self {
        let (deliver_at, delays) = messages
            .iter()
            .map(|message| match message.delivery_time() {
                Delivery::Immediate => (None, None),
                Delivery::At(at) => (Some(at.to_system_time()), None),
                Delivery::After(delay) => (None, Some(micros(delay))),
            })
            .unzip();
        WrittenColumns {
            ids: messages.iter().map(|m| *m.message_id().as_uuid()).collect(),
            destinations: messages.iter().map(NewMessage::destination).collect(),
            bodies: messages.iter().map(NewMessage::body).collect(),
            headers: messages.iter().map(|m| headers_to_json(m.header_map())).collect(),
            trace_contexts: messages.iter().map(NewMessage::creation_context).collect(),
            deliver_at,
            delays,
        }
    }
}

/// The outbox dispatch statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct OutboxStatements {
    claim_due: String,
    claim_seqs: String,
    hold_back: String,
    complete: String,
    delete_accepted: String,
    complete_locked: String,
    delete_locked: String,
    codec: RowCodec,
}

impl OutboxStatements {
    /// Renders the statements for `namespace`. Claimed rows may name any transport; see
    /// [`with_transports`](Self::with_transports).
    pub fn new(namespace: &Namespace) -> Self {
        let (outbox, dead) = (namespace.table("outbox"), namespace.table("dead"));
        OutboxStatements {
            // Index: outbox_due_idx ((visible_at) WHERE lane IS NULL), oldest due first.
            // Tripped destinations ($4, $5) are filtered out (DSP-6); they are few.
            claim_due: format!(
                "UPDATE {outbox} SET claim_token = $1, \
                        visible_at = now() + $2::int8 * interval '1 microsecond' \
                 WHERE seq = ANY(ARRAY( \
                   SELECT seq FROM {outbox} \
                   WHERE lane IS NULL AND visible_at <= now() \
                     AND (transport, destination) NOT IN \
                         (SELECT t, d FROM unnest($4::text[], $5::text[]) AS tripped(t, d)) \
                   ORDER BY visible_at LIMIT $3 FOR UPDATE SKIP LOCKED)) \
                 RETURNING {CLAIMED_COLUMNS}"
            ),
            // Index: outbox_due_idx, once per breaker trip (DSP-6): the tripped destination's
            // rows due before its cool-down ends (retries just released included) move to its
            // end, past every row other destinations have due, so later
            // claims never step over them (a filter in the claim would heap-fetch every one
            // of them in every claim). Rows another claim holds are skipped, not waited for.
            hold_back: format!(
                "WITH held AS ( \
                   UPDATE {outbox} SET visible_at = now() + $3::int8 * interval '1 microsecond' \
                   WHERE seq = ANY(ARRAY( \
                     SELECT seq FROM {outbox} \
                     WHERE lane IS NULL AND transport = $1 AND destination = $2 \
                       AND visible_at < now() + $3::int8 * interval '1 microsecond' \
                     FOR UPDATE SKIP LOCKED)) \
                   RETURNING 1) \
                 SELECT count(*) FROM held"
            ),
            // Index: outbox_pkey (seq = ANY($3)). Commit-triggered dispatch of known rows.
            claim_seqs: format!(
                "UPDATE {outbox} SET claim_token = $1, \
                        visible_at = now() + $2::int8 * interval '1 microsecond' \
                 WHERE seq = ANY(ARRAY( \
                   SELECT seq FROM {outbox} \
                   WHERE seq = ANY($3::int8[]) AND lane IS NULL AND visible_at <= now() \
                   ORDER BY seq FOR UPDATE SKIP LOCKED)) \
                 RETURNING {CLAIMED_COLUMNS}"
            ),
            // Index: outbox_pkey for every part. One statement, fenced by claim_token ($1):
            // accepted rows deleted, failed rows released or moved to dead, unsent rows
            // released. The parts touch disjoint rows.
            complete: completion_statement(&outbox, &dead, "o.claim_token = $1"),
            // The usual completion — every row accepted — as the plain fenced delete it is:
            // the five-part statement costs more to plan than this one costs to run.
            delete_accepted: accepted_statement(&outbox, "o.claim_token = $1"),
            // The same completion for rows this transaction holds locked: the row locks are
            // the claim, so no token is matched ($1 is bound as NULL). The fence is what a
            // locked page's rows are by construction — unordered, no live claim — so the
            // statement can never touch a lane row or a row a dispatcher holds, even when
            // run outside the transaction that locked its rows.
            complete_locked: completion_statement(&outbox, &dead, LOCKED_FENCE),
            delete_locked: accepted_statement(&outbox, LOCKED_FENCE),
            codec: RowCodec::new(namespace),
        }
    }

    /// Claimed rows naming a transport outside `names` (the worker's registry) come back
    /// [`undecodable`](Claimed::undecodable) instead of as messages: no send could ever
    /// succeed, so the worker buries them at once rather than failing them pass after pass.
    pub fn with_transports<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.codec = self.codec.with_transports(names);
        self
    }

    /// Claims up to `limit` due, unordered rows no one holds, oldest due first, for
    /// `claim` (DSP-1). Rows of the `tripped` (transport, destination) pairs are left
    /// alone (DSP-6). The claim commits on its own when `client` is not in a transaction.
    pub async fn claim_due(
        &self,
        client: &impl Executor,
        token: Uuid,
        claim: Duration,
        limit: u32,
        tripped: &[(String, String)],
    ) -> Result<Claimed, StorageError> {
        let claim_us = micros(claim);
        let limit = i64::from(limit);
        let tripped_transports: Vec<&str> = tripped.iter().map(|(t, _)| t.as_str()).collect();
        let tripped_destinations: Vec<&str> = tripped.iter().map(|(_, d)| d.as_str()).collect();
        let rows = client
            .rows(
                &self.claim_due,
                &[
                    (&token, Type::UUID),
                    (&claim_us, Type::INT8),
                    (&limit, Type::INT8),
                    (&tripped_transports, Type::TEXT_ARRAY),
                    (&tripped_destinations, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(|e| StorageError::database("claiming due outbox rows", e))?;
        self.codec.decode_all(&rows, 0)
    }

    /// Holds back the unordered rows of a destination whose circuit breaker just tripped
    /// that would be due within `cool_down` (DSP-6): none is due again before its breaker
    /// lets a probe through, so claims in the meantime never read them. Attempts are not
    /// counted.
    /// Returns how many rows were held back.
    pub async fn hold_back(
        &self,
        client: &impl Executor,
        transport: &str,
        destination: &str,
        cool_down: Duration,
    ) -> Result<u64, StorageError> {
        let cool_down_us = micros(cool_down);
        let rows = client
            .rows(
                &self.hold_back,
                &[(&transport, Type::TEXT), (&destination, Type::TEXT), (&cool_down_us, Type::INT8)],
            )
            .await
            .map_err(|e| StorageError::database("holding back a tripped destination's rows", e))?;
        let held: i64 = rows.first().map_or(0, |row| row.get(0));
        Ok(u64::try_from(held).unwrap_or(0))
    }

    /// Claims those of `seqs` that are unordered, due and free, for `claim`: the
    /// commit-triggered fast path for rows this process just wrote (OUT-4).
    pub async fn claim_seqs(
        &self,
        client: &impl Executor,
        token: Uuid,
        claim: Duration,
        seqs: &[i64],
    ) -> Result<Claimed, StorageError> {
        if seqs.is_empty() {
            return Ok(Claimed::default());
        }
        let claim_us = micros(claim);
        let rows = client
            .rows(
                &self.claim_seqs,
                &[(&token, Type::UUID), (&claim_us, Type::INT8), (&seqs, Type::INT8_ARRAY)],
            )
            .await
            .map_err(|e| StorageError::database("claiming outbox rows by seq", e))?;
        self.codec.decode_all(&rows, 0)
    }

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
        let row = one_row(
            client,
            statement,
            &[
                (&token, Type::UUID),
                (&c.accepted, Type::INT8_ARRAY),
                (&c.failed_seq, Type::INT8_ARRAY),
                (&c.failed_error, Type::TEXT_ARRAY),
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

/// The one-statement completion (DSP-3, DSP-5), fenced by `fence` (a predicate over `o`).
fn completion_statement(outbox: &str, dead: &str, fence: &str) -> String {
    format!(
        "WITH accepted AS ( \
           DELETE FROM {outbox} o WHERE o.seq = ANY($2::int8[]) AND {fence} RETURNING o.seq), \
         failed AS ( \
           SELECT * FROM unnest($3::int8[], $4::text[], $5::int8[], $6::bool[]) \
             AS f(seq, error, delay_us, dead)), \
         buried AS ( \
           DELETE FROM {outbox} o USING failed f \
           WHERE o.seq = f.seq AND f.dead AND {fence} \
           RETURNING o.seq, o.message_id, o.transport, o.destination, o.body, o.headers, \
                     o.trace_context, o.lane, o.created_at, o.deliver_at, o.attempts + 1, f.error), \
         moved AS ( \
           INSERT INTO {dead} (seq, message_id, transport, destination, body, headers, \
                               trace_context, lane, created_at, deliver_at, attempts, last_error) \
           SELECT * FROM buried RETURNING seq), \
         released AS ( \
           UPDATE {outbox} o SET attempts = o.attempts + 1, last_error = f.error, \
                  claim_token = NULL, visible_at = now() + f.delay_us * interval '1 microsecond' \
           FROM failed f WHERE o.seq = f.seq AND NOT f.dead AND {fence} \
           RETURNING o.seq), \
         deferred AS ( \
           UPDATE {outbox} o SET claim_token = NULL, \
                  visible_at = now() + d.delay_us * interval '1 microsecond' \
           FROM unnest($7::int8[], $8::int8[]) AS d(seq, delay_us) \
           WHERE o.seq = d.seq AND {fence} RETURNING o.seq) \
         SELECT (SELECT count(*) FROM accepted), (SELECT count(*) FROM released), \
                (SELECT count(*) FROM moved), (SELECT count(*) FROM deferred)"
    )
}

/// The fence of completions of rows the caller's transaction locked: unordered rows with no
/// live claim. Inside that transaction the locked rows always qualify (`now()` is the
/// transaction's start, and no one else can change a locked row).
const LOCKED_FENCE: &str = "$1::uuid IS NULL AND o.lane IS NULL AND o.visible_at <= now()";

/// The accepted part of [`completion_statement`] alone: a fenced delete, counted.
fn accepted_statement(outbox: &str, fence: &str) -> String {
    format!(
        "WITH accepted AS ( \
           DELETE FROM {outbox} o WHERE o.seq = ANY($2::int8[]) AND {fence} RETURNING 1) \
         SELECT count(*) FROM accepted"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use super::*;

    #[test]
    fn channel_is_short_deterministic_and_per_namespace() {
        let a = Namespace::new("a", "relayer_").unwrap();
        let b = Namespace::new("b", "relayer_").unwrap();
        let long = Namespace::new("s".repeat(63), "p".repeat(39)).unwrap();
        assert_eq!(notify_channel(&a), notify_channel(&a.clone()));
        assert_ne!(notify_channel(&a), notify_channel(&b));
        for ns in [&a, &b, &long] {
            let channel = notify_channel(ns);
            assert_eq!(channel.len(), 24, "{channel}");
            assert!(channel.starts_with("relayer_"));
            assert!(channel[8..].chars().all(|c| c.is_ascii_hexdigit()));
        }
    }

    /// OUT-3: no body limit lets through a body PostgreSQL cannot store.
    #[test]
    fn the_body_limit_never_exceeds_what_postgresql_stores_out_3() {
        let writer = OutboxWriter::new(&Namespace::default(), ["queue"]).with_max_body_bytes(usize::MAX);
        assert_eq!(writer.max_body_bytes, relayer_core::options::MAX_BODY_BYTES_LIMIT);
        assert_eq!(writer.with_max_body_bytes(64).max_body_bytes, 64);
    }

    /// The empty-table plan trap (docs/performance.md, "Raw limits"): a claim planned while the table was empty, kept as a generic plan,
    /// must still claim at most `limit` rows once the table fills.
    #[tokio::test]
    async fn a_claim_never_exceeds_its_limit_even_under_a_generic_plan_made_on_an_empty_table() {
        let db = relayer_test_support::TestDb::new().await;
        let mut client = db.connect().await;
        crate::migrate(&mut client, db.namespace()).await.unwrap();
        client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
        let statements = OutboxStatements::new(db.namespace());
        let types = [Type::UUID, Type::INT8, Type::INT8, Type::TEXT_ARRAY, Type::TEXT_ARRAY];
        let prepared = client.prepare_typed(&statements.claim_due, &types).await.unwrap();
        let empty: Vec<String> = Vec::new();
        let claim_us = micros(Duration::from_secs(30));
        for _ in 0..8 {
            let rows =
                client.query(&prepared, &[&Uuid::new_v4(), &claim_us, &5i64, &empty, &empty]).await.unwrap();
            assert!(rows.is_empty());
        }
        let writer = OutboxWriter::new(db.namespace(), ["queue"]);
        let batch: Vec<NewMessage> =
            (0..2000).map(|n| NewMessage::new("queue", "d", vec![u8::try_from(n % 250).unwrap()])).collect();
        writer.enqueue(&client, &batch).await.unwrap();
        let mut total = 0;
        loop {
            let rows =
                client.query(&prepared, &[&Uuid::new_v4(), &claim_us, &5i64, &empty, &empty]).await.unwrap();
            assert!(rows.len() <= 5, "claimed {} rows with limit 5", rows.len());
            if rows.is_empty() {
                break;
            }
            total += rows.len();
            if total >= 50 {
                break;
            }
        }
        assert_eq!(total, 50);
    }
}
