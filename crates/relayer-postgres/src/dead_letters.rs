//! The dead-letter API (DLP-7): list, show, redrive and purge dead letters — of the queue
//! table and of the outbox's dead table — one by message id or a filtered set, each action
//! recorded in the audit table.
//!
//! # The model
//!
//! A *queue dead letter* is a row of the `queue` table stamped by a consumer
//! (`dead_lettered_at IS NOT NULL`, QUE-2); an *outbox dead row* is a row of the `dead`
//! table (DSP-5). A [`QueueDeadLetterFilter`] or [`OutboxDeadFilter`] selects them: every
//! criterion is optional and they combine with AND; `after_seq` pages through a listing in
//! `seq` order (keyset paging: pass the last `seq` you saw), and `limit` bounds every call
//! (default 100, at most 10,000).
//!
//! An action — redrive or purge — is **one statement** that picks at most `limit` rows with
//! `FOR UPDATE SKIP LOCKED`, changes them and writes one audit row per message (actor,
//! time, action, message id, and a detail naming where it was and the filter used), so the
//! action and its record commit together, in the caller's transaction when there is one. A
//! row another session holds at that moment (a policy pass moving it) is skipped; act again
//! to catch it. [`DeadLetterApi::redrive_queue`] moves a dead letter back to its original
//! topic, visible now, with a fresh handled count and without its rejection stamps (as the
//! policy pass does, DLP-3), and notifies the queue's channel once per topic it moved
//! messages to, so listening consumers take them at once; one without an original topic
//! has nowhere to go and is never selected. [`DeadLetterApi::redrive_outbox`] moves a dead row back into the outbox with a
//! new `seq`, no attempts, visible now, keeping its id, body, headers, creation context,
//! `created_at` and lane, and wakes dispatchers. A lane row comes back at the tail of its
//! lane: the statement first takes the lane's writer lock (LAN-1c), so it is ordered with
//! concurrent writers of that lane like any new message. Every action has a dry run
//! ([`Mode::DryRun`]) that returns what it would touch and changes nothing.
//!
//! Listings are operator statements, not worker ones: by queue and topic they use
//! `queue_dead_letter_idx` / `queue_receive_idx`, by outbox message id `dead_message_id_idx`;
//! other filters scan the dead letters.
//!
//! ```no_run
//! # async fn example(client: &tokio_postgres::Client) -> Result<(), relayer_postgres::DeadLetterApiError> {
//! use std::time::Duration;
//! use relayer_core::Namespace;
//! use relayer_postgres::{DeadLetterApi, Mode, QueueDeadLetterFilter};
//!
//! let api = DeadLetterApi::new(&Namespace::default());
//! let filter = QueueDeadLetterFilter::new().queue("orders.dead").older_than(Duration::from_secs(3_600));
//! let page = api.list_queue(client, &filter).await?;
//! let would = api.redrive_queue(client, &filter, "ops:alice", Mode::DryRun).await?;
//! let done = api.redrive_queue(client, &filter, "ops:alice", Mode::Apply).await?;
//! # let _ = (page, would, done); Ok(()) }
//! ```

use std::time::SystemTime;

use relayer_core::options::MAX_BATCH_SIZE;
use relayer_core::postgres::JsonbHeaders;
use relayer_core::{BoundedText, Headers, MessageId, Namespace, Timestamp, advisory_lock_key};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::dead_letter_filter::Where;
pub use crate::dead_letter_filter::{DEFAULT_LIMIT, OutboxDeadFilter, QueueDeadLetterFilter};
use crate::error::{StorageError, StorageErrorKind};
use crate::exec::Executor;
use crate::outbox::{lane_lock_prefix, notify_channel};
use crate::row_codec::malformed;

/// Why a dead-letter call did nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterApiError {
    /// The request is invalid (an empty actor, a limit out of range, an action without any
    /// criterion); nothing was read or changed.
    #[error("dead letters: {0}")]
    Invalid(String),
    /// A statement failed; in a transaction, the caller's transaction is likely aborted.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Whether an action changes anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Do it, and audit it.
    Apply,
    /// Only return what it would touch; change and audit nothing.
    DryRun,
}

