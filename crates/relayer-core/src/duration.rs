//! Human durations and retentions, as written in configuration (OPT-2, RET-3).
//!
//! A duration is one or more `<whole number><unit>` parts with no spaces, units from the
//! largest to the smallest and each at most once: `d` (24 hours), `h`, `m`, `s`, `ms`,
//! `us`, `ns`. So `250ms`, `30s`, `5m`, `7d`, `1h30m` and `0s` are durations; `30`,
//! `1.5h`, `-5s`, `5 m`, `5min` and `30m1h` are not, and are refused with an error that
//! quotes the input. Formatting writes the canonical form — largest units first, zero
//! parts left out, `0s` for zero — so formatting then parsing gives back exactly the same
//! [`Duration`] (`90s` formats as `1m30s`). A [`Retention`] is either such a duration or
//! the word `infinite` (in code, [`Retention::Keep`] or `None`).
//!
//! Options use [`HumanDuration`] (or the [`human`] serde adapter on a plain `Duration`
//! field) so that they serialize back to the strings a person wrote.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// Every unit, largest first, with its length in nanoseconds. Parsing requires this order;
/// formatting follows it.
const UNITS: [(&str, u128); 7] = [
    ("d", 86_400 * NANOS_PER_SECOND),
    ("h", 3_600 * NANOS_PER_SECOND),
    ("m", 60 * NANOS_PER_SECOND),
    ("s", NANOS_PER_SECOND),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

const UNIT_LIST: &str = "d, h, m, s, ms, us or ns";

/// The configuration word for a retention that never deletes (RET-3).
pub const INFINITE: &str = "infinite";

/// Parses a human duration such as `30s`, `5m`, `7d` or `1h30m`.
///
/// ```
/// use std::time::Duration;
/// use relayer_core::duration::parse_duration;
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// let error = parse_duration("1.5h").unwrap_err();
/// assert!(error.to_string().starts_with(r#"invalid duration "1.5h""#));
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let refuse = |reason: String| DurationError { what: "duration", input: input.to_owned(), reason };
    if input.is_empty() {
        return Err(refuse("it is empty".to_owned()));
    }
    let mut rest = input;
    let mut total_nanos: u128 = 0;
    let mut previous_unit: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(refuse(format!("expected a whole number at {rest:?}")));
        }
        let (number, after_number) = rest.split_at(digits);
        let letters = after_number.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after_unit) = after_number.split_at(letters);
        if after_number.starts_with(['.', ',']) {
            return Err(refuse("fractions are not allowed; combine units instead, e.g. 1h30m".to_owned()));
        }
        if unit.is_empty() {
            return Err(refuse(format!("{number} has no unit; use {UNIT_LIST}")));
        }
        let Some(rank) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(refuse(format!("unknown unit {unit:?}; use {UNIT_LIST}")));
        };
        if let Some(previous) = previous_unit.filter(|previous| rank <= *previous) {
            return Err(refuse(format!(
                "{unit:?} after {:?}: units go from the largest to the smallest, each at most once",
                UNITS[previous].0
            )));
        }
        let too_long = || refuse("it is longer than the longest representable duration".to_owned());
        // More digits than a u128 holds is simply too long.
        let count: u128 = number.parse().map_err(|_| too_long())?;
        total_nanos = count
            .checked_mul(UNITS[rank].1)
            .and_then(|nanos| total_nanos.checked_add(nanos))
            .ok_or_else(too_long)?;
        previous_unit = Some(rank);
        rest = after_unit;
    }
    duration_from_nanos(total_nanos)
        .ok_or_else(|| refuse("it is longer than the longest representable duration".to_owned()))
}

/// Formats `duration` in its canonical human form: `0s`, `250ms`, `1m30s`, `7d`, …
///
/// ```
/// use std::time::Duration;
/// use relayer_core::duration::format_duration;
/// assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
/// assert_eq!(format_duration(Duration::ZERO), "0s");
/// ```
pub fn format_duration(duration: Duration) -> String {
    HumanDuration(duration).to_string()
}

