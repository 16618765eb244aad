//! Lanes: the parked lanes (LAN-2), oldest park first, with their head's error and, when
//! actions are on, release and skip.
//!
//! Cost: at most [`PAGE`] parked lanes through `lanes_parked_idx`, each head by
//! `outbox_pkey`, each lane's waiting rows counted up to [`SAMPLE_CAP`] through
//! `outbox_lane_idx`: never a grouping of the outbox.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::{Failure, connection, or_dash, render};
use crate::format::maybe_age;
use crate::html::{esc, query, table, td};
use crate::state::Shared;
use crate::{PAGE, SAMPLE_CAP};

pub(crate) async fn show(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let body = body(&shared).await;
    render(&shared, &headers, "Lanes", "/lanes", body)
}

async fn body(shared: &Shared) -> Result<String, Failure> {
    let conn = connection(&shared.pool).await?;
    let lanes = shared
        .lanes
        .parked(&*conn, i64::from(PAGE), i64::from(SAMPLE_CAP))
        .await
        .map_err(|e| Failure::database(&e))?;
    let mut out = format!(
        "<p>Parked lanes: <b id=\"parked-count\">{}{}</b>. A parked lane holds everything behind its head until \
         an operator releases it (the head is tried again with a fresh attempt count) or skips the head (it moves \
         to the dead table; the lane goes on).</p>",
        lanes.len(),
        if lanes.len() >= PAGE as usize { "+" } else { "" }
    );
    let rows: Vec<String> = lanes
        .iter()
        .map(|l| {
            let waiting = if l.waiting >= i64::from(SAMPLE_CAP) { format!("≥{}", l.waiting) } else { l.waiting.to_string() };
            let error = l.head_error.as_deref().or(l.parked_reason.as_deref());
            let mut row = format!(
                "<td class=\"lane\">{}</td>{}{}{}<td class=\"n waiting\">{waiting}</td><td class=\"head-error\">{}</td>",
                esc(&l.lane),
                td(&maybe_age(l.parked_for)),
                td(&l.head_seq.map_or_else(|| "-".to_owned(), |s| s.to_string())),
                td(&l.head_attempts.map_or_else(|| "-".to_owned(), |a| a.to_string())),
                or_dash(error),
            );
            if shared.settings.actions {
                let _ = write!(
                    row,
                    "<td><a href=\"/actions/preview{}\">release…</a> · <a href=\"/actions/preview{}\">skip head…</a></td>",
                    query(&[("action", "release"), ("lane", &l.lane)]),
                    query(&[("action", "skip"), ("lane", &l.lane)]),
                );
            }
            row
        })
        .collect();
    let mut headers = vec!["lane", "parked for", "head seq", "tries", "waiting", "head's error"];
    if shared.settings.actions {
        headers.push("actions");
    }
    out.push_str(&table("lanes", &headers, &rows, "No lane is parked."));
    Ok(out)
}