/// A message an action touched (or, in a dry run, would touch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Touched {
    /// The row's `seq` before the action.
    pub seq: i64,
    /// The message id.
    pub message_id: MessageId,
}

/// A dead letter of the queue table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDeadLetter {
    /// The row's `seq`: its identity in the table, and the keyset of listings.
    pub seq: i64,
    /// The message id.
    pub message_id: MessageId,
    /// The dead-letter queue holding it.
    pub queue: String,
    /// Where it came from; `None` for a dead letter relayer did not stamp.
    pub original_topic: Option<String>,
    /// Why it was dead-lettered (`unacceptable` for one that could not be decoded).
    pub rejection_reason: Option<String>,
    /// The rejection's message.
    pub rejection_message: Option<String>,
    /// How often a handler saw it.
    pub handled_count: i32,
    /// When it was created (database clock).
    pub created_at: Timestamp,
    /// When it was dead-lettered (database clock).
    pub dead_lettered_at: Timestamp,
    /// Its headers.
    pub headers: Headers,
    /// Its body, as read by [`DeadLetterApi::show_queue`]; empty in a listing
    /// ([`DeadLetterApi::list_queue`] leaves bodies in the table: see `body_bytes`).
    pub body: Vec<u8>,
    /// The body's size in bytes (in listings too).
    pub body_bytes: i64,
    /// Its creation context (trace context).
    pub trace_context: Option<String>,
}

/// A row of the outbox's dead table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxDeadRow {
    /// The row's `seq` (its outbox `seq` when it died): its identity, and the keyset of listings.
    pub seq: i64,
    /// The message id.
    pub message_id: MessageId,
    /// The transport name.
    pub transport: String,
    /// The destination.
    pub destination: String,
    /// The ordered-delivery lane, if any.
    pub lane: Option<String>,
    /// Failed attempts when it died.
    pub attempts: i32,
    /// The last send error.
    pub last_error: Option<String>,
    /// When it was written (database clock).
    pub created_at: Timestamp,
    /// When it died (database clock).
    pub failed_at: Timestamp,
    /// Its headers.
    pub headers: Headers,
    /// Its body, as read by [`DeadLetterApi::show_outbox`]; empty in a listing
    /// ([`DeadLetterApi::list_outbox`] leaves bodies in the table: see `body_bytes`).
    pub body: Vec<u8>,
    /// The body's size in bytes (in listings too).
    pub body_bytes: i64,
    /// Its creation context (trace context).
    pub trace_context: Option<String>,
}

/// The columns every queue dead-letter read returns, in [`decode_queue`]'s order; `{body}`
/// is [`BODY`] or [`NO_BODY`].
const QUEUE_COLUMNS: &str = "seq, message_id, queue, original_topic, rejection_reason, rejection_message, \
     handled_count, created_at, dead_lettered_at, headers, {body}, trace_context, octet_length(body)::int8";

/// The columns every outbox dead-row read returns, in [`decode_dead`]'s order.
const DEAD_COLUMNS: &str = "seq, message_id, transport, destination, lane, attempts, last_error, created_at, \
     failed_at, headers, {body}, trace_context, octet_length(body)::int8";

/// The body column of a `show`.
const BODY: &str = "body";

/// The body column of a listing: bodies stay in the table. A listing of up to 10 000
/// dead letters of up to 64 MiB each would otherwise read gigabytes it never shows.
const NO_BODY: &str = "''::bytea";

/// The dead-letter API of one namespace (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct DeadLetterApi {
    queue: String,
    dead: String,
    outbox: String,
    audit: String,
    channel: String,
    queue_channel: String,
    lane_lock_prefix: String,
}