/// A `Duration` that displays, parses and serializes in the human form (`30s`, `7d`).
///
/// Useful in logs (`%HumanDuration(wait)`) and as a configuration field type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut remaining = self.0.as_nanos();
        if remaining == 0 {
            return f.write_str("0s");
        }
        for (unit, length) in UNITS {
            let count = remaining / length;
            if count > 0 {
                write!(f, "{count}{unit}")?;
                remaining %= length;
            }
        }
        Ok(())
    }
}

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse_duration(input).map(HumanDuration)
    }
}

impl From<Duration> for HumanDuration {
    fn from(duration: Duration) -> Self {
        HumanDuration(duration)
    }
}

impl From<HumanDuration> for Duration {
    fn from(duration: HumanDuration) -> Self {
        duration.0
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A serde adapter for a plain `Duration` field written as a human string:
/// `#[serde(with = "relayer_core::duration::human")]`.
pub mod human {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::HumanDuration;

    /// Serializes `duration` as its canonical human string.
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        HumanDuration(*duration).serialize(serializer)
    }

    /// Deserializes a human string such as `"30s"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        HumanDuration::deserialize(deserializer).map(|duration| duration.0)
    }
}

/// How long rows of a table are kept (RET-2, RET-3).
///
/// Configuration writes a duration (`"30d"`) or `"infinite"`; code may convert from
/// `Option<Duration>`, where `None` keeps rows forever.
///
/// ```
/// use std::time::Duration;
/// use relayer_core::duration::Retention;
/// assert_eq!("infinite".parse::<Retention>().unwrap(), Retention::Keep);
/// assert_eq!(Retention::from(Some(Duration::from_secs(86_400))).to_string(), "1d");
/// assert_eq!(Retention::from(None), Retention::Keep);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Retention {
    /// Never delete by age (`infinite` in configuration, `None` in code).
    Keep,
    /// Delete rows strictly older than this.
    After(Duration),
}

impl Retention {
    /// The retention period; `None` when rows are kept forever.
    pub const fn duration(self) -> Option<Duration> {
        match self {
            Retention::Keep => None,
            Retention::After(duration) => Some(duration),
        }
    }
}

impl From<Option<Duration>> for Retention {
    fn from(duration: Option<Duration>) -> Self {
        duration.map_or(Retention::Keep, Retention::After)
    }
}

impl From<Retention> for Option<Duration> {
    fn from(retention: Retention) -> Self {
        retention.duration()
    }
}

/// `infinite` or the canonical human duration.
impl fmt::Display for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retention::Keep => f.write_str(INFINITE),
            Retention::After(duration) => HumanDuration(*duration).fmt(f),
        }
    }
}

impl FromStr for Retention {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input == INFINITE {
            return Ok(Retention::Keep);
        }
        parse_duration(input).map(Retention::After).map_err(|error| DurationError {
            what: "retention",
            reason: format!("{}; or {INFINITE:?} to keep rows forever", error.reason),
            input: error.input,
        })
    }
}

impl Serialize for Retention {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A string that is not a human duration (or retention). The message quotes the input
/// and says what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {reason} (write e.g. \"250ms\", \"30s\", \"1h30m\" or \"7d\")")]
pub struct DurationError {
    what: &'static str,
    input: String,
    reason: String,
}

impl DurationError {
    /// The refused input, as given.
    pub fn input(&self) -> &str {
        &self.input
    }
}

/// `nanos` as a `Duration`, or `None` beyond `Duration::MAX`.
pub(crate) fn duration_from_nanos(nanos: u128) -> Option<Duration> {
    let seconds = u64::try_from(nanos / NANOS_PER_SECOND).ok()?;
    let subsecond = u32::try_from(nanos % NANOS_PER_SECOND).ok()?;
    Some(Duration::new(seconds, subsecond))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn parses_every_unit_and_combinations() {
        let cases = [
            ("0s", Duration::ZERO),
            ("0d", Duration::ZERO),
            ("250ms", Duration::from_millis(250)),
            ("30s", secs(30)),
            ("5m", secs(300)),
            ("2h", secs(7_200)),
            ("7d", secs(7 * 86_400)),
            ("1h30m", secs(5_400)),
            ("90s", secs(90)),
            ("1d2h3m4s5ms6us7ns", Duration::new(93_784, 5_006_007)),
            ("007s", secs(7)),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_duration(input), Ok(expected), "{input}");
        }
    }

