//! Ratios to trust on a noisy machine: every ratio a benchmark reports is the median of
//! at least [`MIN_ROUNDS`] interleaved rounds (the raw run and relayer's alternating, so
//! both share each moment's load), printed with its min–max.

use std::fmt;

/// The fewest rounds any ratio is the median of, quick runs included.
pub(crate) const MIN_ROUNDS: usize = 5;

/// Rounds per ratio: [`MIN_ROUNDS`] in a quick run, more in a full one.
/// `RELAYER_BENCH_ROUNDS` raises it (never below [`MIN_ROUNDS`]).
pub(crate) fn rounds(quick: bool) -> usize {
    let default = if quick { MIN_ROUNDS } else { 7 };
    std::env::var("RELAYER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(default)
        .max(MIN_ROUNDS)
}

/// One figure's samples over the rounds: its median and its range.
#[derive(Clone, Debug, Default)]
pub(crate) struct Spread {
    samples: Vec<f64>,
}

impl Spread {
    /// Adds one round's sample.
    pub(crate) fn push(&mut self, sample: f64) {
        self.samples.push(sample);
    }

    fn sorted(&self) -> Vec<f64> {
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
    }

    /// The median (the upper one of an even count); NaN without samples.
    pub(crate) fn median(&self) -> f64 {
        let sorted = self.sorted();
        sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// The smallest and the largest sample; NaN without samples.
    pub(crate) fn range(&self) -> (f64, f64) {
        let sorted = self.sorted();
        (sorted.first().copied().unwrap_or(f64::NAN), sorted.last().copied().unwrap_or(f64::NAN))
    }

    /// The median with its range and round count, rates rounded to whole numbers.
    pub(crate) fn rate(&self) -> String {
        let (min, max) = self.range();
        format!("{:.0} ({min:.0}–{max:.0})", self.median())
    }
}

/// `median (min–max, n rounds)`, two decimals: how every ratio is printed.
impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (min, max) = self.range();
        write!(f, "{:.2} ({min:.2}–{max:.2}, {} rounds)", self.median(), self.samples.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range_ignore_the_order_of_rounds() {
        let mut spread = Spread::default();
        for sample in [0.8, 0.56, 0.72, 0.9, 0.7] {
            spread.push(sample);
        }
        assert!((spread.median() - 0.72).abs() < 1e-9);
        assert_eq!(spread.range(), (0.56, 0.9));
        assert_eq!(spread.to_string(), "0.72 (0.56–0.90, 5 rounds)");
    }

    #[test]
    fn no_samples_is_nan_not_a_panic() {
        assert!(Spread::default().median().is_nan());
    }

    #[test]
    fn quick_runs_still_take_five_rounds() {
        assert!(rounds(true) >= MIN_ROUNDS);
        assert!(rounds(false) >= MIN_ROUNDS);
    }
}
