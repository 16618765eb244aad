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
        find_on_path(program).is_some()
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
/// skip log when `RELAYER_SKIP_LOG` names one: for any test that cannot run on this machine
/// (a broker, a browser), so `cargo xtask ci` names it in its summary.
pub fn report_skip(test: &str, reason: &str) {
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
/// starts it again and waits until it answers. Should the test end first, dropping this
/// starts it again (bounded); should the process die, a detached watchdog started with the
/// stop does, two minutes on. No test leaves the broker down for the others.
#[derive(Debug)]
#[must_use = "dropping it starts the broker again at once"]
pub struct StoppedRabbitMq {
    ctl: std::path::PathBuf,
    /// The watchdog's process (its own process group): killed once started again.
    watchdog: Option<u32>,
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
            start_app_bounded(&self.ctl);
        }
        if let Some(watchdog) = self.watchdog {
            // Its whole process group: the shell and its sleep.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", "--", &format!("-{watchdog}")])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// `rabbitmqctl start_app` from a destructor: waits at most a minute, then says loudly that
/// the broker was left stopped.
fn start_app_bounded(ctl: &Path) {
    let child = std::process::Command::new(ctl)
        .arg("start_app")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let started = match child {
        Ok(mut child) => {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => break status.success(),
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    _ => {
                        let _ = child.kill();
                        break false;
                    }
                }
            }
        }
        Err(_) => false,
    };
    if !started {
        let _ = writeln!(
            std::io::stderr().lock(),
            "BROKER LEFT STOPPED: `{} start_app` failed; the watchdog retries within two minutes",
            ctl.display()
        );
    }
}

/// Stops the local RabbitMQ's application (`rabbitmqctl stop_app`) for a real restart, when
/// asked to and able to: `RELAYER_RABBITMQ_RESTART=1` (set by `.ci/run`: stopping the
/// machine's broker would break any other RabbitMQ test running on it, so a developer's
/// run does not do it unasked), no `RELAYER_RABBITMQ_ADDR` naming another broker, and
/// `rabbitmqctl` installed. Otherwise reports `test` as skipped by name (as
/// [`broker_or_skip`] does) and returns `None`; under CI with the restart asked for, a
/// broker that cannot be stopped is a failure instead. Tests that stop the broker must not
/// run beside other RabbitMQ tests of the same run: the workspace's nextest configuration
/// runs the RabbitMQ test binary one test at a time.
pub async fn stop_rabbitmq_or_skip(test: &str) -> Option<StoppedRabbitMq> {
    if std::env::var("RELAYER_RABBITMQ_RESTART").as_deref() != Ok("1") {
        report_skip(
            test,
            "a real broker restart runs only with RELAYER_RABBITMQ_RESTART=1 (.ci/run sets it)",
        );
        return None;
    }
    if std::env::var_os("RELAYER_RABBITMQ_ADDR").is_some() {
        // A broker chosen elsewhere on purpose: a skip, even under CI.
        report_skip(test, "RELAYER_RABBITMQ_ADDR names a broker this process cannot restart");
        return None;
    }
    let refuse = |reason: String| {
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {reason}, but CI asked for a real broker restart");
        }
        report_skip(test, &reason);
        None
    };
    let Some(ctl) = find_on_path("rabbitmqctl") else {
        return refuse("rabbitmqctl is not installed: the broker cannot be restarted".to_owned());
    };
    // The watchdog first, then the guard, then the stop: from here on every way out —
    // a failed stop, a panic, a killed process — starts the broker again.
    let watchdog = std::process::Command::new("setsid")
        .args(["sh", "-c", "sleep 120; exec \"$0\" start_app"])
        .arg(&ctl)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
        .map(|child| child.id());
    let stopped = StoppedRabbitMq { ctl, watchdog, started: false };
    match rabbitmqctl(&stopped.ctl, "stop_app").await {
        Ok(()) => Some(stopped),
        Err(error) => refuse(error), // `stopped` drops: start_app, in case it half stopped
    }
}

/// `program` in `PATH` or in the system directories a broker's tools live in.
fn find_on_path(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/lib/rabbitmq/bin"])
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| candidate.is_file())
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

/// A nats-server of a test's own on a free loopback port (no JetStream), started with extra
/// arguments — e.g. `--user`/`--pass` or `--auth` to require credentials — and killed on
/// drop. The shared server is never reconfigured.
#[derive(Debug)]
pub struct OwnNatsServer {
    child: tokio::process::Child,
    address: SocketAddr,
}

impl OwnNatsServer {
    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for OwnNatsServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Starts a nats-server of `test`'s own with `args` and waits until it accepts
/// connections; without `nats-server` installed, reports `test` as skipped by name and
/// returns `None`.
pub async fn own_nats_server_or_skip(test: &str, args: &[&str]) -> Option<OwnNatsServer> {
    let Some(program) = find_on_path("nats-server") else {
        report_skip(test, "nats-server is not installed: a server of the test's own cannot start");
        return None;
    };
    // A port the kernel just handed out and took back: free unless raced for.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let child = tokio::process::Command::new(program)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start nats-server");
    let server = OwnNatsServer { child, address };
    crate::eventually("the test's own nats-server accepts connections", || async {
        tokio::net::TcpStream::connect(address).await.is_ok()
    })
    .await;
    Some(server)
}
