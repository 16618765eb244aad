//! `relayer doctor` (OBS-6): the library's report (`relayer_postgres::doctor`) printed for a
//! person or as JSON; the exit status is the report's worst severity (0 ok, 1 warning,
//! 2 critical), and 3 when the doctor could not check at all.

use std::fmt::Write as _;

use relayer_postgres::doctor::{DoctorOptions, Report, Severity, diagnose};

use crate::args::{Args, DoctorArgs};
use crate::escape::{Newlines, printable};
use crate::output::print_json;

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
/// line per check that found nothing.
pub(crate) fn render(report: &Report) -> String {
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    let mut text = format!(
        "relayer doctor: namespace {} — {} ({} critical, {} warning, {} ok)\n",
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
            let _ = write!(
                text,
                "\n{:<8}  {}  {}\n  {}\n",
                severity.name().to_uppercase(),
                f.code,
                shown(&f.subject),
                shown(&f.message)
            );
            if !f.advice.is_empty() {
                let _ = writeln!(text, "  what to do: {}", shown(&f.advice));
            }
        }
    }
    let ok: Vec<_> = report.findings.iter().filter(|f| f.severity == Severity::Ok).collect();
    if !ok.is_empty() {
        text.push('\n');
        for f in ok {
            let _ = writeln!(text, "ok        {:<23}  {}: {}", f.code, shown(&f.subject), shown(&f.message));
            if !f.advice.is_empty() {
                let _ = writeln!(text, "          {:<23}  note: {}", "", shown(&f.advice));
            }
        }
    }
    text
}