impl DeadLetterApi {
    /// The API for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        DeadLetterApi {
            queue: namespace.table("queue"),
            dead: namespace.table("dead"),
            outbox: namespace.table("outbox"),
            audit: namespace.table("audit"),
            channel: notify_channel(namespace),
            queue_channel: crate::queue::queue_channel(namespace),
            // The outbox writer's lane lock resource (LAN-1c): the same lock, so a redriven
            // lane row is ordered with concurrent writers of its lane.
            lane_lock_prefix: lane_lock_prefix(namespace),
        }
    }

    /// Queue dead letters matching `filter`, in `seq` order, without their bodies (each
    /// row's `body` is empty, `body_bytes` its size): [`show_queue`](Self::show_queue)
    /// reads one body.
    pub async fn list_queue(
        &self,
        client: &impl Executor,
        filter: &QueueDeadLetterFilter,
    ) -> Result<Vec<QueueDeadLetter>, DeadLetterApiError> {
        self.read_queue(client, filter, NO_BODY).await
    }

    async fn read_queue(
        &self,
        client: &impl Executor,
        filter: &QueueDeadLetterFilter,
        body: &str,
    ) -> Result<Vec<QueueDeadLetter>, DeadLetterApiError> {
        let clauses = filter.render("dead_lettered_at IS NOT NULL");
        let columns = QUEUE_COLUMNS.replace("{body}", body);
        let listing = (self.queue.as_str(), columns.as_str(), "listing queue dead letters");
        list(client, listing, clauses, filter.common.limit, decode_queue).await
    }

    /// The queue dead letter with id `message_id` (the oldest, should there be several).
    pub async fn show_queue(
        &self,
        client: &impl Executor,
        message_id: MessageId,
    ) -> Result<Option<QueueDeadLetter>, DeadLetterApiError> {
        let filter = QueueDeadLetterFilter::message(message_id).limit(1);
        Ok(self.read_queue(client, &filter, BODY).await?.into_iter().next())
    }

    /// Redrives the queue dead letters `filter` selects that have an original topic (DLP-7):
    /// back to it, visible now, handled count reset, stamps and receipt stripped; audited as
    /// `dead_letter.redrive` by `actor`. A dead letter a consumer of the dead-letter queue
    /// holds right now (received, visibility not lapsed) is skipped. In a dry run, returns
    /// what it would move.
    pub async fn redrive_queue(
        &self,
        client: &impl Executor,
        filter: &QueueDeadLetterFilter,
        actor: &str,
        mode: Mode,
    ) -> Result<Vec<Touched>, DeadLetterApiError> {
        // A dead letter a consumer of the dead-letter queue holds right now (received, its
        // visibility not lapsed) is in flight: left alone, as its handler may ack it. A
        // redriven row loses its receipt, so a lapsed reader's late ack cannot delete it
        // from the queue it returned to.
        let base = "dead_lettered_at IS NOT NULL AND original_topic IS NOT NULL \
                    AND (receipt IS NULL OR visible_at <= now())";
        // The NOTIFY wakes each original topic's consumers, as a write to that queue would
        // (issue 25): they take the redriven messages at once, not at their next poll.
        let action = |picked: &str, audit: &str, channel: &str| {
            format!(
                "moved AS ( \
                   UPDATE {queue} q SET queue = q.original_topic, visible_at = now(), handled_count = 0, \
                          original_topic = NULL, rejection_reason = NULL, rejection_message = NULL, \
                          dead_lettered_at = NULL, receipt = NULL \
                   FROM {picked} p WHERE q.seq = p.seq \
                   RETURNING p.*), \
                 {audit} FROM moved RETURNING 1), \
                 notified AS (SELECT count(pg_notify({channel}::text, topic)) AS woken \
                   FROM (SELECT DISTINCT original_topic AS topic FROM moved) AS topics) \
                 SELECT seq, message_id, (SELECT woken FROM notified) FROM moved ORDER BY seq",
                queue = self.queue
            )
        };
        let wake = Some(self.queue_channel.as_str());
        self.queue_action(client, filter, actor, mode, base, ("dead_letter.redrive", wake), action).await
    }

    /// Deletes the queue dead letters `filter` selects (DLP-7), audited as
    /// `dead_letter.purge` by `actor`. In a dry run, returns what it would delete.
    pub async fn purge_queue(
        &self,
        client: &impl Executor,
        filter: &QueueDeadLetterFilter,
        actor: &str,
        mode: Mode,
    ) -> Result<Vec<Touched>, DeadLetterApiError> {
        let action = |picked: &str, audit: &str, _: &str| {
            format!(
                "gone AS (DELETE FROM {queue} q USING {picked} p WHERE q.seq = p.seq RETURNING p.*), \
                 {audit} FROM gone RETURNING 1) \
                 SELECT seq, message_id FROM gone ORDER BY seq",
                queue = self.queue
            )
        };
        self.queue_action(
            client,
            filter,
            actor,
            mode,
            "dead_lettered_at IS NOT NULL",
            ("dead_letter.purge", None),
            action,
        )
        .await
    }

    /// One audited action on the queue dead letters `filter` selects beyond `base`;
    /// `action(picked, audit, channel)` renders the CTEs after `picked` (the locked batch,
    /// with the columns the audit records) given the audit insert's head and the parameter
    /// bound to `wake` (the channel to notify; empty when `None`).
    #[allow(clippy::too_many_arguments)]
    async fn queue_action(
        &self,
        client: &impl Executor,
        filter: &QueueDeadLetterFilter,
        actor: &str,
        mode: Mode,
        base: &str,
        (name, wake): (&str, Option<&str>),
        action: impl Fn(&str, &str, &str) -> String,
    ) -> Result<Vec<Touched>, DeadLetterApiError> {
        let limit = check_action(filter.common.limit, filter.selects_something(), actor)?;
        let mut clauses = filter.render(base);
        let limit = clauses.bind(limit, Type::INT8);
        // Index: queue_dead_letter_id_idx by message id, else queue_dead_letter_seq_idx in
        // seq order (both partial on dead_lettered_at, schema step 6): the dead letters
        // only, never the queue's live messages.
        let selection = format!("FROM {} WHERE {} ORDER BY seq LIMIT {limit}", self.queue, clauses.sql());
        let what = format!("{name} of queue dead letters ({filter})");
        if mode == Mode::DryRun {
            let sql = format!("SELECT seq, message_id {selection}");
            return touched(&read(client, &sql, &clauses, &what).await?);
        }
        let (actor, detail) = (
            clauses.bind(BoundedText::actor(actor), Type::TEXT),
            clauses.bind(BoundedText::error(&filter.to_string()), Type::TEXT),
        );
        let channel = wake.map(|channel| clauses.bind(channel.to_owned(), Type::TEXT)).unwrap_or_default();
        let sql = format!(
            "WITH picked AS MATERIALIZED ( \
               SELECT seq, message_id, queue, original_topic, rejection_reason {selection} FOR UPDATE SKIP LOCKED), \
             {}",
            action(
                "picked",
                &format!(
                    "audited AS (INSERT INTO {} (actor, action, subject, detail) \
                     SELECT {actor}, '{name}', message_id::text, \
                            jsonb_build_object('seq', seq, 'queue', queue, 'original_topic', original_topic, \
                                               'reason', rejection_reason, 'filter', {detail}::text)",
                    self.audit
                ),
                &channel,
            )
        );
        touched(&read(client, &sql, &clauses, &what).await?)
    }

    /// Rows of the outbox's dead table matching `filter`, in `seq` order, without their
    /// bodies (each row's `body` is empty, `body_bytes` its size):
    /// [`show_outbox`](Self::show_outbox) reads one body.
    pub async fn list_outbox(
        &self,
        client: &impl Executor,
        filter: &OutboxDeadFilter,
    ) -> Result<Vec<OutboxDeadRow>, DeadLetterApiError> {
        self.read_outbox(client, filter, NO_BODY).await
    }

    async fn read_outbox(
        &self,
        client: &impl Executor,
        filter: &OutboxDeadFilter,
        body: &str,
    ) -> Result<Vec<OutboxDeadRow>, DeadLetterApiError> {
        let columns = DEAD_COLUMNS.replace("{body}", body);
        let listing = (self.dead.as_str(), columns.as_str(), "listing dead outbox rows");
        list(client, listing, filter.render(), filter.common.limit, decode_dead).await
    }

    /// The dead outbox row with id `message_id` (the oldest, should there be several).
    pub async fn show_outbox(
        &self,
        client: &impl Executor,
        message_id: MessageId,
    ) -> Result<Option<OutboxDeadRow>, DeadLetterApiError> {
        let filter = OutboxDeadFilter::message(message_id).limit(1);
        Ok(self.read_outbox(client, &filter, BODY).await?.into_iter().next())
    }

    /// Moves the dead rows `filter` selects back into the outbox (DLP-7): a new `seq`, no
    /// attempts, visible now, the same id, body, headers, context, `created_at` and lane;
    /// dispatchers are woken. Audited as `outbox_dead.redrive` by `actor`. In a dry run,
    /// returns what it would move.
    pub async fn redrive_outbox(
        &self,
        client: &impl Executor,
        filter: &OutboxDeadFilter,
        actor: &str,
        mode: Mode,
    ) -> Result<Vec<Touched>, DeadLetterApiError> {
        let limit = check_action(filter.common.limit, filter.selects_something(), actor)?;
        let candidates = self.outbox_candidates(client, filter, limit, "outbox_dead.redrive").await?;
        if mode == Mode::DryRun || candidates.is_empty() {
            return Ok(candidates.iter().map(|(touched, _)| *touched).collect());
        }
        // Lane rows rejoin their lane behind its writers' lock, taken (sorted, so two
        // redrives cannot deadlock) before the insert draws a seq.
        let seqs: Vec<i64> = candidates.iter().map(|(touched, _)| touched.seq).collect();
        let mut keys: Vec<i64> = candidates
            .iter()
            .filter_map(|(_, lane)| lane.as_ref())
            .map(|lane| advisory_lock_key(&format!("{}{lane}", self.lane_lock_prefix)))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let (actor, detail) = (BoundedText::actor(actor), BoundedText::error(&filter.to_string()));
        let sql = format!(
            "WITH locked AS ( \
               SELECT count(*) AS lanes FROM (SELECT pg_advisory_xact_lock(key) \
                 FROM (SELECT key FROM unnest($1::int8[]) AS k(key) ORDER BY key) AS keys) AS taken), \
             picked AS MATERIALIZED ( \
               SELECT seq FROM {dead} WHERE seq = ANY($2::int8[]) AND (SELECT lanes FROM locked) >= 0 \
               ORDER BY seq FOR UPDATE SKIP LOCKED), \
             gone AS ( \
               DELETE FROM {dead} d USING picked p WHERE d.seq = p.seq \
               RETURNING d.seq, d.message_id, d.transport, d.destination, d.body, d.headers, d.trace_context, \
                         d.lane, d.created_at, d.deliver_at, d.attempts, d.last_error), \
             back AS ( \
               INSERT INTO {outbox} (message_id, transport, destination, body, headers, trace_context, lane, \
                                     created_at, deliver_at, visible_at) \
               SELECT message_id, transport, destination, body, headers, trace_context, lane, created_at, \
                      deliver_at, now() FROM gone ORDER BY seq \
               RETURNING seq), \
             audited AS ( \
               INSERT INTO {audit} (actor, action, subject, detail) \
               SELECT $3, 'outbox_dead.redrive', message_id::text, \
                      jsonb_build_object('seq', seq, 'transport', transport, 'destination', destination, \
                                         'lane', lane, 'attempts', attempts, 'last_error', last_error, \
                                         'filter', $4::text) \
               FROM gone RETURNING 1), \
             notified AS (SELECT pg_notify($5::text, '') FROM (SELECT 1 FROM back LIMIT 1) AS any_back) \
             SELECT seq, message_id, (SELECT count(*) FROM notified) FROM gone ORDER BY seq",
            dead = self.dead,
            outbox = self.outbox,
            audit = self.audit,
        );
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&keys, Type::INT8_ARRAY),
            (&seqs, Type::INT8_ARRAY),
            (&actor, Type::TEXT),
            (&detail, Type::TEXT),
            (&self.channel, Type::TEXT),
        ];
        let rows =
            crate::exec::rows(client, &sql, &params, format!("outbox_dead.redrive ({filter})")).await?;
        touched(&rows)
    }

    /// Deletes the dead rows `filter` selects (DLP-7), audited as `outbox_dead.purge` by
    /// `actor`. In a dry run, returns what it would delete.
    pub async fn purge_outbox(
        &self,
        client: &impl Executor,
        filter: &OutboxDeadFilter,
        actor: &str,
        mode: Mode,
    ) -> Result<Vec<Touched>, DeadLetterApiError> {
        let limit = check_action(filter.common.limit, filter.selects_something(), actor)?;
        if mode == Mode::DryRun {
            let candidates = self.outbox_candidates(client, filter, limit, "outbox_dead.purge").await?;
            return Ok(candidates.iter().map(|(touched, _)| *touched).collect());
        }
        let mut clauses = filter.render();
        let limit = clauses.bind(limit, Type::INT8);
        let (actor, detail) = (
            clauses.bind(BoundedText::actor(actor), Type::TEXT),
            clauses.bind(BoundedText::error(&filter.to_string()), Type::TEXT),
        );
        let sql = format!(
            "WITH picked AS MATERIALIZED ( \
               SELECT seq FROM {dead} WHERE {where_} ORDER BY seq LIMIT {limit} FOR UPDATE SKIP LOCKED), \
             gone AS ( \
               DELETE FROM {dead} d USING picked p WHERE d.seq = p.seq \
               RETURNING d.seq, d.message_id, d.transport, d.destination, d.lane, d.attempts, d.last_error), \
             audited AS ( \
               INSERT INTO {audit} (actor, action, subject, detail) \
               SELECT {actor}, 'outbox_dead.purge', message_id::text, \
                      jsonb_build_object('seq', seq, 'transport', transport, 'destination', destination, \
                                         'lane', lane, 'attempts', attempts, 'last_error', last_error, \
                                         'filter', {detail}::text) \
               FROM gone RETURNING 1) \
             SELECT seq, message_id FROM gone ORDER BY seq",
            dead = self.dead,
            audit = self.audit,
            where_ = clauses.sql(),
        );
        touched(&read(client, &sql, &clauses, &format!("outbox_dead.purge ({filter})")).await?)
    }

    /// The dead rows an outbox action would take, with their lanes.
    async fn outbox_candidates(
        &self,
        client: &impl Executor,
        filter: &OutboxDeadFilter,
        limit: i64,
        name: &str,
    ) -> Result<Vec<(Touched, Option<String>)>, DeadLetterApiError> {
        let mut clauses = filter.render();
        let limit = clauses.bind(limit, Type::INT8);
        let sql = format!(
            "SELECT seq, message_id, lane FROM {} WHERE {} ORDER BY seq LIMIT {limit}",
            self.dead,
            clauses.sql()
        );
        let rows = read(client, &sql, &clauses, &format!("{name} ({filter})")).await?;
        let touched = touched(&rows)?;
        Ok(touched.into_iter().zip(rows.iter().map(|row| row.get::<_, Option<String>>(2))).collect())
    }
}

