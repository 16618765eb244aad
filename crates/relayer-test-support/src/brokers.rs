//! The message brokers of the broker-transport tests, and the rule that such a test never
//! passes silently without one.
//!
//! A test that needs NATS or RabbitMQ asks [`broker_or_skip`] first. When the broker
//! answers, it gets the address. When it does not, the test is **skipped by name, loudly**:
//! `SKIPPED <test>: <broker> not reachable at <address>` is written straight to the
//! process's stderr (past the test harness's output capture) and appended to the file
//! named by `RELAYER_SKIP_LOG` when set (`cargo xtask ci` sets it and prints a summary of
//! skipped broker tests), and the test returns. Under CI (`CI` set) a broker that is
//! installed on the machine but does not answer is a failure, not a skip: `.ci/run` starts
//! it, so silence means something broke.
//!
//! Addresses: `RELAYER_NATS_ADDR` (default `127.0.0.1:4222`) and `RELAYER_RABBITMQ_ADDR`
//! (default `127.0.0.1:5672`, user guest/guest).

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// A broker the transport tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broker {
    /// NATS with JetStream.
    Nats,
    /// RabbitMQ (AMQP 0-9-1), user guest/guest.
    RabbitMq,
}

impl Broker {
    fn name(self) -> &'static str {
        match self {
            Broker::Nats => "NATS",
            Broker::RabbitMq => "RabbitMQ",
        }
    }

    fn address(self) -> String {
        let (variable, default) = match self {
            Broker::Nats => ("RELAYER_NATS_ADDR", "127.0.0.1:4222"),
            Broker::RabbitMq => ("RELAYER_RABBITMQ_ADDR", "127.0.0.1:5672"),
        };
        std::env::var(variable).unwrap_or_else(|_| default.to_owned())
    }

    /// Whether the broker's server program is installed here (so CI can start it).
    fn installed(self) -> bool {
        let program = match self {
            Broker::Nats => "nats-server",
            Broker::RabbitMq => "rabbitmq-server",
        };
        let path = std::env::var("PATH").unwrap_or_default();
        path.split(':')
            .chain(["/usr/sbin", "/usr/local/sbin", "/usr/lib/rabbitmq/bin"])
            .any(|dir| Path::new(dir).join(program).is_file())
    }
}

/// The broker's address when it answers; otherwise reports `test` as skipped (see the
/// module docs) and returns `None`. Panics instead under CI when the broker is installed.
pub async fn broker_or_skip(broker: Broker, test: &str) -> Option<SocketAddr> {
    let address = broker.address();
    let reachable =
        match tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(address.as_str()))
            .await
        {
            Ok(Ok(stream)) => stream.peer_addr().ok(),
            Ok(Err(_)) | Err(_) => None,
        };
    if reachable.is_some() {
        return reachable;
    }
    let reason = format!("{} not reachable at {address}", broker.name());
    if std::env::var_os("CI").is_some() && broker.installed() {
        panic!("{test}: {reason}, but it is installed and CI is set: .ci/run should have started it");
    }
    report_skip(test, &reason);
    None
}

/// Writes `SKIPPED <test>: <reason>` to stderr, past the harness's capture, and to the
/// skip log when `RELAYER_SKIP_LOG` names one.
fn report_skip(test: &str, reason: &str) {
    let line = format!("SKIPPED {test}: {reason}\n");
    // `std::io::stderr()` writes to the file descriptor; only `eprintln!` is captured.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("RELAYER_SKIP_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = appended {
            let _ = writeln!(std::io::stderr().lock(), "cannot append to RELAYER_SKIP_LOG {path:?}: {error}");
        }
    }
}

/// The local RabbitMQ's application, stopped by [`stop_rabbitmq_or_skip`]: every
/// connection closed and new ones refused, as in a broker restart. [`start`](Self::start)
/// starts it again and waits until it answers; if the test ends first (a failed assertion),
/// dropping this starts it again, so no test leaves the broker down for the others.
#[derive(Debug)]
pub struct StoppedRabbitMq {
    ctl: std::path::PathBuf,
    started: bool,
}

impl StoppedRabbitMq {
    /// Starts the application again (`rabbitmqctl start_app`) and waits until the broker
    /// accepts connections.
    pub async fn start(mut self) {
        rabbitmqctl(&self.ctl, "start_app").await.unwrap_or_else(|error| panic!("{error}"));
        self.started = true;
        let address = Broker::RabbitMq.address();
        crate::eventually("RabbitMQ accepts connections after start_app", || async {
            tokio::net::TcpStream::connect(address.as_str()).await.is_ok()
        })
        .await;
    }
}

impl Drop for StoppedRabbitMq {
    fn drop(&mut self) {
        if !self.started {
            let _ = std::process::Command::new(&self.ctl).arg("start_app").status();
        }
    }
}

/// Stops the local RabbitMQ's application (`rabbitmqctl stop_app`) for a real restart, when
/// this process may: a broker on the default local address and `rabbitmqctl` installed
/// and answering. Otherwise reports `test` as skipped by name (as [`broker_or_skip`] does)
/// and returns `None` — under CI, with RabbitMQ installed here and no
/// `RELAYER_RABBITMQ_ADDR` naming another, a failure instead. Tests that
/// stop the broker must not run beside other RabbitMQ tests: the workspace's nextest
/// configuration runs that test binary one test at a time.
pub async fn stop_rabbitmq_or_skip(test: &str) -> Option<StoppedRabbitMq> {
    let refuse = |reason: String| {
        if std::env::var_os("CI").is_some() && Broker::RabbitMq.installed() {
            panic!("{test}: {reason}, but RabbitMQ is installed and CI is set");
        }
        report_skip(test, &reason);
        None
    };
    if std::env::var_os("RELAYER_RABBITMQ_ADDR").is_some() {
        // A broker chosen elsewhere on purpose: a skip, even under CI.
        report_skip(test, "RELAYER_RABBITMQ_ADDR names a broker this process cannot restart");
        return None;
    }
    let Some(ctl) = ["/usr/sbin", "/usr/local/sbin", "/usr/lib/rabbitmq/bin"]
        .iter()
        .map(|dir| Path::new(dir).join("rabbitmqctl"))
        .find(|path| path.is_file())
    else {
        return refuse("rabbitmqctl is not installed: the broker cannot be restarted".to_owned());
    };
    match rabbitmqctl(&ctl, "stop_app").await {
        Ok(()) => Some(StoppedRabbitMq { ctl, started: false }),
        Err(error) => refuse(error),
    }
}

/// Runs `rabbitmqctl <command>`, bounded, with its output in the error.
async fn rabbitmqctl(ctl: &Path, command: &str) -> Result<(), String> {
    let run = tokio::process::Command::new(ctl).arg(command).kill_on_drop(true).output();
    match tokio::time::timeout(Duration::from_secs(60), run).await {
        Ok(Ok(output)) if output.status.success() => Ok(()),
        Ok(Ok(output)) => Err(format!(
            "rabbitmqctl {command} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Ok(Err(error)) => Err(format!("cannot run rabbitmqctl {command}: {error}")),
        Err(_) => Err(format!("rabbitmqctl {command} did not finish within 60 s")),
    }
}
