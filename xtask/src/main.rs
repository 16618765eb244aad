//! relayer's developer commands, run as `cargo xtask <command>` (see `cargo xtask help`).
//!
//! Plain `std::process::Command` calls and hand-written argument parsing: the xtask has no
//! dependencies, so it builds in seconds on a cold cache. Every command runs from the
//! workspace root.
#![allow(clippy::print_stdout)] // a CLI: stdout is its user interface.

mod brokers;
mod chaos;
mod cycles;
mod postgres;
mod rules;
mod run;
mod screenshots;
mod skips;
mod summary;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Instant;

use crate::run::{Step, cargo};

const HELP: &str = "\
cargo xtask <command>

Commands:
  test [-- ARGS]          the whole test suite: cargo nextest (or cargo test) on the workspace,
                          then the doctests; ends with `tests: N passed, M failed`.
                          RELAYER_TEST_THREADS sets the test threads (default 4); ARGS go to
                          nextest (or to cargo test).
  ci                      fmt check, module cycles (`cycles`), rule ids (`rules`), clippy -D warnings, the facade's docs with every feature
                          (RUSTDOCFLAGS=-D warnings), cargo check of each crate on its own, cargo package,
                          cargo deny check licenses bans sources (advisories only with
                          RELAYER_DENY_ADVISORIES=1: skipped by name), `test`, then runs the examples and the
                          demo at 300 orders (its RESULT line must say lost=0). Stops
                          at the first failure. Broker tests without their broker are listed
                          by name in a `tests skipped (broker or browser missing): N` line; the inbox example is
                          skipped without NATS. The closing `ci:` line names every skip.
  schema [print|apply] [--schema S --prefix P]
                          prints or applies the database schema (through relayer-cli).
  demo [--console [ADDR]] makes sure PostgreSQL answers locally, then runs the demo (relayer-cli);
                          with --console it then leaves a parked lane, dead letters and a backlog
                          and serves the operator console (default 127.0.0.1:9188) until Ctrl-C.
  screenshots             runs the demo with its console and has headless Chromium take a PNG of
                          each console page into docs/console/ (docs/operations.md shows them).
  bench <name> [--quick]  runs a benchmark in release mode: dispatch, tripped, maintenance, consumer, enqueue, brokers, claims, peers, xmin (relayer-bench), locks.
  chaos [--kills N] [--restarts N] [--seed S]
                          the crash and restart scenarios (relayer-scenarios, the top-level tests/)
                          at full scale: hosts SIGKILLed N times (default 120), PostgreSQL
                          restarted N times (default 5); prints kills, written, delivered, lost,
                          duplicates and the time taken. CI runs them with 24 kills and 1 restart.
  cycles                  import cycles between the modules of each crate: prints every
                          cycle with the lines that close it; fails when there is one.
  rules                   every rule id cited in code, tests and docs is stated in
                          docs/rules.md (a lettered id also in INVARIANTS.md).
  help                    this text.

The tests find their database as relayer-test-support documents: DATABASE_URL, else a
server at 127.0.0.1:5432 (user postgres, database test), else a throwaway initdb cluster,
else a postgres:17 container.";

/// Test threads when `RELAYER_TEST_THREADS` is not set: the database, not the CPU, is the
/// bottleneck, and CI machines have 2 cores.
const DEFAULT_TEST_THREADS: u32 = 4;

/// Orders the demo writes in `cargo xtask ci`: every step runs, in well under a minute.
const CI_DEMO_MESSAGES: u32 = 300;

