//! [`OutboxWriter`]: messages written into the outbox inside the caller's transaction
//! (OUT-1..4), with the NOTIFY that wakes dispatchers when it commits.

use std::collections::BTreeSet;

use relayer_core::{MessageError, Namespace, NewMessage, TransportRegistry, advisory_lock_key};

use super::batch::EnqueueBatch;
use super::channel::{lane_lock_prefix, notify_channel};
use super::columns::WrittenColumns;
use crate::error::StorageError;
use crate::exec::Executor;

/// The default largest body [`OutboxWriter`] accepts: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

pub use relayer_core::store::Enqueued;

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
    /// The insert for one message without a lane: `INSERT … VALUES`, cheap to plan.
    single: InsertStatements,
    notify: bool,
    channel: String,
    transports: BTreeSet<String>,
    max_body_bytes: usize,
    /// The most bytes of rows one insert binds ([`crate::split`]); lowered only by tests.
    max_statement_bytes: usize,
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
        // One message without a lane, the commonest write, as the plain one-row insert it
        // is: sent unnamed (planned on every call) it costs a fraction of the multi-row
        // statement's planning (docs/performance.md, "Enqueue"). Same columns, same
        // scheduling on the database clock, same NOTIFY.
        let single = {
            let inserted = format!(
                "INSERT INTO {outbox} (message_id, transport, destination, body, headers, trace_context, \
                                       deliver_at, visible_at) \
                 VALUES ($1::uuid, $2::text, $3::text, $4::bytea, $5::jsonb, $6::text, \
                         coalesce($7::timestamptz, now() + $8::int8 * interval '1 microsecond'), \
                         coalesce($7::timestamptz, now() + $8::int8 * interval '1 microsecond', now())) \
                 RETURNING seq, message_id"
            );
            InsertStatements {
                notifying: format!(
                    "WITH inserted AS ({inserted}), notified AS (SELECT pg_notify($9::text, '') AS done) \
                     SELECT inserted.seq, inserted.message_id FROM inserted, notified"
                ),
                silent: inserted,
            }
        };
        OutboxWriter {
            unordered: insert(false),
            ordered: insert(true),
            single,
            channel: notify_channel(namespace),
            lane_lock_prefix: lane_lock_prefix(namespace),
            transports: transports.into_iter().map(Into::into).collect(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_statement_bytes: crate::split::MAX_STATEMENT_BYTES,
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
    ///
    /// One message runs a one-row `INSERT … VALUES`, cheap to plan even sent unnamed (a
    /// plain client or transaction plans every statement it sends); a batch runs one
    /// multi-row statement. To skip the planning as well, run the writer through
    /// [`Prepared`](crate::Prepared) over a [`StatementCache`](crate::StatementCache) that
    /// lives with your connection ([`PgClient::split`](crate::PgClient::split)):
    ///
    /// ```no_run
    /// # async fn example(client: tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use relayer_core::{Namespace, NewMessage};
    /// use relayer_postgres::{PgClient, Prepared, OutboxWriter};
    ///
    /// let writer = OutboxWriter::new(&Namespace::default(), ["queue"]);
    /// let mut client = PgClient::new(client); // keeps the statements prepared on it
    /// let (connection, statements) = client.split();
    /// let tx = connection.transaction().await?;
    /// writer.enqueue(&Prepared::new(&tx, statements), &[NewMessage::new("queue", "orders", b"{}".to_vec())]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A batch whose rows add up to more than 256 MiB is written in several statements, in
    /// order, each under PostgreSQL's 1 GiB limits (one round trip each). They commit
    /// together inside a transaction; on an autocommitting client one by one.
    pub async fn enqueue(
        &self,
        client: &impl Executor,
        messages: &[NewMessage],
    ) -> Result<Vec<Enqueued>, EnqueueError> {
        let batch = self.batch(messages)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let what = || format!("enqueueing {}", crate::error::messages(messages.len()));
        let sizes: Vec<usize> = messages.iter().map(crate::split::message_bytes).collect();
        let runs = crate::split::split_by_bytes(&sizes, self.max_statement_bytes);
        if runs.len() <= 1 {
            return Ok(super::batch::insert_and_read_back(
                client,
                batch.statement(),
                &batch.params(),
                what(),
            )
            .await?);
        }
        // Each run locks every lane key of the whole batch, sorted, before it draws a seq:
        // the first run takes them all (LAN-1c), the others find them held by their own
        // transaction, so writers of several lanes still cannot deadlock.
        let lane_keys = batch.lane_keys.clone();
        let mut written = Vec::with_capacity(messages.len());
        for run in runs {
            let mut part = self.encode(&messages[run], lane_keys.clone());
            part.statement = self.statement_for(&part);
            written.extend(
                super::batch::insert_and_read_back(client, part.statement(), &part.params(), what()).await?,
            );
        }
        Ok(written)
    }

    /// The largest total of row bytes one insert binds, lowered by tests to split small
    /// batches (the default is [`MAX_STATEMENT_BYTES`](crate::split::MAX_STATEMENT_BYTES)).
    #[cfg(test)]
    pub(crate) fn with_max_statement_bytes(mut self, bytes: usize) -> Self {
        self.max_statement_bytes = bytes;
        self
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
        let mut batch = self.encode(messages, Vec::new());
        batch.lane_keys = batch
            .lanes
            .iter()
            .flatten()
            .map(|lane| advisory_lock_key(&format!("{}{lane}", self.lane_lock_prefix)))
            .collect();
        batch.statement = self.statement_for(&batch);
        Ok(batch)
    }

    /// The statement rendering for `batch`: the one-row insert for a single message without
    /// lane keys, else the multi-row one, with the lanes' locks when it has lane keys; with
    /// the NOTIFY unless the writer is silent.
    fn statement_for(&self, batch: &EnqueueBatch<'_>) -> &str {
        let statements = if batch.is_single() {
            &self.single
        } else if batch.lane_keys.is_empty() {
            &self.unordered
        } else {
            &self.ordered
        };
        if self.notify { &statements.notifying } else { &statements.silent }
    }

    /// `messages` (already validated) encoded as the enqueue's parameters, with `lane_keys`
    /// and no statement chosen yet.
    fn encode<'a>(&'a self, messages: &'a [NewMessage], lane_keys: Vec<i64>) -> EnqueueBatch<'a> {
        // The columns every writer binds come from one place (the direct queue writer too).
        let WrittenColumns { ids, destinations, bodies, headers, trace_contexts, deliver_at, delays } =
            WrittenColumns::of(messages);
        EnqueueBatch {
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
            lane_keys,
            channel: self.notify.then_some(self.channel.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::placeholders;

    /// OUT-1, OUT-4: every enqueue statement shape binds exactly the parameters it names:
    /// one message (the one-row insert) or several, with or without lanes, notifying or not.
    #[test]
    fn each_outbox_statement_shape_binds_what_it_names_out_1() {
        let one = [NewMessage::new("queue", "orders", b"a".to_vec())];
        let laned = [NewMessage::new("queue", "orders", b"a".to_vec()).lane("l")];
        let two = [
            NewMessage::new("queue", "orders", b"a".to_vec()),
            NewMessage::new("queue", "bills", b"b".to_vec()),
        ];
        for writer in [
            OutboxWriter::new(&Namespace::default(), ["queue"]),
            OutboxWriter::new(&Namespace::default(), ["queue"]).without_notify(),
        ] {
            for (messages, single) in [(&one[..], true), (&laned[..], false), (&two[..], false)] {
                let batch = writer.batch(messages).unwrap();
                // A silent multi-row statement without lanes leaves its last parameter, the
                // (empty) lane keys `$10`, bound but unreferenced, as it always has.
                let unreferenced = usize::from(!single && !writer.notify && batch.lane_keys.is_empty());
                assert_eq!(placeholders(batch.statement()) + unreferenced, batch.params().len(), "{batch:?}");
                assert_eq!(batch.statement().contains("unnest"), !single, "{batch:?}");
                assert_eq!(batch.statement().contains("pg_notify"), writer.notify, "{batch:?}");
            }
        }
    }

    /// OUT-3: no body limit lets through a body PostgreSQL cannot store.
    #[test]
    fn the_body_limit_never_exceeds_what_postgresql_stores_out_3() {
        let writer = OutboxWriter::new(&Namespace::default(), ["queue"]).with_max_body_bytes(usize::MAX);
        assert_eq!(writer.max_body_bytes, relayer_core::options::MAX_BODY_BYTES_LIMIT);
        assert_eq!(writer.with_max_body_bytes(64).max_body_bytes, 64);
    }
}