/// Reads `columns` of the rows of `table` that `clauses` select, at most `limit`, in `seq`
/// order, decoded by `decode`; `what` names the listing in errors.
async fn list<T>(
    client: &impl Executor,
    (table, columns, what): (&str, &str, &str),
    mut clauses: Where,
    limit: u32,
    decode: fn(&Row) -> Result<T, StorageError>,
) -> Result<Vec<T>, DeadLetterApiError> {
    let limit = clauses.bind(check_limit(limit)?, Type::INT8);
    let sql = format!("SELECT {columns} FROM {table} WHERE {} ORDER BY seq LIMIT {limit}", clauses.sql());
    let rows = read(client, &sql, &clauses, what).await?;
    Ok(rows.iter().map(decode).collect::<Result<_, _>>()?)
}

fn check_limit(limit: u32) -> Result<i64, DeadLetterApiError> {
    if (1..=MAX_BATCH_SIZE).contains(&limit) {
        Ok(i64::from(limit))
    } else {
        Err(DeadLetterApiError::Invalid(format!("limit: {limit} is out of range (1..={MAX_BATCH_SIZE})")))
    }
}

/// An action needs an actor for its audit record and at least one criterion, so that no
/// call touches every dead letter by accident.
fn check_action(limit: u32, selects_something: bool, actor: &str) -> Result<i64, DeadLetterApiError> {
    if actor.trim().is_empty() {
        return Err(DeadLetterApiError::Invalid(
            "actor: must name who acts, for the audit record".to_owned(),
        ));
    }
    if !selects_something {
        return Err(DeadLetterApiError::Invalid(
            "filter: an action needs at least one criterion (queue, topic, reason, age, id …)".to_owned(),
        ));
    }
    check_limit(limit)
}

