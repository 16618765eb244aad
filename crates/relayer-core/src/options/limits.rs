//! The bounds every worker option is checked against, and the units the defaults are
//! written in.

use std::time::Duration;

#[cfg(doc)]
use crate::duration::Retention;

/// The largest batch any worker reads or deletes in one statement.
pub const MAX_BATCH_SIZE: u32 = 10_000;

/// The longest interval, backoff, budget or delay: 49 days, just under 2³² milliseconds,
/// beyond which millisecond timers and PostgreSQL's `int4` millisecond settings overflow.
pub const MAX_INTERVAL: Duration = Duration::from_secs(49 * 86_400);

/// The shortest lease or claim duration: anything shorter expires during a normal pass.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// The longest lease or claim duration: after a crash, work waits this long at most.
pub const MAX_LEASE: Duration = Duration::from_secs(3_600);

/// The longest a woken dispatcher loop may wait to gather commits into one batch.
pub const MAX_LINGER: Duration = SECOND;

/// The most unordered pass loops one dispatcher runs side by side.
pub const MAX_CONCURRENCY: u32 = 64;

/// The send deadline of a batch when `send_timeout` is not set (and the claim allows it).
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest body size limit that may be configured: 1 GiB less 1 MiB. PostgreSQL
/// stores at most 1 GiB in one value, and refuses a protocol message over 1 GiB: the
/// insert that carries the body carries its row's other columns too (headers up to 64 KiB,
/// destination, lane, trace context) and their encoding, for which the 1 MiB is kept.
pub const MAX_BODY_BYTES_LIMIT: usize = (1 << 30) - (1 << 20);

/// The most memory a dispatcher's message bodies may take at once, in bytes: 16 GiB. A
/// dispatcher holds at most `batch_size × max_body_bytes` bytes of bodies per batch, and
/// up to two batches (one sending, one claimed ahead) in each of its `concurrency`
/// unordered loops and in its lane loop: options whose product exceeds this are refused
/// when built, naming them, instead of exhausting memory on the first full batches.
pub const MAX_DISPATCH_MEMORY_BYTES: u64 = 16 << 30;

/// The longest finite retention: 36500 days (100 years). Longer cut-offs run past the
/// start of PostgreSQL's timestamps and would fail every cleanup pass; keep rows forever
/// with `infinite` ([`Retention::Keep`]) instead.
pub const MAX_RETENTION: Duration = crate::time::MAX_DATABASE_DURATION;

pub(crate) const MILLISECOND: Duration = Duration::from_millis(1);
pub(crate) const SECOND: Duration = Duration::from_secs(1);
pub(crate) const MINUTE: Duration = Duration::from_secs(60);
pub(crate) const DAY: Duration = Duration::from_secs(86_400);
