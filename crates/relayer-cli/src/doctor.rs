//! `relayer doctor` (OBS-6): the library's report (`relayer_postgres::doctor`) printed for a
//! person or as JSON; the exit status is the report's worst severity (0 ok, 1 warning,
//! 2 critical), and 3 when the doctor could not check at all.

use std::fmt::Write as _;

use relayer_postgres::doctor::{DoctorOptions, Report, Severity, diagnose};

use crate::args::{Args, DoctorArgs};
use crate::escape::{Newlines, printable};
use crate::output::print_json;

/// Where the continuation lines of an `ok` line start.
const OK_INDENT: &str = "            ";

/// The exit status when the doctor could not check (no connection, a statement refused).
pub(crate) const COULD_NOT_CHECK: u8 = 3;

pub(crate) async fn run(
    args: &Args,
    doctor: &DoctorArgs,
) -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    let connector = args.connector()?;
    let mut options = DoctorOptions::default();
    options.horizon_warning = doctor.horizon_warning;
    options.horizon_critical = doctor.horizon_critical;
    options.stuck_after = doctor.stuck_after;
    if options.horizon_critical < options.horizon_warning {
        return Err(format!(
            "--horizon-critical ({:?}) must not be shorter than --horizon-warning ({:?})",
            options.horizon_critical, options.horizon_warning
        )
        .into());
    }
    let report = diagnose(&connector, &args.namespace, &options)
        .await
        .map_err(|e| format!("doctor on {}: {}", connector.target(), relayer::error_chain(&e)))?;
    if doctor.json {
        print_json(&report.to_json());
    } else {
        print!("{}", render(&report));
    }
    Ok(report.severity().exit_code())
}

/// The report for a person: problems first, worst first, each with its advice; then one
/// line per check that found nothing. Prose wraps within 80 columns; words are never cut.
pub(crate) fn render(report: &Report) -> String {
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    let mut text = format!(
        "relayer doctor: namespace {}\nverdict: {} ({} critical, {} warning, {} ok)\n",
        report.namespace,
        report.severity().name().to_uppercase(),
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Ok)
    );
    // Database text (lane keys, error reasons, application names) is escaped.
    let shown = |s: &str| printable(s, Newlines::Escape);
    for severity in [Severity::Critical, Severity::Warning] {
        for f in report.findings.iter().filter(|f| f.severity == severity) {
            let _ =
                writeln!(text, "\n{:<8}  {}  {}", severity.name().to_uppercase(), f.code, shown(&f.subject));
            text.push_str(&wrap(&shown(&f.message), "  ", "  "));
            if !f.advice.is_empty() {
                text.push_str(&wrap(&format!("what to do: {}", shown(&f.advice)), "  ", "    "));
            }
        }
    }
    let ok: Vec<_> = report.findings.iter().filter(|f| f.severity == Severity::Ok).collect();
    if !ok.is_empty() {
        text.push('\n');
        for f in ok {
            let first = format!("ok        {:<23}  ", f.code);
            text.push_str(&wrap(&format!("{}: {}", shown(&f.subject), shown(&f.message)), &first, OK_INDENT));
            if !f.advice.is_empty() {
                text.push_str(&wrap(&format!("note: {}", shown(&f.advice)), OK_INDENT, OK_INDENT));
            }
        }
    }
    text
}

/// `text` in lines of at most 80 columns where its words allow, the first line after
/// `first`, the others after `rest`. Words are never cut: a word longer than a line (a
/// connection target, a long identifier) gets a line of its own.
fn wrap(text: &str, first: &str, rest: &str) -> String {
    const WIDTH: usize = 80;
    let mut out = String::from(first);
    let mut column = first.chars().count();
    let mut at_start = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let length = word.chars().count();
        if !at_start && column + 1 + length > WIDTH {
            out.push('\n');
            out.push_str(rest);
            column = rest.chars().count();
            at_start = true;
        }
        if !at_start {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += length;
        at_start = false;
    }
    out.push('\n');
    out
}

/// The console's doctor page (issue 27): the same checks as `relayer doctor`, with its default
/// thresholds, run afresh on each view of the page.
pub(crate) fn console_hook(
    database: relayer_postgres::Connector,
    namespace: relayer::core::Namespace,
) -> relayer_console::DoctorHook {
    std::sync::Arc::new(move || {
        let database = database.clone();
        let namespace = namespace.clone();
        Box::pin(async move {
            let report = diagnose(&database, &namespace, &DoctorOptions::default())
                .await
                .map_err(|e| format!("doctor on {}: {}", database.target(), relayer::error_chain(&e)))?;
            Ok(report
                .findings
                .into_iter()
                .map(|finding| relayer_console::DoctorFinding {
                    severity: match finding.severity {
                        Severity::Ok => relayer_console::Severity::Ok,
                        Severity::Warning => relayer_console::Severity::Warning,
                        Severity::Critical => relayer_console::Severity::Critical,
                    },
                    check: finding.code.to_owned(),
                    summary: format!("{}: {}", finding.subject, finding.message),
                    remedy: finding.advice,
                })
                .collect())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_wraps_within_80_columns_without_cutting_a_word_obs_6() {
        let text = "pid 4242 (application_name \"nightly-report\", state idle in transaction) has held a \
                    snapshot for 12m3s; end it with SELECT pg_terminate_backend(4242) if it is stuck";
        let wrapped = wrap(text, "  ", "    ");
        assert!(wrapped.lines().all(|line| line.chars().count() <= 80), "{wrapped}");
        assert!(wrapped.starts_with("  pid 4242") && wrapped.lines().skip(1).all(|l| l.starts_with("    ")));
        let words: Vec<&str> = wrapped.split_whitespace().collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>(), "every word whole, in order");
        let long = "x".repeat(100);
        assert_eq!(wrap(&format!("a {long} b"), "", ""), format!("a\n{long}\nb\n"));
    }
}
