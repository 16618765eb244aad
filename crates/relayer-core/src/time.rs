//! Database time as a plain value.
//!
//! Every deadline and age in relayer is measured on PostgreSQL's clock (NS-4), so the
//! pure policy in this crate never reads a clock: callers pass the database's `now()`
//! as a [`Timestamp`]. A timestamp is a count of microseconds since the Unix epoch —
//! exactly PostgreSQL's `timestamptz` resolution — so values round-trip without loss and
//! arithmetic saturates instead of panicking.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest duration relayer hands PostgreSQL as an interval from `now()`: 36500 days
/// (100 years). PostgreSQL's intervals and timestamps end; a longer one would fail the
/// statement. Options and messages refuse longer durations where the user sets them
/// (OPT-3, OUT-3); the storage layer clamps any other duration to this, so a raw API
/// value (a lease, a retry delay) means "100 years" rather than a failed pass.
pub const MAX_DATABASE_DURATION: Duration = Duration::from_secs(36_500 * 86_400);

/// A point in time on the database clock, in microseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);
    /// The earliest representable instant (PostgreSQL's `-infinity` maps here).
    pub const MIN: Timestamp = Timestamp(i64::MIN);
    /// The latest representable instant (PostgreSQL's `infinity` maps here).
    pub const MAX: Timestamp = Timestamp(i64::MAX);

    /// A timestamp from microseconds since the Unix epoch.
    pub const fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    /// Microseconds since the Unix epoch.
    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// Converts a [`SystemTime`], saturating outside the representable range.
    pub fn from_system_time(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Timestamp(i64::try_from(after.as_micros()).unwrap_or(i64::MAX)),
            Err(before) => {
                Timestamp(i64::try_from(before.duration().as_micros()).map(|m| -m).unwrap_or(i64::MIN))
            }
        }
    }

    /// Converts to a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let magnitude = Duration::from_micros(self.0.unsigned_abs());
        if self.0 >= 0 { UNIX_EPOCH + magnitude } else { UNIX_EPOCH - magnitude }
    }

    /// `self + duration`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, duration: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_micros(duration)))
    }

    /// `self - duration`, saturating at [`Timestamp::MIN`].
    pub fn saturating_sub(self, duration: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_micros(duration)))
    }

    /// How long after `earlier` this instant is; zero when it is not after it.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        let micros = self.0.saturating_sub(earlier.0);
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }
}

/// A duration in whole microseconds for a database interval
/// (`$n::int8 * interval '1 microsecond'`), at most [`MAX_DATABASE_DURATION`]: validated
/// options and messages never reach the clamp, and any other duration (a hand-built lease,
/// claim, delay or retention) means "100 years" instead of an interval or timestamp
/// PostgreSQL refuses.
pub fn database_micros(duration: Duration) -> i64 {
    duration_micros(duration.min(MAX_DATABASE_DURATION))
}

/// A duration in whole microseconds, saturating at `i64::MAX`.
pub(crate) fn duration_micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

/// RFC 3339 in UTC with microseconds, e.g. `2026-12-02T19:13:00.000001Z`.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Timestamp::MIN => return f.write_str("-infinity"),
            Timestamp::MAX => return f.write_str("infinity"),
            _ => {}
        }
        let days = self.0.div_euclid(86_400_000_000);
        let in_day = self.0.rem_euclid(86_400_000_000);
        let (year, month, day) = civil_from_days(days);
        let (secs, micros) = (in_day / 1_000_000, in_day % 1_000_000);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
/// Howard Hinnant's `civil_from_days`, valid for the whole `i64` day range we can reach.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // `day` is 1..=31 and `month` 1..=12 by construction.
    (year, u32::try_from(month).unwrap_or(1), u32::try_from(day).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_rfc3339_utc() {
        assert_eq!(Timestamp::EPOCH.to_string(), "1970-01-01T00:00:00.000000Z");
        // 2026-12-02T19:13:00.000001Z
        let t = Timestamp::from_micros(1_796_238_780_000_001);
        assert_eq!(t.to_string(), "2026-12-02T19:13:00.000001Z");
        assert_eq!(Timestamp::from_micros(-1).to_string(), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Timestamp::MAX.saturating_add(Duration::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::MIN.saturating_sub(Duration::MAX), Timestamp::MIN);
        let t = Timestamp::from_micros(10);
        assert_eq!(t.duration_since(Timestamp::from_micros(20)), Duration::ZERO);
        assert_eq!(t.duration_since(Timestamp::EPOCH), Duration::from_micros(10));
    }

    #[test]
    fn system_time_round_trips() {
        for micros in [0, 1, -1, 1_796_238_780_000_001, -62_135_596_800_000_000] {
            let t = Timestamp::from_micros(micros);
            assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
        }
    }
}
