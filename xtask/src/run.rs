//! Running cargo and other programs from the workspace root.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use crate::brokers::Broker;

/// One step of `cargo xtask ci`.
pub(crate) enum Step {
    /// A cargo command.
    Command { title: String, command: CargoCommand },
    /// A step that cannot run here, and why.
    Skipped { title: String, why: String },
    /// A cargo command that needs a broker: run when it answers, else skipped by name.
    NeedsBroker { title: String, broker: Broker, command: CargoCommand },
    /// The test suite (`cargo xtask test`).
    Tests,
    /// No import cycle between the modules of any crate (`cargo xtask cycles`).
    Cycles,
    /// Every rule id cited is stated in docs/rules.md (`cargo xtask rules`).
    Rules,
    /// The demo at a small size: it must succeed and its `RESULT` line report `lost=0`.
    Demo { title: String, messages: u32 },
}

impl Step {
    pub(crate) fn cargo(title: &str, args: &[&str]) -> Step {
        Step::cargo_with_env(title, &[], args)
    }

    /// A cargo command run with extra environment variables.
    pub(crate) fn cargo_with_env(title: &str, env: &[(&str, &str)], args: &[&str]) -> Step {
        let command = CargoCommand {
            args: args.iter().map(OsString::from).collect(),
            env: env.iter().map(|(name, value)| (OsString::from(name), OsString::from(value))).collect(),
        };
        let shown_env: String = env.iter().map(|(name, value)| format!("{name}={value:?} ")).collect();
        Step::Command { title: format!("{title}: {shown_env}cargo {}", args.join(" ")), command }
    }

    /// `step` (a cargo command), run only when `broker` answers (see [`crate::brokers`]).
    pub(crate) fn needs(broker: Broker, step: Step) -> Step {
        match step {
            Step::Command { title, command } => Step::NeedsBroker { title, broker, command },
            other => other,
        }
    }

    pub(crate) fn demo(messages: u32) -> Step {
        Step::Demo {
            title: format!("demo: cargo {} (RESULT lost=0)", demo_args(messages).join(" ")),
            messages,
        }
    }

    pub(crate) fn skipped(title: &str, why: &str) -> Step {
        Step::Skipped { title: title.to_owned(), why: why.to_owned() }
    }

    pub(crate) fn title(&self) -> &str {
        match self {
            Step::Command { title, .. }
            | Step::Skipped { title, .. }
            | Step::NeedsBroker { title, .. }
            | Step::Demo { title, .. } => title,
            Step::Tests => "tests: cargo xtask test",
            Step::Cycles => "module cycles: cargo xtask cycles",
            Step::Rules => "rule ids: cargo xtask rules",
        }
    }
}

/// The cargo arguments that run the demo with `messages` orders (debug build: CI has it).
pub(crate) fn demo_args(messages: u32) -> Vec<String> {
    ["run", "-q", "-p", "relayer-cli", "--", "demo", "--messages"]
        .iter()
        .map(|arg| (*arg).to_owned())
        .chain([messages.to_string()])
        .collect()
}

/// The arguments of a cargo command, built when the step runs.
pub(crate) struct CargoCommand {
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl CargoCommand {
    pub(crate) fn build(&self) -> Command {
        let mut command = cargo(&self.args);
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        command
    }
}

/// The workspace root (the xtask lives in `<root>/xtask`).
pub(crate) fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// `cargo <args>` in the workspace root, with the cargo that runs the xtask.
pub(crate) fn cargo<S: AsRef<OsStr>>(args: &[S]) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.args(args).current_dir(root()).stdin(Stdio::null());
    // Output that is teed through a pipe keeps its colours when a person watches.
    if std::io::stdout().is_terminal() && std::env::var_os("CARGO_TERM_COLOR").is_none() {
        command.env("CARGO_TERM_COLOR", "always");
    }
    command
}

/// Shows the command line, runs it with inherited output, and fails unless it succeeds.
pub(crate) fn status(mut command: Command) -> Result<(), String> {
    let shown = show(&command);
    eprintln!("$ {shown}");
    let status = command.status().map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("`{shown}` exited with {status}")) }
}

/// Runs the command, passing its stdout and stderr through while keeping a copy of both
/// (for the summary lines); returns its exit status and the copy.
pub(crate) fn tee(mut command: Command) -> Result<(ExitStatus, String), String> {
    let shown = show(&command);
    eprintln!("$ {shown}");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    let copy = Arc::new(Mutex::new(Vec::new()));
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(pass_through(stdout, false, Arc::clone(&copy)));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(pass_through(stderr, true, Arc::clone(&copy)));
    }
    let status = child.wait().map_err(|e| format!("waiting for `{shown}`: {e}"))?;
    for reader in readers {
        let _ = reader.join();
    }
    let copy = copy.lock().map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default();
    Ok((status, copy))
}

fn pass_through(
    stream: impl Read + Send + 'static,
    to_stderr: bool,
    copy: Arc<Mutex<Vec<u8>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let _ = if to_stderr {
                        std::io::stderr().lock().write_all(&line)
                    } else {
                        std::io::stdout().lock().write_all(&line)
                    };
                    if let Ok(mut copy) = copy.lock() {
                        copy.extend_from_slice(&line);
                    }
                }
            }
        }
    })
}

fn show(command: &Command) -> String {
    let mut shown = Path::new(command.get_program())
        .file_name()
        .unwrap_or(command.get_program())
        .to_string_lossy()
        .into_owned();
    for arg in command.get_args() {
        shown.push(' ');
        shown.push_str(&arg.to_string_lossy());
    }
    shown
}

/// Whether `cargo <name>` exists (cargo-nextest, cargo-deny …).
pub(crate) fn has_cargo_subcommand(name: &str) -> bool {
    cargo(&[name, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The names of the workspace's packages, from `cargo metadata`.
pub(crate) fn workspace_members() -> Result<Vec<String>, String> {
    let output = cargo(&["metadata", "--no-deps", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata exited with {}", output.status));
    }
    let members = member_names(&String::from_utf8_lossy(&output.stdout));
    if members.is_empty() {
        return Err("cargo metadata lists no workspace members".to_owned());
    }
    Ok(members)
}

/// Package names from the `"workspace_members"` ids of `cargo metadata` output. An id is
/// `path+file:///dir/name#version`, or `path+file:///dir#name@version` when the package
/// name differs from its directory's.
fn member_names(metadata: &str) -> Vec<String> {
    let Some(start) = metadata.find("\"workspace_members\"") else { return Vec::new() };
    let rest = &metadata[start..];
    let Some(open) = rest.find('[') else { return Vec::new() };
    let Some(close) = rest[open..].find(']') else { return Vec::new() };
    let mut names: Vec<String> = rest[open + 1..open + close]
        .split(',')
        .filter_map(|id| {
            let id = id.trim().trim_matches('"');
            let (path, fragment) = id.split_once('#').unwrap_or((id, ""));
            match fragment.split_once('@') {
                Some((name, _version)) => Some(name.to_owned()),
                None => path.trim_end_matches('/').rsplit('/').next().map(str::to_owned),
            }
        })
        .filter(|name| !name.is_empty())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::member_names;

    #[test]
    fn member_names_read_both_forms_of_package_ids() {
        let metadata = r#"{"packages":[{"name":"ignored"}],"workspace_members":["path+file:///w/crates/relayer-core#0.1.0","path+file:///w/xtask#0.1.0","path+file:///w/crates/cli#relayer-cli@0.1.0"],"resolve":null}"#;
        assert_eq!(member_names(metadata), ["relayer-cli", "relayer-core", "xtask"]);
        assert!(member_names("{}").is_empty());
    }
}