/// Set to `1` to run `cargo deny check advisories` too (it fetches the advisory database).
const DENY_ADVISORIES: &str = "RELAYER_DENY_ADVISORIES";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            println!("{HELP}");
            Ok(())
        }
        Some("test") => test_command(&args[1..]),
        Some("ci") => ci(&args[1..]),
        Some("schema") => {
            delegate("relayer-cli", &["run", "-q", "-p", "relayer-cli", "--", "schema"], &args[1..])
        }
        Some("demo") => demo(&args[1..]),
        Some("screenshots") => screenshots::screenshots(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("chaos") => chaos::chaos(&args[1..]),
        Some("cycles") => cycles::cycles(&args[1..]),
        Some("rules") => rules::rules(&args[1..]),
        Some(other) => Err(format!("unknown command `{other}`; see `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask test [-- ARGS]`.
fn test_command(args: &[String]) -> Result<(), String> {
    let extra = match args.split_first() {
        None => &[][..],
        Some((first, rest)) if first == "--" => rest,
        Some(_) => return Err(format!("`test` takes its extra arguments after `--`, got {args:?}")),
    };
    test_suite(extra).map(drop)
}

/// Runs the tests and the doctests, and prints the `tests: N passed, M failed` line.
/// Returns the broker tests that skipped themselves (`SKIPPED <test>: <reason>` lines).
fn test_suite(extra: &[String]) -> Result<Vec<String>, String> {
    let threads = test_threads()?;
    let skips = skips::SkipLog::new();
    let mut total = summary::Counts::default();
    let mut problems = Vec::new();

    let main_run = if run::has_cargo_subcommand("nextest") {
        let mut args: Vec<OsString> = ["nextest", "run", "--workspace", "--no-fail-fast", "--test-threads"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push(threads.to_string().into());
        args.extend(extra.iter().map(OsString::from));
        let (status, output) = run::tee(skips.attach(cargo(&args)))?;
        (status, summary::nextest(&output), "cargo nextest run")
    } else {
        println!("cargo-nextest is not installed: falling back to cargo test");
        // Doctests run below, once: keep them out of this run.
        let mut args: Vec<OsString> = ["test", "--workspace", "--no-fail-fast", "--lib", "--bins", "--tests"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push("--".into());
        args.push("--test-threads".into());
        args.push(threads.to_string().into());
        args.extend(extra.iter().map(OsString::from));
        let (status, output) = run::tee(skips.attach(cargo(&args)))?;
        (status, summary::libtest(&output), "cargo test")
    };
    let (status, counts, what) = main_run;
    total += counts;
    if !status.success() {
        problems.push(format!("{what} exited with {status}"));
    }

    let (status, output) = run::tee(cargo(&["test", "--workspace", "--doc"]))?;
    total += summary::libtest(&output);
    if !status.success() {
        problems.push(format!("cargo test --doc exited with {status}"));
    }

    // Loud, by name: a broker test without its broker counts as passed in the line below.
    eprintln!("{}", skips.summary());
    println!("tests: {} passed, {} failed", total.passed, total.failed);
    if total.failed > 0 {
        problems.push(format!("{} tests failed", total.failed));
    }
    if total.passed + total.failed == 0 {
        problems.push("no test ran".to_owned());
    }
    if problems.is_empty() { Ok(skips.lines()) } else { Err(problems.join("; ")) }
}

fn test_threads() -> Result<u32, String> {
    match std::env::var("RELAYER_TEST_THREADS") {
        Err(_) => Ok(DEFAULT_TEST_THREADS),
        Ok(value) => match value.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("RELAYER_TEST_THREADS must be a positive number, got {value:?}")),
        },
    }
}

/// `cargo xtask ci`.
fn ci(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("`ci` takes no arguments, got {args:?}"));
    }
    let started = Instant::now();
    let members = run::workspace_members()?;

    let mut steps: Vec<Step> = vec![
        Step::cargo("format", &["fmt", "--all", "--", "--check"]),
        Step::Cycles,
        Step::Rules,
        Step::cargo("clippy", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]),
        // The facade's docs with every feature: no warning, no broken intra-doc link.
        Step::cargo_with_env(
            "facade docs",
            &[("RUSTDOCFLAGS", "-D warnings")],
            &["doc", "-p", "relayer", "--all-features", "--no-deps"],
        ),
        // Every other crate's docs with its default features, as docs.rs and a user's
        // `cargo doc` build them: no link to a private or feature-gated item.
        Step::cargo_with_env(
            "crate docs",
            &[("RUSTDOCFLAGS", "-D warnings")],
            &["doc", "--workspace", "--exclude", "relayer", "--no-deps"],
        ),
    ];
    for member in &members {
        steps.push(Step::cargo(&format!("check {member} on its own"), &["check", "-p", member]));
    }
    // Every publishable crate packages: metadata, files, and no dependency that cannot be
    // published before it (a versioned dev-dependency on the facade, for one).
    steps.push(Step::cargo(
        "publishable crates",
        &[
            "package",
            "--workspace",
            "--no-verify",
            "--allow-dirty",
            "--exclude",
            "relayer-bench",
            "--exclude",
            "relayer-test-support",
            "--exclude",
            "xtask",
        ],
    ));
    // The supply chain (deny.toml): licenses, banned and duplicate crates, sources. `.ci/run`
    // installs cargo-deny when it is missing. The advisory database lives on a code host these
    // machines cannot reach, so `advisories` is skipped by name unless asked for.
    if run::has_cargo_subcommand("deny") {
        steps.push(Step::cargo(
            "cargo deny: licenses, bans, sources",
            &["deny", "check", "licenses", "bans", "sources"],
        ));
        if std::env::var_os(DENY_ADVISORIES).is_some_and(|value| value == "1") {
            steps.push(Step::cargo("cargo deny: advisories", &["deny", "check", "advisories"]));
        } else {
            steps.push(Step::skipped(
                "cargo deny: advisories",
                &format!(
                    "the advisory database (github.com/rustsec/advisory-db) cannot be fetched from this \
                     machine; run `cargo deny check advisories` where a network allows, or set \
                     {DENY_ADVISORIES}=1"
                ),
            ));
        }
    } else {
        steps.push(Step::skipped(
            "cargo deny",
            "cargo-deny is not installed (`.ci/run` installs it; or `cargo install --locked cargo-deny`)",
        ));
    }
    steps.push(Step::Tests);
    // TRN-4: the worked examples compile (clippy above) and run against the same database.
    for example in ["webhook", "service"] {
        steps.push(Step::cargo(
            &format!("example {example}"),
            &["run", "-q", "-p", "relayer-examples", "--example", example],
        ));
    }
    // QUE-3 on the receiving side of a broker: it needs NATS, and is skipped by name without.
    steps.push(Step::needs(
        brokers::Broker::Nats,
        Step::cargo("example inbox", &["run", "-q", "-p", "relayer-examples", "--example", "inbox"]),
    ));

    // The README's first command, small: every step of the demo, nothing lost.
    steps.push(Step::demo(CI_DEMO_MESSAGES));

    let count = steps.len();
    let mut skipped = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        println!("\n==> [{}/{count}] {}", index + 1, step.title());
        let step_started = Instant::now();
        let result = match step {
            Step::Command { command, .. } => run::status(command.build()),
            Step::Skipped { title, why } => {
                println!("skipped: {why}");
                skipped.push(format!("{title}: {why}"));
                Ok(())
            }
            Step::NeedsBroker { title, broker, command } => match broker.check() {
                Ok(brokers::Verdict::Run) => run::status(command.build()),
                Ok(brokers::Verdict::Skip(why)) => {
                    // Loud, by name: on stderr now and in the closing line.
                    eprintln!("SKIPPED {title}: {why}");
                    skipped.push(format!("{title}: {why}"));
                    Ok(())
                }
                Err(error) => Err(error),
            },
            Step::Tests => test_suite(&[]).map(|tests| {
                // Each line is `SKIPPED <test>: <reason>`; the closing line adds the prefix.
                skipped.extend(tests.iter().map(|line| line.trim_start_matches("SKIPPED ").to_owned()));
            }),
            Step::Cycles => cycles::cycles(&[]),
            Step::Rules => rules::rules(&[]),
            Step::Demo { messages, .. } => small_demo(*messages),
        };
        let elapsed = step_started.elapsed().as_secs_f64();
        match result {
            Ok(()) => println!("<== [{}/{count}] ok in {elapsed:.1}s", index + 1),
            Err(e) => {
                println!("<== [{}/{count}] FAILED in {elapsed:.1}s", index + 1);
                return Err(format!("ci failed at `{}`: {e}", step.title()));
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    if skipped.is_empty() {
        println!("\nci: all {count} steps passed in {elapsed:.1}s");
    } else {
        // A skipped step, or a broker test without its broker (its suite counts it as
        // passed), is named here: never a silent pass.
        println!("\nci: all {count} steps done in {elapsed:.1}s; {} SKIPPED, by name:", skipped.len());
        for what in &skipped {
            println!("  SKIPPED {what}");
        }
    }
    Ok(())
}

/// Runs the demo with `messages` orders; fails unless it exits 0 and its `RESULT` line
/// reports `lost=0`.
fn small_demo(messages: u32) -> Result<(), String> {
    postgres::ensure_local_server()?;
    let (status, output) = run::tee(cargo(&run::demo_args(messages)))?;
    demo_verdict(status.success(), &output)
}

/// The verdict on a demo run from its exit status and output: the last `RESULT` line must
/// carry `lost=0`.
fn demo_verdict(succeeded: bool, output: &str) -> Result<(), String> {
    let result = output.lines().rev().find(|line| line.starts_with("RESULT "));
    match result {
        None => Err(format!(
            "the demo printed no RESULT line (it {})",
            if succeeded { "succeeded" } else { "failed" }
        )),
        Some(line) if !line.split_whitespace().any(|field| field == "lost=0") => {
            Err(format!("the demo lost messages: {line}"))
        }
        Some(line) if !succeeded => Err(format!("the demo failed after `{line}`")),
        Some(_) => Ok(()),
    }
}

/// `cargo xtask demo`.
fn demo(args: &[String]) -> Result<(), String> {
    postgres::ensure_local_server()?;
    delegate("relayer-cli", &["run", "-q", "--release", "-p", "relayer-cli", "--", "demo"], args)
}

/// `cargo xtask bench <name> [--quick]`.
fn bench(args: &[String]) -> Result<(), String> {
    match args {
        [name] | [name, _] if !name.starts_with('-') => {}
        _ => return Err("usage: cargo xtask bench <name> [--quick]".to_owned()),
    }
    if let [_, flag] = args
        && flag != "--quick"
    {
        return Err(format!("unknown bench option `{flag}`; usage: cargo xtask bench <name> [--quick]"));
    }
    // The lock benchmark is a binary of its own: it measures on a current-thread runtime.
    if args[0] == "locks" {
        return delegate(
            "relayer-bench",
            &["run", "--release", "-p", "relayer-bench", "--bin", "lock-bench", "--"],
            &args[1..],
        );
    }
    delegate(
        "relayer-bench",
        &["run", "--release", "-p", "relayer-bench", "--bin", "relayer-bench", "--"],
        args,
    )
}

/// Runs `cargo <fixed> <args>` when `package` is in the workspace; says so clearly when not.
fn delegate(package: &str, fixed: &[&str], args: &[String]) -> Result<(), String> {
    if !run::workspace_members()?.iter().any(|member| member == package) {
        return Err(format!(
            "the `{package}` crate is not in the workspace yet, so this command cannot run; \
             it delegates to `cargo {}` once that crate exists",
            fixed.join(" ")
        ));
    }
    let mut all: Vec<OsString> = fixed.iter().map(OsString::from).collect();
    all.extend(args.iter().map(OsString::from));
    run::status(cargo(&all))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use super::demo_verdict;

    #[test]
    fn the_ci_demo_step_needs_a_result_line_with_lost_0() {
        assert!(demo_verdict(true, "[8/8] summary\nRESULT lost=0 duplicates=3 redriven=12\n").is_ok());
        let lost = demo_verdict(false, "RESULT lost=2 duplicates=0 redriven=12\n").unwrap_err();
        assert!(lost.contains("lost=2"), "{lost}");
        assert!(
            demo_verdict(true, "RESULT lost=10 duplicates=0 redriven=0").is_err(),
            "lost=10 is not lost=0"
        );
        assert!(demo_verdict(true, "summary only\n").is_err());
        assert!(
            demo_verdict(false, "RESULT lost=0 duplicates=0 redriven=0\nError: lanes out of order").is_err()
        );
    }
}
