//! Actions: redrive and purge dead letters (DLP-7), release a parked lane or skip its head
//! (LAN-2, LAN-5) — each in two steps, as the CLI's `--dry-run` then the act:
//!
//! 1. `GET /actions/preview?…` runs the dry run and shows what the action would touch, with
//!    a confirmation form carrying the selection and the CSRF token;
//! 2. `POST /actions/apply` checks that actions are on, the CSRF token, the request's origin
//!    and its actor, then acts through relayer-postgres' audited statements (the action and
//!    its audit row commit together) and shows what it touched.
//!
//! The confirmation applies the *selection* again, as the CLI does: a row that joined it
//! since the preview may be touched too, within the same limit; the result page lists what
//! was.

use std::fmt::Write as _;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use relayer_postgres::{Mode, Touched};
use serde::Deserialize;

use crate::auth::{actor, same};
use crate::html::{esc, table, td};
use crate::pages::dead_letters::{Filter, Selection, action_limit};
use crate::pages::{Failure, connection, render};
use crate::state::Shared;

/// An action request: what to do, to which selection, and (on apply) the CSRF token.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ActionRequest {
    action: String,
    #[serde(flatten)]
    selection: Selection,
    csrf: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Redrive,
    Purge,
    Release,
    Skip,
}

impl Verb {
    fn parse(action: &str) -> Result<Verb, Failure> {
        match action {
            "redrive" => Ok(Verb::Redrive),
            "purge" => Ok(Verb::Purge),
            "release" => Ok(Verb::Release),
            "skip" => Ok(Verb::Skip),
            other => Err(Failure::new(
                StatusCode::BAD_REQUEST,
                format!("action {other:?}: redrive, purge, release or skip"),
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Verb::Redrive => "redrive",
            Verb::Purge => "purge",
            Verb::Release => "release",
            Verb::Skip => "skip",
        }
    }
}

/// Refused unless actions are on.
fn enabled(shared: &Shared) -> Result<(), Failure> {
    if shared.settings.actions {
        Ok(())
    } else {
        Err(Failure::new(
            StatusCode::FORBIDDEN,
            "actions are off in this console (console.actions = false): nothing was changed",
        ))
    }
}

pub(crate) async fn preview(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Query(request): Query<ActionRequest>,
) -> Response {
    let body = preview_body(&shared, &headers, &request).await;
    render(&shared, &headers, "Confirm action", "", body)
}

async fn preview_body(
    shared: &Shared,
    headers: &HeaderMap,
    request: &ActionRequest,
) -> Result<String, Failure> {
    enabled(shared)?;
    let verb = Verb::parse(&request.action)?;
    let who = actor(shared, headers).map_err(|e| Failure::new(StatusCode::FORBIDDEN, e))?;
    let conn = connection(&shared.pool).await?;
    let mut out = String::new();
    let touches = match verb {
        Verb::Redrive | Verb::Purge => {
            let touched = dead_letters(shared, &conn, verb, &request.selection, &who, Mode::DryRun).await?;
            let _ = write!(
                out,
                "<p class=\"note\">Dry run: {} would touch <b id=\"preview-count\">{}</b> {}; nothing has changed yet.</p>",
                verb.name(),
                touched.len(),
                if request.selection.outbox() { "dead outbox row(s)" } else { "queue dead letter(s)" },
            );
            out.push_str(&touched_table("preview", &touched));
            !touched.is_empty()
        }
        Verb::Release | Verb::Skip => {
            let lane = lane(&request.selection)?;
            match shared.lanes.parked_head(&*conn, lane).await.map_err(|e| Failure::database(&e))? {
                None => {
                    let _ = write!(
                        out,
                        "<p class=\"note\" id=\"preview-count\" data-count=\"0\">Lane {} is not parked: nothing to {}.</p>",
                        esc(lane),
                        verb.name()
                    );
                    false
                }
                Some(head) => {
                    let what = if verb == Verb::Release {
                        "its head is tried again at once with a fresh attempt count"
                    } else {
                        "its head moves to the dead table and the rest of the lane goes on"
                    };
                    let _ = write!(
                        out,
                        "<p class=\"note\" id=\"preview-count\" data-count=\"1\">Dry run: lane <b>{}</b> is parked (head seq {}); \
                         {} would mean {what}.</p>",
                        esc(lane),
                        head.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                        verb.name(),
                    );
                    true
                }
            }
        }
    };
    if touches {
        let mut hidden = format!("<input type=\"hidden\" name=\"action\" value=\"{}\">", verb.name());
        for (name, value) in request.selection.pairs() {
            if !value.is_empty() {
                let _ = write!(hidden, "<input type=\"hidden\" name=\"{name}\" value=\"{}\">", esc(value));
            }
        }
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/actions/apply\" id=\"confirm\">{hidden}\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <p>Audited as <b id=\"actor\">{who}</b>.</p>\
             <button type=\"submit\" class=\"danger\" id=\"confirm-button\">Confirm {verb}</button> \
             <a href=\"/\">cancel</a></form>",
            csrf = esc(&shared.csrf),
            who = esc(&who),
            verb = verb.name(),
        );
    }
    Ok(out)
}

pub(crate) async fn apply(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Form(request): Form<ActionRequest>,
) -> Response {
    let body = apply_body(&shared, &headers, &request).await;
    render(&shared, &headers, "Action", "", body)
}

async fn apply_body(
    shared: &Shared,
    headers: &HeaderMap,
    request: &ActionRequest,
) -> Result<String, Failure> {
    enabled(shared)?;
    if !same(&request.csrf, &shared.csrf) {
        return Err(Failure::new(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale (the console restarted?): open the action again; nothing was changed",
        ));
    }
    // A browser says where a form came from: another site's page may not post here.
    if headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).is_some_and(|site| site == "cross-site") {
        return Err(Failure::new(
            StatusCode::FORBIDDEN,
            "a cross-site request may not act: nothing was changed",
        ));
    }
    let verb = Verb::parse(&request.action)?;
    let who = actor(shared, headers).map_err(|e| Failure::new(StatusCode::FORBIDDEN, e))?;
    let conn = connection(&shared.pool).await?;
    let mut out = String::new();
    match verb {
        Verb::Redrive | Verb::Purge => {
            let touched = dead_letters(shared, &conn, verb, &request.selection, &who, Mode::Apply).await?;
            let done = if verb == Verb::Redrive { "Redriven" } else { "Purged" };
            let _ = write!(
                out,
                "<p class=\"ok\">{done} <b id=\"result-count\">{}</b> {}, audited as <b id=\"actor\">{}</b>.</p>",
                touched.len(),
                if request.selection.outbox() { "dead outbox row(s)" } else { "queue dead letter(s)" },
                esc(&who)
            );
            out.push_str(&touched_table("result", &touched));
        }
        Verb::Release | Verb::Skip => {
            let lane = lane(&request.selection)?;
            let head = if verb == Verb::Release {
                shared.lanes.release(&*conn, lane, &who).await.map_err(|e| Failure::database(&e))?
            } else {
                shared.lanes.skip(&*conn, lane, &who).await.map_err(|e| Failure::database(&e))?.map(Some)
            };
            match head {
                None => {
                    let _ = write!(
                        out,
                        "<p class=\"note\" id=\"result-count\">0</p><p>Lane {} was not parked: nothing changed.</p>",
                        esc(lane)
                    );
                }
                Some(head) => {
                    let done = if verb == Verb::Release { "released" } else { "skipped its head" };
                    let _ = write!(
                        out,
                        "<p class=\"ok\">Lane <b>{}</b> {done} (head seq {}), audited as <b id=\"actor\">{}</b>. \
                         <span id=\"result-count\" hidden>1</span></p>",
                        esc(lane),
                        head.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                        esc(&who),
                    );
                }
            }
        }
    }
    out.push_str("<p><a href=\"/dead-letters\">dead letters</a> · <a href=\"/lanes\">lanes</a></p>");
    Ok(out)
}

