//! relayer's cross-crate scenarios: what happens to messages when processes die and the
//! database crashes, driven only through public APIs (the `relayer` facade's builder and
//! host, its writer, `relayer-advisory-lock`, `relayer-test-support`).
//!
//! The scenarios themselves are the integration tests of this crate:
//!
//! - `tests/sigkill.rs`: hosts running a dispatcher and the recovery sweeper, each in a
//!   child process ([`relayer-chaos-host`](host_process)), are killed with SIGKILL at random
//!   points, some of them while they own a lane and its send was accepted, while the test
//!   keeps committing unordered and lane messages. A last host drains the outbox; then
//!   every committed message must be in relayer's PostgreSQL queue, each lane's first
//!   deliveries in seq order. CI runs a few kills; `cargo xtask chaos --kills N` runs many.
//! - `tests/server_restart.rs`: PostgreSQL (a cluster the test owns) is stopped in
//!   immediate mode and started again while writers, a dispatcher, the sweeper, cleanup and
//!   advisory-lock holders run; nothing committed is lost, every worker works again, the
//!   locks are taken again.
//! - `tests/crash_windows.rs`: the windows a SIGKILL only hits by luck, hit every run. The
//!   sweeper, cleanup and a claimant run on relayer's PostgreSQL source wrapped in
//!   test-support's `FaultyStore`, which strikes the exact call: a completion lost after the
//!   send, a connection killed between the lock and the send, a renewal or a batch held past
//!   its lease. Nothing is lost, a window costs at most a second delivery, and the late
//!   writer is fenced.
//! - `tests/layering.rs`: the store seam holds — no worker crate depends on the storage
//!   crate (LDR-1b).
//!
//! This library holds what they share: a queue transport that can be watched
//! ([`QueueProbe`]), the child-process protocol ([`host_process`]), the pure delivery
//! [`audit`](mod@audit), reading the tables as an observer, run sizes from the environment ([`scale`]),
//! and a seeded random source ([`Rng`]).
#![deny(missing_docs)]

pub mod audit;
pub mod host_process;
mod observe;
mod probe;
mod rng;
pub mod scale;

pub use audit::{Audit, Delivery, Written, audit};
pub use observe::{outbox_rows, read_deliveries};
pub use probe::QueueProbe;
pub use rng::{Rng, SEED_VARIABLE};
