//! Tests that skipped themselves because a broker was not reachable.
//!
//! The broker-transport tests never pass silently without their broker: each appends
//! `SKIPPED <test>: <reason>` to the file named by `RELAYER_SKIP_LOG` (see
//! `relayer-test-support`'s `broker_or_skip`). The test suite points that variable at a
//! fresh file and prints a summary line from it at the end.

use std::path::PathBuf;
use std::process::Command;

/// A fresh skip log for one test-suite run.
pub(crate) struct SkipLog {
    path: PathBuf,
}

impl SkipLog {
    pub(crate) fn new() -> SkipLog {
        let path = std::env::temp_dir().join(format!("relayer-skipped-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        SkipLog { path }
    }

    /// Makes `command`'s tests report skips into this log.
    pub(crate) fn attach(&self, mut command: Command) -> Command {
        command.env("RELAYER_SKIP_LOG", &self.path);
        command
    }

    /// The skip lines, sorted and without duplicates.
    pub(crate) fn lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut lines: Vec<String> =
            text.lines().filter(|l| l.starts_with("SKIPPED ")).map(str::to_owned).collect();
        lines.sort();
        lines.dedup();
        lines
    }

    /// The summary: `tests skipped (broker or browser missing): N`, then one line per skipped test.
    pub(crate) fn summary(&self) -> String {
        let lines = self.lines();
        let mut summary = format!("tests skipped (broker or browser missing): {}", lines.len());
        for line in lines {
            summary.push_str("\n  ");
            summary.push_str(&line);
        }
        summary
    }
}

impl Drop for SkipLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_each_skipped_test_once_tst_1() {
        let log = SkipLog::new();
        assert_eq!(log.summary(), "tests skipped (broker or browser missing): 0");
        let lines = "SKIPPED b: NATS not reachable at x\nother output\nSKIPPED a: RabbitMQ not reachable at y\n\
                     SKIPPED b: NATS not reachable at x\n";
        std::fs::write(&log.path, lines).expect("write the log");
        assert_eq!(
            log.summary(),
            "tests skipped (broker or browser missing): 2\n  SKIPPED a: RabbitMQ not reachable at y\n  SKIPPED b: NATS not reachable at x"
        );
    }
}