async fn read(
    client: &impl Executor,
    sql: &str,
    clauses: &Where,
    what: &str,
) -> Result<Vec<Row>, StorageError> {
    crate::exec::rows(client, sql, &clauses.params(), what.to_owned()).await
}

fn touched(rows: &[Row]) -> Result<Vec<Touched>, DeadLetterApiError> {
    rows.iter()
        .map(|row| {
            let decode = |e| StorageError::database("decoding a dead letter's seq and id", e);
            Ok(Touched { seq: row.try_get(0).map_err(decode)?, message_id: row.try_get(1).map_err(decode)? })
        })
        .collect()
}

fn timestamp(row: &Row, index: usize, what: &'static str) -> Result<Timestamp, StorageError> {
    let time: SystemTime = row.try_get(index).map_err(|e| StorageError::database(what, e))?;
    Ok(Timestamp::from_system_time(time))
}

/// Column `index`'s headers; a value of another shape is a malformed row named by `row_name`.
fn read_headers(
    row: &Row,
    index: usize,
    row_name: impl FnOnce() -> String,
    what: &'static str,
) -> Result<Headers, StorageError> {
    match row.try_get::<_, JsonbHeaders<'_>>(index) {
        Ok(headers) => Ok(headers.into_headers()),
        Err(e) => Err(match malformed(&e) {
            Some(reason) => {
                StorageError::new(format!("{}: {reason}", row_name()), StorageErrorKind::MalformedRow)
            }
            None => StorageError::database(what, e),
        }),
    }
}

