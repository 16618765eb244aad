//! Ages as the status queries read them: SQL that measures the microseconds since a column's
//! timestamp, and the duration those microseconds make.

use std::time::Duration;

/// SQL for the microseconds from `at` to now, as `int8`.
pub(crate) fn micros_since(at: &str) -> String {
    format!("(extract(epoch FROM now() - {at}) * 1e6)::int8")
}

/// A non-negative duration from microseconds (clamped at zero).
pub(crate) fn duration_from_micros(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}
