//! [`in_empty_home`]: a test that must not see the runner's home directory.

use std::process::Command;

/// Set in the child process [`in_empty_home`] starts.
const MARK: &str = "RELAYER_TEST_EMPTY_HOME";

/// Whether the calling test should run its body: `true` in a copy of the test binary that
/// runs only `test` (the test's name, with its module path if any) with `HOME` an empty
/// directory; in the original process, runs that copy, asserts it passed and returns
/// `false`.
///
/// For tests of code that reads the user's files as libpq does (`~/.postgresql/root.crt`),
/// whose outcome must not depend on the machine's user: a test process cannot change its
/// own environment safely while other tests run.
///
/// # Panics
///
/// When the copy cannot be started or fails.
pub fn in_empty_home(test: &str) -> bool {
    if std::env::var_os(MARK).is_some() {
        return true;
    }
    let home = std::env::temp_dir().join(format!("relayer-home-{}", uuid::Uuid::new_v4()));
    if let Err(e) = std::fs::create_dir_all(&home) {
        panic!("{test}: creating an empty home directory {}: {e}", home.display());
    }
    let binary = std::env::current_exe().unwrap_or_else(|e| panic!("{test}: the test binary: {e}"));
    let output = Command::new(binary)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("HOME", &home)
        .env(MARK, "1")
        .output();
    let _ = std::fs::remove_dir_all(&home);
    match output {
        Ok(output) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{test} failed with an empty HOME ({}):\n{stdout}\n{stderr}",
                output.status
            );
            // A name that matches no test runs nothing and succeeds: that must not pass.
            assert!(
                stdout.contains("test result: ok. 1 passed"),
                "{test} did not run with an empty HOME (is it the test's exact name?):\n{stdout}"
            );
        }
        Err(e) => panic!("{test}: starting the test binary again: {e}"),
    }
    false
}