fn lane(selection: &Selection) -> Result<&str, Failure> {
    match selection.lane.trim() {
        "" => Err(Failure::new(StatusCode::BAD_REQUEST, "release and skip need a lane")),
        lane => Ok(lane),
    }
}

/// Redrives or purges the selection (or its dry run).
async fn dead_letters(
    shared: &Shared,
    conn: &relayer_postgres::PgConnection<'_>,
    verb: Verb,
    selection: &Selection,
    who: &str,
    mode: Mode,
) -> Result<Vec<Touched>, Failure> {
    if !selection.has_criterion() {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "an action needs a selection (a message id, a queue, a reason, a destination…), never the whole table",
        ));
    }
    let limit = action_limit(selection).map_err(|e| Failure::new(StatusCode::BAD_REQUEST, e))?;
    let filter = selection.filter(limit).map_err(|e| Failure::new(StatusCode::BAD_REQUEST, e))?;
    let api = &shared.dead_letters;
    let client = &**conn;
    let touched = match (verb, &filter) {
        (Verb::Redrive, Filter::Queue(f)) => api.redrive_queue(client, f, who, mode).await,
        (Verb::Redrive, Filter::Outbox(f)) => api.redrive_outbox(client, f, who, mode).await,
        (_, Filter::Queue(f)) => api.purge_queue(client, f, who, mode).await,
        (_, Filter::Outbox(f)) => api.purge_outbox(client, f, who, mode).await,
    };
    touched.map_err(|e| match e {
        relayer_postgres::DeadLetterApiError::Invalid(message) => {
            Failure::new(StatusCode::BAD_REQUEST, message)
        }
        other => Failure::database(&other),
    })
}

fn touched_table(id: &str, touched: &[Touched]) -> String {
    let rows: Vec<String> = touched
        .iter()
        .map(|t| format!("<td class=\"n\">{}</td>{}", t.seq, td(&t.message_id.to_string())))
        .collect();
    table(id, &["seq", "message id"], &rows, "Nothing matches.")
}
