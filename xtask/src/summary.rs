//! Reading pass/fail counts from the summary lines of nextest and libtest.

use std::ops::AddAssign;

/// Tests passed and failed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
}

impl AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
    }
}

/// Sums nextest's final `Summary [..] N tests run: A passed, B failed, C skipped` lines.
/// Timed-out and exec-failed tests count as failed.
pub(crate) fn nextest(output: &str) -> Counts {
    let mut counts = Counts::default();
    for line in output.lines().map(strip_ansi) {
        let line = line.trim_start();
        if !line.starts_with("Summary [") {
            continue;
        }
        let Some((_, results)) = line.split_once(':') else { continue };
        for part in results.split(',') {
            let part = part.trim();
            let Some((number, what)) = part.split_once(' ') else { continue };
            let Ok(number) = number.parse::<u64>() else { continue };
            if what.starts_with("passed") {
                counts.passed += number;
            } else if what.starts_with("failed")
                || what.starts_with("timed out")
                || what.starts_with("exec failed")
            {
                counts.failed += number;
            }
        }
    }
    counts
}

/// Sums libtest's `test result: ok. A passed; B failed; …` lines (one per test binary and
/// one per doctest run).
pub(crate) fn libtest(output: &str) -> Counts {
    let mut counts = Counts::default();
    for line in output.lines().map(strip_ansi) {
        let Some(rest) = line.trim_start().strip_prefix("test result: ") else { continue };
        let Some((_, results)) = rest.split_once(". ") else { continue };
        for part in results.split(';') {
            let mut words = part.split_whitespace();
            let (Some(number), Some(what)) = (words.next(), words.next()) else { continue };
            let Ok(number) = number.parse::<u64>() else { continue };
            match what {
                "passed" => counts.passed += number,
                "failed" => counts.failed += number,
                _ => {}
            }
        }
    }
    counts
}

/// Removes terminal colour sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_summaries_count_passes_and_every_kind_of_failure() {
        let output = "\
        PASS [   0.010s] relayer-core tests::a
------------
     Summary [   1.234s] 12 tests run: 9 passed (1 slow), 2 failed, 1 timed out, 3 skipped
        FAIL [   0.020s] relayer-core tests::b
";
        assert_eq!(nextest(output), Counts { passed: 9, failed: 3 });
        let coloured = "\u{1b}[32;1m     Summary\u{1b}[0m [   0.5s] \u{1b}[1m1\u{1b}[0m test run: \u{1b}[1m1\u{1b}[0m \u{1b}[32;1mpassed\u{1b}[0m, \u{1b}[1m0\u{1b}[0m skipped";
        assert_eq!(nextest(coloured), Counts { passed: 1, failed: 0 });
        assert_eq!(nextest("error: could not compile"), Counts::default());
    }

    #[test]
    fn libtest_results_are_summed_over_binaries_and_doctests() {
        let output = "\
test result: ok. 7 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.21s
test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";
        assert_eq!(libtest(output), Counts { passed: 10, failed: 2 });
    }
}
