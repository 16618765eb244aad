//! The runtime every relayer background worker shares: dispatcher (its unordered loops and
//! its lane loop), recovery sweeper, retention cleanup and dead-letter policies all run as
//! a [`PassLoop`] around a [`Pass`].
//!
//! # The model
//!
//! A worker does its work in *passes*. The first pass runs as soon as the loop starts, and
//! each later one after a wait (RES-3). After a successful pass the wait is the worker's
//! interval; after the n-th failed pass in a row it is
//! [`PassBackoff::wait_after(n)`](relayer_core::PassBackoff::wait_after), doubling up to
//! a cap (RES-2). A pass fails when it returns an error *or panics*: both are caught, logged
//! with their cause chain, and retried; nothing a pass does can end the process or the loop
//! (RES-1). An optional [`Notify`](tokio::sync::Notify) starts the next pass early (after
//! an optional linger that lets a burst of wake-ups share one pass), but never cuts a
//! failure backoff short. A pass that left work behind — a full batch — asks for the next
//! pass at once ([`Pass::again_at_once`]); one that moved nothing never does, so a loop
//! cannot spin.
//!
//! Passes that must run on one replica at a time are *led* ([`Leadership`], LDR-5). With a
//! lease (the default for the sweeper and cleanup), the pass itself takes the lease row on
//! its own connection and transaction, because the runtime has no database. With an
//! advisory lock, the loop takes the lock, holds it across passes, checks
//! [`LockGuard::ensure_held`](relayer_core::LockGuard::ensure_held) before every pass, and
//! drops it on any error so a killed session cannot leave two leaders. A replica that is not
//! leader skips its turn: that is a success ([`PassOutcome::NotLeader`]), not a failure.
//!
//! Shutdown is a [`CancellationToken`](tokio_util::sync::CancellationToken): the loop stops
//! between passes or in the middle of a wait; a pass in flight finishes, or stops at a safe
//! point of its own choosing by watching the token it is given. Then the loop releases its
//! leadership and returns. Cancelling twice, or after the loop ended, is harmless.
//!
//! Each pass runs in a span (target `relayer::<worker>`) that records its number, outcome,
//! report and duration. Tests observe a loop through its [`WorkerEvent`]s — pass started,
//! succeeded, failed (with the next wait), stopped — and never sleep to wait for it; a
//! finished pass's event carries its duration, so metrics need not pair events of loops
//! that share a channel.
//!
//! A host runs each worker through [`HostedWorker`], which every worker crate implements
//! once (its `hosted.rs`): one task per worker, stopped by cancelling its token.
#![deny(missing_docs)]

mod error;
mod events;
mod hosted;
mod kind;
mod leadership;
mod outcome;
mod panic;
mod pass_loop;
mod release_lease;
mod roll_back;

pub use error::WorkerError;
pub use events::WorkerEvent;
pub use hosted::HostedWorker;
pub use kind::WorkerKind;
pub use leadership::Leadership;
pub use outcome::PassOutcome;
pub use panic::catch_panic;
pub use pass_loop::{Pass, PassLoop, WorkerHandle};
pub use release_lease::release_lease_at_shutdown;
pub use roll_back::roll_back_failed_pass;
