//! Retention cleanup (§8): keeps the dead and inbox tables from growing forever.
//!
//! # The model
//!
//! One replica at a time cleans a namespace, under its own leadership (RET-4): by default
//! the lease job [`LEASE_JOB`] (`cleanup`), separate from the sweeper's. Every
//! `cleanup_interval` a pass borrows one pooled connection (LIF-2: a pool of size 1 works),
//! takes or renews the lease in a short transaction, then deletes expired rows in batches:
//! dead rows whose `failed_at` is older than `dead_retention`, then inbox rows whose
//! `processed_at` is older than `inbox_retention` (RET-2). Each batch is one short
//! transaction of at most `batch_size` rows picked with `FOR UPDATE SKIP LOCKED`, so
//! replicas never wait for each other, and it is fenced by the lease's term (LDR-6): a
//! leader deposed in the middle of its pass deletes nothing more. A table is done when a
//! batch comes back short; the pass stops early when its `pass_budget` is spent or the host
//! shuts down, and the next pass carries on. The pass ends by renewing the lease.
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
//! ```no_run
//! # async fn example(pool: relayer_postgres::PgPool) -> Result<(), relayer_cleanup::CleanupError> {
//! use relayer_cleanup::{Cleanup, LEASE_JOB};
//! use relayer_core::{CleanupOptions, Namespace};
//! use relayer_worker::Leadership;
//! use tokio_util::sync::CancellationToken;
//!
//! let options = CleanupOptions::default();
//! let leadership = Leadership::lease(LEASE_JOB, "host-a/4242/1f3c", options.lease_duration());
//! let cleanup = Cleanup::new(pool, Namespace::default(), options, leadership);
//! let shutdown = CancellationToken::new();
//! cleanup.run(shutdown).await // returns once `shutdown` is cancelled
//! # }
//! ```
#![deny(missing_docs)]

mod cleanup;

pub use cleanup::{Cleanup, CleanupError, CleanupReport, LEASE_JOB};
