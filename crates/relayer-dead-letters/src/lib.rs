//! Dead-letter policies (§11): redrive or expire dead letters per message type.
//!
//! # The model
//!
//! A consumer that gives up on a message moves it to its subscription's dead-letter queue,
//! stamped with where it came from (QUE-2); the dispatcher moves a message that reached
//! `max_attempts` to the outbox's dead table (DSP-5). Left alone, both only grow. A
//! [`DeadLetterPolicies`](relayer_core::DeadLetterPolicies) set gives each message type at
//! most one policy (DLP-1): **redrive** — move the dead letters back `after` they were
//! dead-lettered, for as long as the message is younger than `give_up_after` — or
//! **expire** — delete them `after` dead-lettering. Types without a policy keep theirs.
//!
//! One replica at a time runs the pass for a namespace, led by a session advisory lock on
//! [`lock_resource`] by default (LDR-5), every `interval` (default 15 min, DLP-1). The
//! worker reaches its store only through the core capability traits
//! ([`MoveDeadLetters`](relayer_core::store::MoveDeadLetters) and a lease); a pass opens
//! one session of its [`StoreSource`](relayer_core::StoreSource) (LIF-2) and, per type, runs one statement per batch of at
//! most `batch_size` until a batch comes back short. Each move is one statement that picks
//! its rows with `FOR UPDATE SKIP LOCKED` and changes them (DLP-3): a redrive restores the
//! original topic, resets the handled count, strips the rejection stamps and makes the
//! message visible now, so even replicas running side by side without a leader move each
//! dead letter exactly once. Every statement matches both the dead-letter queue and the
//! original topic (DLP-4): types may share a dead-letter queue, a dead letter without an
//! original topic is never touched, and neither is the invalid-message queue. Outbox dead
//! rows of a (transport, destination) type are redriven back into the outbox, where the
//! dispatcher sends them again; lane rows are left to operators (LAN-5).
//!
//! A dead letter whose redrive comes after `give_up_after` stays where it is. Every pass
//! counts such *stuck* dead letters per type, logs the count at ERROR (target
//! `relayer::dead_letter`) and reports it per type ([`DeadLetterReport::types`]); the
//! facade's `metrics` feature exports it as a gauge from the pass events (DLP-5), like
//! every worker metric — this crate emits none. An operator decides, with the API in
//! `relayer_postgres::dead_letters` (DLP-7).
//!
//! ```no_run
//! # async fn example(source: relayer_postgres::PgSource, lock: std::sync::Arc<dyn relayer_core::DistributedLock>)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use relayer_core::{DeadLetterOptions, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, Namespace};
//! use relayer_dead_letters::{DeadLetterWorker, lock_resource};
//! use relayer_worker::Leadership;
//! use tokio_util::sync::CancellationToken;
//!
//! let hour = Duration::from_secs(3_600);
//! let policies = DeadLetterPolicies::new([
//!     DeadLetterRule::queue("orders", "orders.dead", DeadLetterPolicy::redrive(hour, 24 * hour)?),
//!     DeadLetterRule::outbox("nats", "invoices", DeadLetterPolicy::expire(7 * 24 * hour)),
//! ])?;
//! let namespace = Namespace::default();
//! let leadership = Leadership::Advisory(lock, lock_resource(&namespace));
//! let worker = DeadLetterWorker::new(source, namespace, policies, DeadLetterOptions::default(), leadership);
//! worker.run(CancellationToken::new()).await; // returns once the token is cancelled
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod hosted;
mod report;
mod worker;

pub use report::{DeadLetterReport, TypeReport};
pub use worker::{DeadLetterWorker, LEASE_JOB, lock_resource};
