//! Doctor: the findings of `relayer doctor`, when the host gives the console a
//! [`DoctorHook`]; otherwise the page says it is not available. The hook keeps the console
//! independent of where the checks live: the host adapts their report to
//! [`DoctorFinding`]s.
//!
//! Cost: whatever the hook's checks read, once per view.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::render;
use crate::doctor::{DoctorFinding, Severity};
use crate::html::{esc, esc_with};
use crate::state::Shared;

pub(crate) async fn show(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let body = match &shared.doctor {
        None => Ok("<p class=\"note\" id=\"doctor-unavailable\">The doctor's checks are not available in this \
                    build; <code>relayer status</code> and the other pages cover backlog, workers, lanes and dead letters.</p>"
            .to_owned()),
        Some(hook) => match hook().await {
            Ok(findings) => Ok(findings_table(&findings)),
            Err(error) => Err(super::Failure::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, error)),
        },
    };
    render(&shared, &headers, "Doctor", "/doctor", body)
}

fn findings_table(findings: &[DoctorFinding]) -> String {
    let mut sorted: Vec<&DoctorFinding> = findings.iter().collect();
    sorted.sort_by(|a, b| b.severity.cmp(&a.severity).then_with(|| a.check.cmp(&b.check)));
    let mut out = String::from(
        "<table id=\"findings\"><thead><tr><th>severity</th><th>check</th><th>finding</th><th>what to do</th></tr></thead><tbody>",
    );
    for f in sorted {
        let (class, label) = match f.severity {
            Severity::Ok => ("ok", "ok"),
            Severity::Warning => ("note", "warning"),
            Severity::Critical => ("bad", "CRITICAL"),
        };
        let _ = write!(
            out,
            "<tr class=\"finding\"><td class=\"{class}\">{label}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&f.check),
            esc_with(&f.summary, true),
            esc_with(&f.remedy, true)
        );
    }
    out.push_str("</tbody></table>");
    out
}
