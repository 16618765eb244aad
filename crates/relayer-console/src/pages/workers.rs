//! Workers: each worker's last pass (stalled ones flagged), the leases that say who leads
//! and with which term, the live instances and where their settings disagree (OPT-4).
//!
//! Cost: the overview's bounded sample (the lease and instance tables are a row per job
//! and per live instance and worker).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::overview::sample;
use super::{Failure, render};
use crate::format::{age, maybe_age};
use crate::html::{esc, table, td};
use crate::state::Shared;

pub(crate) async fn show(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let body = body(&shared).await;
    render(&shared, &headers, "Workers", "/workers", body)
}

async fn body(shared: &Shared) -> Result<String, Failure> {
    let status = sample(shared).await?;
    let mut out = String::from("<h2>Last successful pass</h2>");
    let rows: Vec<String> = status
        .workers
        .iter()
        .map(|w| {
            let state =
                if w.stalled { "<td class=\"bad stalled\">STALLED</td>" } else { "<td class=\"ok\">ok</td>" };
            format!(
                "{}{}{}{}<td class=\"n\">{}</td>{state}",
                td(&w.worker),
                td(&format!("{} ago", age(w.since))),
                td(w.source.name()),
                td(&maybe_age(w.interval)),
                w.instances,
            )
        })
        .collect();
    out.push_str(&table(
        "workers",
        &["worker", "last pass", "from", "interval", "instances", "state"],
        &rows,
        "No worker has recorded a pass in this namespace.",
    ));
    out.push_str(
        "<p class=\"muted\">A worker is stalled when its last pass is older than its stall bound \
         (a few intervals): the lease's renewal, else the instance heartbeat.</p><h2>Leadership</h2>",
    );
    let rows: Vec<String> = status
        .leases
        .iter()
        .map(|l| {
            let expiry = Duration::from_micros(l.expires_in_micros.unsigned_abs());
            let (state, expires) = if l.live() {
                ("<td class=\"ok\">held</td>", format!("in {}", age(expiry)))
            } else {
                ("<td class=\"bad\">expired</td>", format!("{} ago", age(expiry)))
            };
            format!(
                "{}{}<td class=\"n term\">{}</td>{state}{}{}{}",
                td(&l.job),
                td(&l.owner),
                l.term,
                td(&format!("{} ago", age(l.since_renewal))),
                td(&expires),
                td(&age(l.held_for)),
            )
        })
        .collect();
    out.push_str(&table(
        "leases",
        &["job", "leader", "term", "state", "renewed", "expires", "held for"],
        &rows,
        "No lease has been taken.",
    ));
    out.push_str("<h2>Instances seen within 10 minutes</h2>");
    let rows: Vec<String> = status
        .instances
        .iter()
        .map(|i| {
            let settings: String = i
                .settings
                .iter()
                .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
                .collect::<Vec<_>>()
                .join("<br>");
            format!(
                "{}{}<td title=\"{fp}\"><code>{short}</code></td>{}{}{}<td><small>{settings}</small></td>",
                td(&i.worker),
                td(&i.instance),
                td(&format!("{} ago", age(i.since_seen))),
                td(&age(i.running_for)),
                td(&if i.transports.is_empty() { "-".to_owned() } else { i.transports.join(", ") }),
                fp = esc(&i.fingerprint),
                // The whole fingerprint is in the title; a prefix tells groups apart.
                short = esc(&i.fingerprint.chars().take(12).collect::<String>()),
            )
        })
        .collect();
    out.push_str(&table(
        "instances",
        &["worker", "instance", "fingerprint", "seen", "running", "transports", "settings"],
        &rows,
        "No live instance.",
    ));
    out.push_str("<h2>Settings disagreements</h2>");
    if status.disagreements.is_empty() {
        out.push_str("<p class=\"ok\" id=\"disagreements-empty\">Every worker's live instances agree on their settings.</p>");
    } else {
        for d in &status.disagreements {
            let _ = write!(
                out,
                "<div class=\"note disagreement\"><b>{}</b>: instances differ on {}<ul>",
                esc(&d.worker),
                esc(&d.settings.join(", "))
            );
            let groups: BTreeMap<&String, &Vec<String>> = d.groups.iter().map(|(f, i)| (f, i)).collect();
            for (fingerprint, instances) in groups {
                let _ = write!(out, "<li>{}: {}</li>", esc(fingerprint), esc(&instances.join(", ")));
            }
            out.push_str("</ul></div>");
        }
    }
    Ok(out)
}
