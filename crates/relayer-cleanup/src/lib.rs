//! Retention cleanup (§8): keeps the dead and inbox tables from growing forever.
//!
//! # The model
//!
//! One replica at a time cleans a namespace, under its own leadership (RET-4): by default
//! the lease job [`LEASE_JOB`] (`cleanup`), separate from the sweeper's. Every
//! `cleanup_interval` a pass opens one store session — one pooled connection with relayer's
//! `relayer_postgres::PgSource` (LIF-2: a pool of size 1 works) —
//! takes the lease in a short transaction (or finds another leader and skips its turn),
//! then deletes expired rows in batches: dead rows whose `failed_at` is older than
//! `dead_retention`, then inbox rows whose `processed_at` is older than `inbox_retention`
//! (RET-2). Each batch is one short transaction of at most `batch_size` rows picked with
//! `FOR UPDATE SKIP LOCKED`, so replicas never wait for each other and no batch holds an old
//! snapshot back from vacuum. A table is done when a batch comes back short; the pass stops
//! early when its `pass_budget` is spent or the host shuts down, and the next pass carries
//! on.
//!
//! **The lease is held through the pass (LDR-2, LDR-6).** A pass of many short
//! transactions cannot keep one row lock, so each batch carries the lease itself: in its
//! one statement it locks the lease row (`SKIP LOCKED`: never waiting), deletes only while
//! the lease is still this instance's, at the same term, and unexpired, and renews it from
//! the end of the batch. While a batch runs, a contender finds the lease row locked and
//! skips its turn — even if the lease expired meanwhile; between batches the lease was just
//! renewed, so it is live and ours. Passes of two replicas therefore never overlap, and a
//! leader deposed while it stalled deletes nothing more: its next batch finds the lease
//! gone, and the pass ends (`lease_lost`). A contender's probe that holds the row at the
//! instant a batch starts makes the batch a no-op, tried again shortly. The last batch's
//! renewal is the pass's; `lease_duration` must exceed `cleanup_interval` (checked when the
//! options are built), so an idle leader renews on its next pass before its lease lapses.
//!
//! The first pass of a loop checks the schema; an unreachable database or a missing schema
//! is a failed pass like any other, retried with backoff (RES-1, RES-2), so a cleaner
//! started while the database is down or being migrated carries on once it is back.
//!
//! A retention of `infinite` ([`Retention::Keep`](relayer_core::Retention::Keep)) leaves
//! its table alone (RET-3). The outbox is never touched (RET-1): accepted rows are deleted by
//! dispatch as they are accepted, and pending, scheduled and parked rows are still owed to a
//! transport, however old they are.
//!
//! **Inbox retention bounds deduplication (RET-5).** Once a consumer's inbox row is deleted,
//! a redelivery of that message runs its handler again. Choose an `inbox_retention` longer
//! than the longest window in which your broker may redeliver (or replay) a message, or
//! keep the inbox forever with `infinite`. Deleting dead rows is permanent: keep them
//! (`infinite`) if audits or investigations need them.
//!
//! # The store
//!
//! Cleanup reaches storage only through the core crate's store traits: it is generic over
//! a [`StoreSource`](relayer_core::session::StoreSource) whose sessions delete expired rows
//! in leased batches, hold and check a lease and verify the schema (the bounds of
//! [`Cleanup`]). This crate does not depend on relayer's PostgreSQL crate; the caller
//! passes its source in, or one that wraps it (to count, log, or inject faults in tests:
//! `relayer_test_support::FaultyStore`). A failed pass is a
//! [`WorkerError`](relayer_worker::WorkerError): what it was doing, whether a later pass
//! may succeed, and the store's error as its source.
//!
//! ```no_run
//! # async fn example(pool: relayer_postgres::PgPool) {
//! use relayer_cleanup::{Cleanup, LEASE_JOB};
//! use relayer_core::{CleanupOptions, Namespace};
//! use relayer_postgres::PgSource;
//! use relayer_worker::Leadership;
//! use tokio_util::sync::CancellationToken;
//!
//! let namespace = Namespace::default();
//! let options = CleanupOptions::default();
//! let leadership = Leadership::lease(LEASE_JOB, "host-a/4242/1f3c", options.lease_duration());
//! let cleanup = Cleanup::new(PgSource::new(pool, &namespace), namespace, options, leadership);
//! let shutdown = CancellationToken::new();
//! cleanup.run(shutdown).await; // returns once `shutdown` is cancelled
//! # }
//! ```
#![deny(missing_docs)]

mod cleanup;
mod hosted;
mod report;

pub use cleanup::{Cleanup, LEASE_JOB};
pub use report::CleanupReport;
