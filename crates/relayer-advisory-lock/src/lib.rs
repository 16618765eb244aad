//! PostgreSQL advisory locks for relayer: [`PgAdvisoryLock`], a
//! [`DistributedLock`](relayer_core::DistributedLock) (LDR-3, LDR-4, LDR-6).
//!
//! # The model
//!
//! A worker that must run on one replica at a time asks for a named resource before its pass.
//! The lock is a PostgreSQL **session-level** advisory lock taken with
//! `pg_try_advisory_lock(key)`:
//!
//! - **Why session locks.** A session lock is held until it is unlocked or its session ends,
//!   and the server frees it when the session ends for *any* reason — a release, a crash of
//!   this process, a killed connection. So a dead holder can never keep the lock, and no
//!   expiry clock is needed. (A transaction-level lock would end with each transaction and
//!   could not span a pass made of many short transactions.)
//! - **Why a dedicated connection.** The lock belongs to the session, so the session must live
//!   exactly as long as the guard. A pooled connection returned to its pool with the lock still
//!   held would hand leadership to whatever borrows it next, and session locks are re-entrant:
//!   two guards on one session would stack and need two unlocks. Each guard therefore owns a
//!   connection opened for it from the lock's `Config`; dropping the guard closes that
//!   connection, and the server frees the lock. A session whose unlock was confirmed holds
//!   nothing and may be kept (a few per lock) to make the next acquire cheap; a session in any
//!   other state is closed, never reused. Because every guard has its own session, taking the
//!   same resource twice from one process never stacks: the second attempt is `Ok(None)`.
//! - **Why never wait.** A replica that finds the resource taken skips its turn
//!   (`Ok(None)` at once) instead of queueing behind the leader: a waiting replica would hold a
//!   connection and wake up to run a pass that is no longer due. A database error is an `Err`,
//!   never `Ok(None)` (LDR-4), so a broken lock is seen as a failure and not as someone else's
//!   turn. Once shutdown has begun ([`PgAdvisoryLock::begin_shutdown`] or the token given to
//!   [`PgAdvisoryLock::with_shutdown`]) every attempt is refused with `ShuttingDown`.
//! - **Checking before each pass.** [`LockGuard::ensure_held`](relayer_core::LockGuard::ensure_held) asks
//!   `pg_locks` whether the guard's own backend still holds the key. A session the server
//!   killed, or any error, is reported as `Lost` and the worker gives up leadership, so a
//!   killed session cannot leave two leaders.
//! - **Transaction-mode poolers are refused.** Behind PgBouncer in transaction mode, each
//!   statement may run on another server session, and session locks silently stop meaning
//!   anything. Every new session is probed (a session setting written by one statement must be
//!   read back by the next, on the same backend pid; and a second, short-lived connection
//!   must be served by another backend — a quiet transaction-mode pooler passes the first
//!   check but hands the second connection the same idle server) and every lock statement
//!   checks the backend pid; a mismatch is an `Unsupported` error naming the pooler. Tested
//!   against a real PgBouncer in both modes (`relayer` `tests/pgbouncer.rs`).
//!
//! - **Cancel-safe.** A `try_lock` or `release` future dropped mid-statement drops the session
//!   it was using, which closes it; a lock it may have taken is freed with it.
//!
//! In the steady state an acquire and a release are one round trip each, on prepared
//! statements. Sessions are named by the `Config`'s `application_name` (default
//! `relayer-advisory-lock`), and events are logged under the tracing target `relayer::lock`.
//!
//! # The key
//!
//! The key of a resource is computed by [`relayer_core::advisory_lock_key`], and every
//! relayer version — and anything in another language that must exclude relayer — has to
//! compute the same: a change lets two replicas lead at once during a rolling deploy.
//!
//! 1. Take the bytes `relayer:` followed by the UTF-8 bytes of the resource name.
//! 2. Hash them with SHA-1.
//! 3. Read the first 8 bytes of the digest as a big-endian two's-complement signed 64-bit
//!    integer.
//!
//! Worked example, resource `cleanup`:
//!
//! | step | value |
//! |---|---|
//! | input | `relayer:cleanup` (15 bytes) |
//! | SHA-1 | `8babcb85e9d5a4e9605e592c677d7925daf77141` |
//! | first 8 bytes | `8babcb85e9d5a4e9` |
//! | as i64 | `-8382382505405864727` |
//!
//! (`sweeper` gives `1d2f672dd1802a57…` → `2103012997491337815`.) In Python:
//! `struct.unpack(">q", hashlib.sha1(b"relayer:" + name.encode()).digest()[:8])[0]`; in
//! PostgreSQL, from the hex of the first 8 bytes: `('x' || '8babcb85e9d5a4e9')::bit(64)::bigint`.
//!
//! While held, the lock shows in `pg_locks` with `locktype = 'advisory'`, `objsubid = 1`,
//! `classid` = the key's high 32 bits and `objid` = its low 32 bits (both unsigned; for
//! `cleanup`: 2343291781 and 3923092713). The key is `(classid::int8 << 32) | objid::int8`:
//!
//! ```sql
//! SELECT pid, (classid::int8 << 32) | objid::int8 AS key
//! FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted;
//! ```
#![deny(missing_docs)]

mod guard;
mod lock;
mod session;
mod shared;

pub use lock::{DEFAULT_CALL_TIMEOUT, PgAdvisoryLock};

/// The tracing target of every event this crate logs.
pub(crate) const TARGET: &str = "relayer::lock";
