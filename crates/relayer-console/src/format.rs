//! Ages and counts as an operator reads them.

use std::time::Duration;

/// `1d 2h`, `3h 4m`, `5m 6s`, `7.2s`, `0.35s`: two units at most.
pub(crate) fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 86_400 {
        format!("{}d {}h", s / 86_400, s % 86_400 / 3_600)
    } else if s >= 3_600 {
        format!("{}h {}m", s / 3_600, s % 3_600 / 60)
    } else if s >= 60 {
        format!("{}m {}s", s / 60, s % 60)
    } else if s >= 10 {
        format!("{s}s")
    } else {
        format!("{:.2}s", d.as_secs_f64())
    }
}

/// [`age`], or `-`.
pub(crate) fn maybe_age(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), age)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_two_units() {
        assert_eq!(age(Duration::from_millis(350)), "0.35s");
        assert_eq!(age(Duration::from_secs(42)), "42s");
        assert_eq!(age(Duration::from_secs(3_725)), "1h 2m");
        assert_eq!(age(Duration::from_secs(90_000)), "1d 1h");
        assert_eq!(maybe_age(None), "-");
    }
}
