//! The overview: backlog and oldest pending age per transport and destination, what no
//! live instance can send, parked lanes, dead rows and letters, stalled workers, and the
//! last hour's chart.
//!
//! Cost: one bounded sample (`namespace_gauges` with [`SAMPLE_CAP`], the sidecar sampler's
//! statements): at most that many rows of the outbox (by its primary key), of the dead table
//! and of the queue's dead letters (`queue_dead_letter_idx`), parked lanes through
//! `lanes_parked_idx`, and the small lease and instance tables. The chart reads memory.

use std::fmt::Write as _;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use relayer_postgres::{NamespaceStatus, namespace_gauges};

use super::{Failure, connection, render};
use crate::format::{age, maybe_age};
use crate::html::{esc, query, table, td, td_n};
use crate::state::Shared;
use crate::{SAMPLE_CAP, chart};

pub(crate) async fn show(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let body = body(&shared).await;
    render(&shared, &headers, "Overview", "/", body)
}

/// The namespace's bounded sample, or why not.
pub(crate) async fn sample(shared: &Shared) -> Result<NamespaceStatus, Failure> {
    let conn = connection(&shared.pool).await?;
    let status =
        namespace_gauges(&**conn, &shared.namespace, SAMPLE_CAP).await.map_err(|e| Failure::database(&e))?;
    if status.schema_version.is_none() {
        return Err(Failure::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("namespace {}: no relayer schema (run `relayer schema apply`)", shared.namespace),
        ));
    }
    Ok(status)
}

/// `≈` before a count read past the sample's cap (an estimate or a lower bound).
pub(crate) fn approx(count: i64) -> &'static str {
    if count >= i64::from(SAMPLE_CAP) { "≈" } else { "" }
}

async fn body(shared: &Shared) -> Result<String, Failure> {
    let status = sample(shared).await?;
    let letters: i64 = status.dead_letters.iter().map(|d| d.count).sum();
    let stalled = status.workers.iter().filter(|w| w.stalled).count();
    let mut out = String::from("<div class=\"cards\">");
    for (id, label, value, bad) in [
        (
            "outbox-pending",
            "outbox pending",
            format!("{}{}", approx(status.outbox_pending), status.outbox_pending),
            false,
        ),
        ("oldest-pending", "oldest pending", maybe_age(status.oldest_pending_age), false),
        ("lanes-parked", "lanes parked", status.lanes_parked.to_string(), status.lanes_parked > 0),
        ("dead-rows", "dead outbox rows", format!("{}{}", approx(status.dead), status.dead), status.dead > 0),
        ("dead-letters", "queue dead letters", format!("{}{letters}", approx(letters)), letters > 0),
        ("workers-stalled", "workers stalled", stalled.to_string(), stalled > 0),
    ] {
        let class = if bad { " class=\"bad\"" } else { "" };
        let _ = write!(out, "<div class=\"card\"><b id=\"{id}\"{class}>{}</b>{label}</div>", esc(&value));
    }
    out.push_str("</div><h2>Last hour</h2>");
    let chart = shared.history.as_ref().map_or_else(
        || "<p class=\"muted\">No sampler history in this process.</p>".to_owned(),
        |history| chart::render(&history.samples(), history.window(), SystemTime::now()),
    );
    out.push_str(&chart);
    out.push_str("<h2>Backlog by transport and destination</h2>");
    let rows: Vec<String> = status
        .backlog
        .iter()
        .map(|b| {
            format!(
                "{}{}<td class=\"n pending\" data-transport=\"{t}\" data-destination=\"{d}\">{}{}</td>{}{}",
                td(&b.transport),
                td(&b.destination),
                approx(b.pending),
                b.pending,
                td_n("scheduled", b.scheduled),
                td(&maybe_age(b.oldest_age)),
                t = esc(&b.transport),
                d = esc(&b.destination),
            )
        })
        .collect();
    out.push_str(&table(
        "backlog",
        &["transport", "destination", "pending", "scheduled", "oldest"],
        &rows,
        "The outbox is empty.",
    ));
    if status.outbox_pending >= i64::from(SAMPLE_CAP) {
        let _ = write!(
            out,
            "<p class=\"note\">Counts are read from the oldest {SAMPLE_CAP} rows and scaled to the table's estimated size; \
             a destination whose rows are all newer is not listed.</p>"
        );
    }
    if !status.unserved.is_empty() {
        out.push_str("<h2 class=\"bad\">Waiting on a transport no live instance registers</h2>");
        let rows: Vec<String> = status
            .unserved
            .iter()
            .map(|u| {
                format!(
                    "{}<td class=\"n unserved\" data-transport=\"{}\">{}</td>{}",
                    td(&u.transport),
                    esc(&u.transport),
                    u.pending,
                    td(&maybe_age(u.oldest_age))
                )
            })
            .collect();
        out.push_str(&table("unserved", &["transport", "pending", "oldest"], &rows, ""));
    }
    out.push_str("<h2>Dead letters by queue and reason</h2>");
    let rows: Vec<String> = status
        .dead_letters
        .iter()
        .map(|d| {
            let reason = d.reason.clone().unwrap_or_default();
            let link = query(&[("queue", &d.queue), ("reason", &reason)]);
            format!(
                "<td><a href=\"/dead-letters{link}\">{}</a></td>{}{}{}",
                esc(&d.queue),
                td(d.reason.as_deref().unwrap_or("-")),
                td_n("letters", d.count),
                td(&age(d.oldest_age)),
            )
        })
        .collect();
    out.push_str(&table(
        "letters-summary",
        &["queue", "reason", "count", "oldest"],
        &rows,
        "No queue dead letters.",
    ));
    Ok(out)
}
