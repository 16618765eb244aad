//! Whether a message broker answers, for the `cargo xtask ci` steps that need one (the
//! `inbox` example needs NATS).
//!
//! The same rule as the broker tests (`relayer-test-support`'s `broker_or_skip`): a step
//! whose broker does not answer is **skipped by name, loudly** — a `SKIPPED <step>: …` line
//! on stderr and in the closing `ci:` line — and never counted as passed silently. Under CI
//! (`CI` set), a broker that is installed here but does not answer fails the step instead:
//! `.ci/run` starts it, so silence means something broke.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// A broker a ci step needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broker {
    /// NATS with JetStream, at `RELAYER_NATS_ADDR` (default `127.0.0.1:4222`).
    Nats,
}

/// Whether a step whose broker was checked runs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The broker answers.
    Run,
    /// It does not, and nothing says it should: skip, saying why.
    Skip(String),
}

impl Broker {
    fn name(self) -> &'static str {
        match self {
            Broker::Nats => "NATS",
        }
    }

    fn address(self) -> String {
        match self {
            Broker::Nats => {
                std::env::var("RELAYER_NATS_ADDR").unwrap_or_else(|_| "127.0.0.1:4222".to_owned())
            }
        }
    }

    fn program(self) -> &'static str {
        match self {
            Broker::Nats => "nats-server",
        }
    }

    /// Checks the broker now: run, skip, or (under CI with the broker installed) fail.
    pub(crate) fn check(self) -> Result<Verdict, String> {
        let address = self.address();
        if answers(&address) {
            return Ok(Verdict::Run);
        }
        let why = format!("{} not reachable at {address}", self.name());
        verdict(why, std::env::var_os("CI").is_some(), installed(self.program()))
    }
}

/// The verdict on a broker that did not answer.
fn verdict(why: String, under_ci: bool, installed: bool) -> Result<Verdict, String> {
    if under_ci && installed {
        Err(format!("{why}, but it is installed and CI is set: .ci/run should have started it"))
    } else {
        Ok(Verdict::Skip(why))
    }
}

/// Whether something accepts TCP connections at `address` within 3 s.
fn answers(address: &str) -> bool {
    let Ok(resolved) = address.to_socket_addrs() else { return false };
    resolved.into_iter().any(|socket| TcpStream::connect_timeout(&socket, Duration::from_secs(3)).is_ok())
}

/// Whether `program` is installed (on `PATH` or in a system directory).
fn installed(program: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':').chain(["/usr/sbin", "/usr/local/sbin"]).any(|dir| Path::new(dir).join(program).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_broker_is_a_skip_unless_ci_has_it_installed() {
        let why = || "NATS not reachable at 127.0.0.1:1".to_owned();
        assert_eq!(verdict(why(), false, true), Ok(Verdict::Skip(why())));
        assert_eq!(verdict(why(), true, false), Ok(Verdict::Skip(why())));
        let error = verdict(why(), true, true).unwrap_err();
        assert!(error.starts_with("NATS not reachable at 127.0.0.1:1, but it is installed"), "{error}");
        assert!(!answers("127.0.0.1:1"), "nothing listens on port 1");
    }
}