fn decode_queue(row: &Row) -> Result<QueueDeadLetter, StorageError> {
    let what = "decoding a queue dead letter";
    let decode = |e| StorageError::database(what, e);
    let seq: i64 = row.try_get(0).map_err(decode)?;
    let headers = read_headers(row, 9, || format!("queue dead letter seq {seq}"), what)?;
    Ok(QueueDeadLetter {
        seq,
        message_id: row.try_get(1).map_err(decode)?,
        queue: row.try_get(2).map_err(decode)?,
        original_topic: row.try_get(3).map_err(decode)?,
        rejection_reason: row.try_get(4).map_err(decode)?,
        rejection_message: row.try_get(5).map_err(decode)?,
        handled_count: row.try_get(6).map_err(decode)?,
        created_at: timestamp(row, 7, what)?,
        dead_lettered_at: timestamp(row, 8, what)?,
        headers,
        body: row.try_get(10).map_err(decode)?,
        body_bytes: row.try_get(12).map_err(decode)?,
        trace_context: row.try_get(11).map_err(decode)?,
    })
}

fn decode_dead(row: &Row) -> Result<OutboxDeadRow, StorageError> {
    let what = "decoding a dead outbox row";
    let decode = |e| StorageError::database(what, e);
    let seq: i64 = row.try_get(0).map_err(decode)?;
    let headers = read_headers(row, 9, || format!("dead outbox row seq {seq}"), what)?;
    Ok(OutboxDeadRow {
        seq,
        message_id: row.try_get(1).map_err(decode)?,
        transport: row.try_get(2).map_err(decode)?,
        destination: row.try_get(3).map_err(decode)?,
        lane: row.try_get(4).map_err(decode)?,
        attempts: row.try_get(5).map_err(decode)?,
        last_error: row.try_get(6).map_err(decode)?,
        created_at: timestamp(row, 7, what)?,
        failed_at: timestamp(row, 8, what)?,
        headers,
        body: row.try_get(10).map_err(decode)?,
        body_bytes: row.try_get(12).map_err(decode)?,
        trace_context: row.try_get(11).map_err(decode)?,
    })
}