    #[test]
    fn refuses_anything_else_quoting_the_input() {
        let cases = [
            ("", "it is empty"),
            ("30", "30 has no unit"),
            ("1.5h", "fractions are not allowed"),
            ("-5s", "expected a whole number at \"-5s\""),
            ("5 m", "5 has no unit"),
            (" 5m", "expected a whole number"),
            ("5m ", "expected a whole number at \" \""),
            ("5min", "unknown unit \"min\""),
            ("5M", "unknown unit \"M\""),
            ("30m1h", "\"h\" after \"m\": units go from the largest to the smallest"),
            ("1s1s", "\"s\" after \"s\""),
            ("s", "expected a whole number at \"s\""),
            ("99999999999999999999999999999999999999999d", "longer than the longest"),
            ("213503982334602d", "longer than the longest"),
        ];
        for (input, reason) in cases {
            let error = parse_duration(input).unwrap_err();
            let message = error.to_string();
            assert!(message.starts_with(&format!("invalid duration {input:?}: ")), "{message}");
            assert!(message.contains(reason), "{input:?}: {message}");
            assert_eq!(error.input(), input);
        }
    }

    #[test]
    fn formats_the_canonical_form() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (secs(90), "1m30s"),
            (secs(5_400), "1h30m"),
            (secs(30 * 86_400), "30d"),
            (Duration::new(1, 1), "1s1ns"),
            (Duration::MAX, "213503982334601d7h15s999ms999us999ns"),
        ];
        for (duration, expected) in cases {
            assert_eq!(format_duration(duration), expected);
            assert_eq!(parse_duration(expected), Ok(duration), "{expected}");
        }
    }

    #[test]
    fn retention_reads_infinite_and_durations() {
        assert_eq!("infinite".parse(), Ok(Retention::Keep));
        assert_eq!("30d".parse(), Ok(Retention::After(secs(30 * 86_400))));
        assert_eq!(Retention::Keep.to_string(), "infinite");
        assert_eq!(Retention::from(Some(secs(60))), Retention::After(secs(60)));
        assert_eq!(Option::<Duration>::from(Retention::Keep), None);
        let message = "forever".parse::<Retention>().unwrap_err().to_string();
        assert!(message.starts_with("invalid retention \"forever\": "), "{message}");
        assert!(message.contains("\"infinite\""), "{message}");
        assert!("Infinite".parse::<Retention>().is_err());
    }

    #[test]
    fn serde_uses_human_strings() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Settings {
            #[serde(with = "human")]
            interval: Duration,
            retention: Retention,
            keep: Retention,
            wait: HumanDuration,
        }
        let settings = Settings {
            interval: secs(5),
            retention: Retention::After(secs(7 * 86_400)),
            keep: Retention::Keep,
            wait: HumanDuration(Duration::from_millis(1_500)),
        };
        let json = serde_json::to_string(&settings).unwrap();
        assert_eq!(json, r#"{"interval":"5s","retention":"7d","keep":"infinite","wait":"1s500ms"}"#);
        assert_eq!(serde_json::from_str::<Settings>(&json).unwrap(), settings);
        let error = serde_json::from_str::<Settings>(
            r#"{"interval":5,"retention":"7d","keep":"infinite","wait":"1s"}"#,
        )
        .unwrap_err();
        assert!(error.to_string().contains("expected a string"), "{error}");
    }
}
