//! `cargo xtask screenshots`: a PNG of each console page into `docs/console/`, for
//! docs/operations.md and the README.
//!
//! It runs `relayer demo --console` on a scratch schema (the demo leaves a parked lane, dead
//! rows, dead letters and a backlog, and serves the console on a free loopback port), reads
//! the address from the demo's `console: URL` line, and has headless Chromium take each page
//! (`--screenshot`); one dead letter's page is found with `--dump-dom`. Then it stops the demo
//! with SIGINT, as an operator's Ctrl-C would.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::run::{cargo, root};

/// The demo's schema for screenshots: dropped and recreated each time.
const SCHEMA: &str = "relayer_screenshots";

/// The pages: file name, path.
const PAGES: &[(&str, &str)] = &[
    ("overview.png", "/"),
    ("workers.png", "/workers"),
    ("dead-letters.png", "/dead-letters"),
    ("lanes.png", "/lanes"),
    ("doctor.png", "/doctor"),
];

/// `cargo xtask screenshots`.
pub(crate) fn screenshots(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("`screenshots` takes no arguments, got {args:?}"));
    }
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()))
        .ok_or("chromium is not installed (Debian: apt-get install chromium)")?;
    crate::postgres::ensure_local_server()?;
    let mut demo = cargo(&[
        "run",
        "-q",
        "-p",
        "relayer-cli",
        "--",
        "--schema",
        SCHEMA,
        "demo",
        "--messages",
        "200",
        "--console",
        "127.0.0.1:0",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .map_err(|e| format!("cannot start the demo: {e}"))?;
    let result = take(&mut demo, chromium);
    stop(&mut demo);
    result
}

fn take(demo: &mut Child, chromium: &str) -> Result<(), String> {
    let stdout = demo.stdout.take().ok_or("the demo's output is not piped")?;
    let mut url = None;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.map_err(|e| format!("reading the demo's output: {e}"))?;
        println!("{line}");
        if let Some(address) = line.strip_prefix("console: ") {
            url = Some(address.trim().trim_end_matches('/').to_owned());
            break;
        }
    }
    // Keep reading: a demo whose output pipe closed would fail on its next line.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|line| println!("{line}")));
    let url = url.ok_or("the demo ended without printing its console's address")?;
    let dir = root().join("docs").join("console");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Let the sampler record a few points for the chart.
    std::thread::sleep(std::time::Duration::from_secs(12));
    for (file, path) in PAGES {
        shoot(chromium, &format!("{url}{path}"), &dir.join(file))?;
    }
    let dom = browser(chromium)
        .arg("--dump-dom")
        .arg(format!("{url}/dead-letters"))
        .output()
        .map_err(|e| format!("chromium --dump-dom: {e}"))?;
    let dom = String::from_utf8_lossy(&dom.stdout);
    let letter = dom
        .split("href=\"/dead-letters/message/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or("the dead-letters page lists no letter")?;
    shoot(chromium, &format!("{url}/dead-letters/message/{letter}"), &dir.join("dead-letter.png"))?;
    println!("screenshots: {} pages in {}", PAGES.len() + 1, dir.display());
    Ok(())
}

fn browser(chromium: &str) -> Command {
    let mut command = Command::new(chromium);
    command.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ]);
    command.stderr(Stdio::null());
    command
}

fn shoot(chromium: &str, url: &str, file: &Path) -> Result<(), String> {
    let status = browser(chromium)
        .arg("--window-size=1280,1000")
        .arg(format!("--screenshot={}", file.display()))
        .arg(url)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("chromium --screenshot: {e}"))?;
    if !status.success() || !file.is_file() {
        return Err(format!("chromium could not take {url} ({status})"));
    }
    println!("  {url} → {}", file.display());
    Ok(())
}

/// Stops the demo as Ctrl-C would, so it shuts its host down and releases its leases.
fn stop(demo: &mut Child) {
    let _ = Command::new("kill").args(["-INT", &demo.id().to_string()]).status();
    let _ = demo.wait();
}
