//! The recovery sweeper (§6): the safety net that resends unordered outbox rows direct
//! dispatch left behind.
//!
//! # The model
//!
//! Direct dispatch sends a row right after its transaction commits (OUT-4). Rows it did not
//! finish — the writing process died, a send failed and is due for a retry, a claim expired
//! with its holder, a scheduled row became due — stay in the outbox. One replica per
//! namespace sweeps them (SWP-1): the holder of the lease job [`LEASE_JOB`] (`sweeper`),
//! or of an advisory lock, chosen with [`Leadership`](relayer_worker::Leadership).
//!
//! Every `sweep_interval` a pass opens **one** store session — one pooled connection with
//! relayer's `relayer_postgres::PgSource` (LIF-2: a pool of one works, and the pass never
//! waits for a second connection while it holds one) — and runs a single transaction, a
//! capability of the session ([`Session::begin`](relayer_core::session::Session::begin)):
//!
//! 1. take the lease row in that transaction (`FOR UPDATE SKIP LOCKED`: a contender never
//!    waits; it is told "not leader" and rolls back) — the row lock is held until the pass
//!    commits, so even an expired lease cannot let another replica overlap a running pass
//!    (LDR-2);
//! 2. ask the keyset cursor ([`KeysetCursor`](relayer_core::KeysetCursor), kept by the
//!    sweeper across passes) where to read: a new traversal first captures the highest
//!    pending unordered `seq` as a fixed boundary, then pages through it (SWP-3);
//! 3. read one page of at most `batch_size` eligible `seq`s — unordered, due, with no live
//!    claim, and at least `recovery_delay` old, so young rows are left to commit-triggered
//!    dispatch (SWP-2) — and lock those rows conditionally: a row a concurrent dispatcher
//!    holds is not returned and is counted as *skipped* (SWP-4). The row locks are the
//!    claim; no claim is written;
//! 4. send them through the send path the dispatcher uses too,
//!    [`SendPath`](relayer_delivery::SendPath) — the same grouping by transport and
//!    destination, batch limits, per-message outcomes, panic catching, retry backoff, poison
//!    and circuit breakers (DSP-2..6), and the same per-batch `send_timeout` (TRN-5). The
//!    transport receives the row's envelope as it was written: id, body, headers and
//!    creation context (SWP-5). The sends end by half the pass's limit whatever the
//!    transports do: a batch still running fails transiently, one not started is released;
//! 5. complete the rows (delete, retry release, move to the dead table — rows of the page that could
//!    not be decoded too, with the reason, SPEC §15), renew the lease
//!    last (its expiry restarts from the end of the pass), and commit. A pass still running
//!    when its limit — `lease_duration` (the lease was taken or renewed as it began), or
//!    the options' `lease_duration` without a lease — is up is rolled back, so it never holds the lease
//!    row, its row locks or its snapshot past its lease, and another replica can lead.
//!
//! Steps 1 to 3 are one round trip: the lease acquisition and a single statement that
//! captures the boundary, reads the page and locks it are sent together, and that statement
//! reads nothing unless the lease is held; nothing is sent before both answered. The
//! completion and the renewal are sent together too, and each statement is prepared once
//! per pooled connection. In the steady state (the lease already ours, the statements
//! prepared) a pass is therefore five round trips whatever it does; taking a lease over or
//! creating it costs a page read more.
//!
//! Claims, completions and the lease renewal therefore commit together. A crash, a killed
//! connection or a failed statement before the commit rolls all of them back: the rows are
//! pending again, untouched, and a later pass sends them again. **Delivery is at least
//! once**: sends a pass made before such a late failure are replayed by a later pass, and a
//! transport that accepted a message before a crash sees it again with the same id
//! (DSP-7). Transports that deduplicate by message id absorb this
//! ([`Capabilities::deduplicates_by_id`](relayer_core::Capabilities)). The NATS JetStream
//! transport (`relayer-nats`) is one: it sends the message id as `Nats-Msg-Id`, so a
//! replay that reaches the stream inside its duplicate window (two minutes by default) is
//! acknowledged and dropped — subscribers see the message once. What that buys depends on
//! timing: a replay by this sweeper comes at least `recovery_delay` (or a claim's
//! `claim_duration`) after the first send, so keep those well inside the stream's window;
//! a replay after the window, or through a transport without the capability (RabbitMQ,
//! webhooks), reaches the receiver twice, and the receiver's inbox (QUE-3) is where it is
//! deduplicated by the same id.
//!
//! The cursor moves one page per pass, and after an empty or short page it wraps and
//! captures a new boundary. Newer traffic
//! therefore cannot starve older rows that failed, became due or lost their claim, and a
//! failing destination cannot hide the rows after it. Lane rows are never read, claimed or
//! sent (LAN-4): the lane dispatcher owns them.
//!
//! Passes run in a [`PassLoop`](relayer_worker::PassLoop): the first at once, then one
//! every `sweep_interval`; a failed or panicking pass is logged and retried with backoff up
//! to `max_backoff` (RES-1..3). **A pass that found a full page is followed at once by the
//! next** (SWP-6): each is still one page in one transaction committed with its lease
//! renewal, so a backlog left by a crashed dispatcher drains at the database's pace rather
//! than `batch_size` rows per `sweep_interval`. It cannot hammer a failing destination:
//! a failed row is released with its retry delay and is not eligible before it, and rows
//! deferred by an open circuit breaker likewise. The first pass of a loop checks the
//! schema; an unreachable database or a missing schema is a failed pass like any other,
//! retried with backoff, so a worker started while the database is down or being migrated
//! carries on once it is back. Shutdown lets the pass in flight finish (a pass that sees
//! the shutdown before sending sends nothing), then releases the lease so another replica
//! leads at once. After a crash the lease expires on the database clock and another
//! replica continues (LIF-3).
//!
//! A row naming a transport the sweeper's registry lacks cannot be caught at start — any
//! process may have written it — and is never the sweeper's (TRN-6): with the source built
//! `with_transports`, pages step over it unlocked, so it waits, with no attempt counted,
//! for an instance that has the transport (a rolling deploy adding one, another service's).
//! The retry and poison policy is the [`DispatcherOptions`](relayer_core::DispatcherOptions)
//! given to the send path: give the sweeper the same options as the dispatchers, so a row
//! is judged alike whoever sends it.
//!
//! The renewal is the pass's last statement and counts from that instant on the database
//! clock (`clock_timestamp()`, not the transaction's start, `now()`), so a leader's lease
//! runs `lease_duration` past the end of each of its passes, however long the pass took.
//! `lease_duration` must exceed `sweep_interval` (checked when the options are built), so
//! an idle leader renews on its next pass before its lease lapses (LDR-2). The sweeper has
//! no claim duration: its claims are the row locks of its pass transaction, which last
//! exactly as long as the pass.
//!
//! Passes are traced under the target `relayer::sweeper`: a span per pass with the counts
//! of [`SweepReport`] (scanned, claimed, sent, failed, dead, skipped) and its duration. A
//! failed pass is a [`WorkerError`](relayer_worker::WorkerError): what the pass was doing,
//! whether a later pass may succeed, and the store's error as its source.
//!
//! # The store
//!
//! The sweeper reaches storage only through the core crate's store traits: it is generic
//! over a [`StoreSource`](relayer_core::session::StoreSource) whose sessions can read and
//! lock a recovery page, complete the rows they locked, hold back a tripped destination,
//! hold a lease and verify the schema (the bounds of [`Sweeper`]). This crate does not
//! depend on relayer's PostgreSQL crate; the caller passes its source in. A source that
//! wraps another — to count calls, log, or inject faults in tests
//! (`relayer_test_support::FaultyStore`) — sweeps as relayer's own does.
//!
//! The example builds the sweeper as the `relayer` facade's host does, on
//! `relayer_postgres::PgSource`:
//!
//! ```no_run
//! # async fn example(pool: relayer_postgres::PgPool, transports: std::sync::Arc<relayer_core::TransportRegistry>) {
//! use relayer_core::{DispatcherOptions, Namespace, SweeperOptions};
//! use relayer_delivery::SendPath;
//! use relayer_postgres::PgSource;
//! use relayer_sweeper::{Sweeper, lease_leadership};
//! use tokio_util::sync::CancellationToken;
//!
//! let namespace = Namespace::default();
//! let options = SweeperOptions::default();
//! // The same retry and poison policy as this service's dispatchers.
//! let send = SendPath::new(transports, DispatcherOptions::default());
//! // Rows naming a transport this sweeper lacks are buried at once, not retried forever.
//! let source = PgSource::new(pool, &namespace).with_transports(send.transports().names());
//! let leadership = lease_leadership(&options);
//! let sweeper = Sweeper::new(source, namespace, options, send, leadership);
//! let shutdown = CancellationToken::new();
//! sweeper.run(shutdown).await; // returns once `shutdown` is cancelled
//! # }
//! ```
#![deny(missing_docs)]

mod error;
mod hosted;
mod pass;
mod report;
mod sweeper;

pub use report::SweepReport;
pub use sweeper::{LEASE_JOB, Sweeper, lease_leadership};
