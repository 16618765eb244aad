//! Human output helpers: short ages, dashes for what is absent, JSON. Tables are in
//! [`crate::table`].

use std::time::Duration;

/// A short age: `850ms`, `12.5s`, `3m04s`, `2h05m`, `3d04h`.
pub(crate) fn age(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => format!("{}ms", duration.as_millis()),
        1..60 => format!("{:.1}s", duration.as_secs_f64()),
        60..3_600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3_600..86_400 => format!("{}h{:02}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

/// An optional age, `-` when absent.
pub(crate) fn maybe_age(duration: Option<Duration>) -> String {
    duration.map_or_else(|| "-".to_owned(), age)
}

/// An optional value, `-` when absent.
pub(crate) fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Seconds as a JSON number (with millisecond precision).
pub(crate) fn seconds(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Prints `value` as pretty JSON on standard output.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_short() {
        assert_eq!(age(Duration::from_millis(850)), "850ms");
        assert_eq!(age(Duration::from_millis(12_500)), "12.5s");
        assert_eq!(age(Duration::from_secs(184)), "3m04s");
        assert_eq!(age(Duration::from_secs(7_500)), "2h05m");
        assert_eq!(age(Duration::from_secs(3 * 86_400 + 4 * 3_600)), "3d04h");
    }
}
