//! `cargo xtask chaos [--kills N] [--restarts N] [--seed S]`: the crash and restart
//! scenarios of the `relayer-scenarios` crate (the top-level `tests/`) at full scale.
//!
//! CI runs the same tests with a few kills and one restart; this runs them with many, one
//! after the other (they share the machine's two cores with the hosts they kill), and ends
//! with their report lines: kills, written, delivered, lost, duplicates, time taken.

use std::time::Instant;

use crate::run::{self, cargo};

/// Kills when `--kills` is not given: at least a hundred, as the issue asks of a full run.
const DEFAULT_KILLS: u32 = 120;
/// Server restarts when `--restarts` is not given.
const DEFAULT_RESTARTS: u32 = 5;

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
struct ChaosArgs {
    kills: u32,
    restarts: u32,
    seed: Option<u64>,
}

fn parse(args: &[String]) -> Result<ChaosArgs, String> {
    let usage = "usage: cargo xtask chaos [--kills N] [--restarts N] [--seed S]";
    let mut parsed = ChaosArgs { kills: DEFAULT_KILLS, restarts: DEFAULT_RESTARTS, seed: None };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("`{flag}` needs a value; {usage}"))?;
        let number = |what: &str| {
            value
                .parse::<u64>()
                .map_err(|_| format!("`{flag}` takes a number of {what}, got {value:?}; {usage}"))
        };
        match flag.as_str() {
            "--kills" => parsed.kills = positive(number("kills")?, flag)?,
            "--restarts" => parsed.restarts = positive(number("restarts")?, flag)?,
            "--seed" => parsed.seed = Some(number("seed")?),
            other => return Err(format!("unknown chaos option `{other}`; {usage}")),
        }
    }
    Ok(parsed)
}

fn positive(n: u64, flag: &str) -> Result<u32, String> {
    match u32::try_from(n) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{flag}` must be between 1 and {}, got {n}", u32::MAX)),
    }
}

/// `cargo xtask chaos`.
pub(crate) fn chaos(args: &[String]) -> Result<(), String> {
    let ChaosArgs { kills, restarts, seed } = parse(args)?;
    let started = Instant::now();
    let mut command = cargo(&[
        "test",
        "-p",
        "relayer-scenarios",
        "--test",
        "sigkill",
        "--test",
        "server_restart",
        "--",
        "--nocapture",
        "--test-threads=1",
        // The scenarios that scale with the counts; the others run in CI as they are.
        "sigkilled_hosts_",
        "an_immediate_server_restart_",
    ]);
    command.env("RELAYER_CHAOS_KILLS", kills.to_string()).env("RELAYER_CHAOS_RESTARTS", restarts.to_string());
    if let Some(seed) = seed {
        command.env("RELAYER_CHAOS_SEED", seed.to_string());
    }
    let (status, output) = run::tee(command)?;
    println!("\nchaos: {kills} kills, {restarts} restarts, {:.1}s in all", started.elapsed().as_secs_f64());
    for line in report_lines(&output) {
        println!("  {line}");
    }
    if status.success() { Ok(()) } else { Err(format!("the chaos scenarios failed ({status})")) }
}

/// The scenarios' report lines in the test output. libtest prints a test's output on the
/// line that names the test, so a report may start mid-line.
fn report_lines(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter_map(|line| {
            let at = line.find("chaos sigkill (").or_else(|| line.find("chaos restart ("));
            at.map(|at| &line[at..])
                .or_else(|| line.trim_start().starts_with("restart ").then(|| line.trim()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn defaults_and_each_option_parse() {
        assert_eq!(
            parse(&[]),
            Ok(ChaosArgs { kills: DEFAULT_KILLS, restarts: DEFAULT_RESTARTS, seed: None })
        );
        assert_eq!(
            parse(&strings(&["--kills", "150", "--seed", "7", "--restarts", "2"])),
            Ok(ChaosArgs { kills: 150, restarts: 2, seed: Some(7) })
        );
    }

    #[test]
    fn bad_options_are_refused_naming_them() {
        for (args, needle) in [
            (&["--kills"][..], "`--kills` needs a value"),
            (&["--kills", "many"][..], "number of kills"),
            (&["--kills", "0"][..], "between 1"),
            (&["--fast", "1"][..], "unknown chaos option `--fast`"),
        ] {
            let error = parse(&strings(args)).unwrap_err();
            assert!(error.contains(needle), "{args:?}: {error}");
        }
    }

    #[test]
    fn report_lines_are_found_mid_line_too() {
        let output = "running 1 test\ntest a ... chaos sigkill (seed 1): kills=3\nok\n  restart 1: working again after 1s\nchaos restart (seed 2): restarts=1\n";
        assert_eq!(
            report_lines(output),
            vec![
                "chaos sigkill (seed 1): kills=3",
                "restart 1: working again after 1s",
                "chaos restart (seed 2): restarts=1"
            ]
        );
    }
}
