//! Dead letters (DLP-7): counts by queue and reason, a filtered listing of the queue's dead
//! letters or the outbox's dead rows, one letter's headers and body (text or hex), and the
//! configured policies with their stuck letters (DLP-5).
//!
//! Cost: the listing is the dead-letter API's keyset page of at most [`PAGE`] rows, bodies
//! left in the table (`queue_dead_letter_idx` by queue; other filters stop after a page of
//! matches); the counts are the overview's bounded sample; a letter is read by its message
//! id; each redrive policy's stuck letters are counted through `queue_dead_letter_idx` /
//! `dead_failed_at_idx` (the type's letters past `after`).

use std::fmt::Write as _;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use relayer_core::dead_letter::DeadLetterType;
use relayer_core::{MessageId, Timestamp, Uuid};
use relayer_postgres::{OutboxDeadFilter, QueueDeadLetterFilter};
use serde::Deserialize;

use super::overview::{approx, sample};
use super::{Failure, connection, or_dash, render};
use crate::PAGE;
use crate::format::age;
use crate::html::{esc, esc_with, query, table, td, td_n};
use crate::state::Shared;

/// The most body bytes a page shows: a dead letter may hold 64 MiB.
const BODY_SHOWN: usize = 256 * 1024;

/// Which dead letters: the listing's filter, and an action's selection.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Selection {
    /// `queue` (the queue table's dead letters, the default) or `outbox` (the dead table).
    pub(crate) kind: String,
    /// One message id.
    pub(crate) id: String,
    pub(crate) queue: String,
    pub(crate) topic: String,
    pub(crate) reason: String,
    pub(crate) transport: String,
    pub(crate) destination: String,
    pub(crate) lane: String,
    /// A human duration: `1h`, `2d`.
    pub(crate) older_than: String,
    pub(crate) after_seq: String,
    /// How many an action touches at most (default [`PAGE`]).
    pub(crate) limit: String,
}

/// A listing or selection, parsed.
pub(crate) enum Filter {
    Queue(QueueDeadLetterFilter),
    Outbox(OutboxDeadFilter),
}

impl Selection {
    pub(crate) fn outbox(&self) -> bool {
        self.kind == "outbox"
    }

    /// The pairs that reproduce it in a link or a form.
    pub(crate) fn pairs(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("kind", self.kind.as_str()),
            ("id", self.id.as_str()),
            ("queue", self.queue.as_str()),
            ("topic", self.topic.as_str()),
            ("reason", self.reason.as_str()),
            ("transport", self.transport.as_str()),
            ("destination", self.destination.as_str()),
            ("lane", self.lane.as_str()),
            ("older_than", self.older_than.as_str()),
            ("limit", self.limit.as_str()),
        ]
    }

    /// Whether it names anything beyond the kind (an action needs a criterion).
    pub(crate) fn has_criterion(&self) -> bool {
        self.pairs().iter().any(|(k, v)| !v.is_empty() && *k != "kind" && *k != "limit")
    }

    /// The filter it describes, refused in one line naming the field.
    pub(crate) fn filter(&self, limit: u32) -> Result<Filter, String> {
        let id = match self.id.trim() {
            "" => None,
            id => Some(MessageId::from_uuid(
                Uuid::parse_str(id).map_err(|e| format!("message id {id:?}: not a UUID ({e})"))?,
            )),
        };
        let older_than = match self.older_than.trim() {
            "" => None,
            text => Some(
                relayer_core::duration::parse_duration(text)
                    .map_err(|e| format!("older than {text:?}: {e}"))?,
            ),
        };
        let after_seq = match self.after_seq.trim() {
            "" => None,
            text => Some(text.parse::<i64>().map_err(|_| format!("after seq {text:?}: not a number"))?),
        };
        let some = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
        match self.kind.as_str() {
            "" | "queue" => {
                for (name, value) in
                    [("transport", &self.transport), ("destination", &self.destination), ("lane", &self.lane)]
                {
                    if !value.trim().is_empty() {
                        return Err(format!("{name} selects outbox dead rows: choose the outbox"));
                    }
                }
                let mut filter = QueueDeadLetterFilter::new().limit(limit);
                if let Some(q) = some(&self.queue) {
                    filter = filter.queue(q);
                }
                if let Some(t) = some(&self.topic) {
                    filter = filter.original_topic(t);
                }
                if let Some(r) = some(&self.reason) {
                    filter = filter.reason(r);
                }
                if let Some(a) = older_than {
                    filter = filter.older_than(a);
                }
                if let Some(s) = after_seq {
                    filter = filter.after_seq(s);
                }
                if let Some(id) = id {
                    filter = filter.message_id(id);
                }
                Ok(Filter::Queue(filter))
            }
            "outbox" => {
                for (name, value) in
                    [("queue", &self.queue), ("topic", &self.topic), ("reason", &self.reason)]
                {
                    if !value.trim().is_empty() {
                        return Err(format!("{name} selects queue dead letters: choose the queue"));
                    }
                }
                let mut filter = OutboxDeadFilter::new().limit(limit);
                if let Some(t) = some(&self.transport) {
                    filter = filter.transport(t);
                }
                if let Some(d) = some(&self.destination) {
                    filter = filter.destination(d);
                }
                if let Some(l) = some(&self.lane) {
                    filter = filter.lane(l);
                }
                if let Some(a) = older_than {
                    filter = filter.older_than(a);
                }
                if let Some(s) = after_seq {
                    filter = filter.after_seq(s);
                }
                if let Some(id) = id {
                    filter = filter.message_id(id);
                }
                Ok(Filter::Outbox(filter))
            }
            other => Err(format!("kind {other:?}: queue or outbox")),
        }
    }
}

fn ago(now: SystemTime, at: Timestamp) -> String {
    age(now.duration_since(at.to_system_time()).unwrap_or_default())
}

pub(crate) async fn list(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Query(selection): Query<Selection>,
) -> Response {
    let body = list_body(&shared, &selection).await;
    render(&shared, &headers, "Dead letters", "/dead-letters", body)
}

async fn list_body(shared: &Shared, selection: &Selection) -> Result<String, Failure> {
    let filter = selection.filter(PAGE).map_err(|e| Failure::new(StatusCode::BAD_REQUEST, e))?;
    let status = sample(shared).await?;
    let conn = connection(&shared.pool).await?;
    let mut out = String::from("<h2>By queue and reason</h2>");
    let rows: Vec<String> = status
        .dead_letters
        .iter()
        .map(|d| {
            let reason = d.reason.clone().unwrap_or_default();
            format!(
                "<td><a href=\"/dead-letters{}\">{}</a></td>{}{}{}",
                query(&[("queue", &d.queue), ("reason", &reason)]),
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
    let _ = write!(
        out,
        "<p>Outbox dead rows: <b id=\"dead-rows\">{}{}</b> (<a href=\"/dead-letters?kind=outbox\">list them</a>).</p>",
        approx(status.dead),
        status.dead
    );
    out.push_str(&filter_form(selection));
    let now = SystemTime::now();
    let (rows, last_seq, headers): (Vec<String>, Option<i64>, &[&str]) = match &filter {
        Filter::Queue(filter) => {
            let letters =
                shared.dead_letters.list_queue(&*conn, filter).await.map_err(|e| Failure::database(&e))?;
            let rows = letters
                .iter()
                .map(|l| {
                    format!(
                        "<td class=\"n\">{}</td><td><a class=\"message\" href=\"/dead-letters/message/{id}\">{id}</a></td>{}{}{}{}{}<td class=\"n\">{}</td>",
                        l.seq,
                        td(&l.queue),
                        format_args!("<td>{}</td>", or_dash(l.original_topic.as_deref())),
                        format_args!("<td>{}</td>", or_dash(l.rejection_reason.as_deref())),
                        format_args!("<td>{}</td>", or_dash(l.rejection_message.as_deref())),
                        td(&ago(now, l.dead_lettered_at)),
                        l.body_bytes,
                        id = l.message_id,
                    )
                })
                .collect();
            (
                rows,
                letters.last().map(|l| l.seq),
                &["seq", "message id", "queue", "from", "reason", "message", "dead for", "bytes"],
            )
        }
        Filter::Outbox(filter) => {
            let dead =
                shared.dead_letters.list_outbox(&*conn, filter).await.map_err(|e| Failure::database(&e))?;
            let rows = dead
                .iter()
                .map(|r| {
                    format!(
                        "<td class=\"n\">{}</td><td><a class=\"message\" href=\"/dead-letters/message/{id}\">{id}</a></td>{}{}<td>{}</td><td class=\"n\">{}</td><td>{}</td>{}<td class=\"n\">{}</td>",
                        r.seq,
                        td(&r.transport),
                        td(&r.destination),
                        or_dash(r.lane.as_deref()),
                        r.attempts,
                        or_dash(r.last_error.as_deref()),
                        td(&ago(now, r.failed_at)),
                        r.body_bytes,
                        id = r.message_id,
                    )
                })
                .collect();
            (
                rows,
                dead.last().map(|r| r.seq),
                &[
                    "seq",
                    "message id",
                    "transport",
                    "destination",
                    "lane",
                    "tries",
                    "last error",
                    "dead for",
                    "bytes",
                ],
            )
        }
    };
    let _ = write!(
        out,
        "<p>Showing <b id=\"listed-count\">{}</b> {}.</p>",
        rows.len(),
        if selection.outbox() { "dead outbox row(s)" } else { "queue dead letter(s)" }
    );
    out.push_str(&table("letters", headers, &rows, "Nothing matches."));
    if let Some(last) = last_seq.filter(|_| rows.len() >= PAGE as usize) {
        let mut pairs = selection.pairs();
        let last = last.to_string();
        pairs.push(("after_seq", &last));
        let _ =
            write!(out, "<p><a id=\"next-page\" href=\"/dead-letters{}\">next page →</a></p>", query(&pairs));
    }
    if shared.settings.actions && selection.has_criterion() && !rows.is_empty() {
        let pairs = selection.pairs();
        let redrive = [&[("action", "redrive")][..], &pairs].concat();
        let purge = [&[("action", "purge")][..], &pairs].concat();
        let _ = write!(
            out,
            "<p>What this filter selects (at most {PAGE} at a time): <a id=\"redrive-selection\" href=\"/actions/preview{}\">redrive…</a> · \
             <a id=\"purge-selection\" href=\"/actions/preview{}\">purge…</a> (each shows a dry run first)</p>",
            query(&redrive),
            query(&purge),
        );
    }
    out.push_str(&policies(shared, &conn).await?);
    Ok(out)
}

fn filter_form(s: &Selection) -> String {
    let field = |name: &str, label: &str, value: &str| {
        format!("<label>{label} <input name=\"{name}\" value=\"{}\" size=\"14\"></label>", esc(value))
    };
    let selected = |outbox: bool| if s.outbox() == outbox { " selected" } else { "" };
    format!(
        "<h2>Listing</h2><form class=\"filters\" method=\"get\" action=\"/dead-letters\">\
         <label>table <select name=\"kind\"><option value=\"queue\"{}>queue dead letters</option>\
         <option value=\"outbox\"{}>outbox dead rows</option></select></label>{}{}{}{}{}{}{}{} <button type=\"submit\">Filter</button></form>",
        selected(false),
        selected(true),
        field("queue", "queue", &s.queue),
        field("topic", "from topic", &s.topic),
        field("reason", "reason", &s.reason),
        field("transport", "transport", &s.transport),
        field("destination", "destination", &s.destination),
        field("lane", "lane", &s.lane),
        field("older_than", "older than", &s.older_than),
        field("id", "message id", &s.id),
    )
}

/// The configured policies, with each redrive policy's stuck letters.
async fn policies(shared: &Shared, conn: &relayer_postgres::PgConnection<'_>) -> Result<String, Failure> {
    let mut out = String::from("<h2>Redrive and expire policies</h2>");
    let Some(policies) = &shared.policies else {
        out.push_str("<p class=\"muted\" id=\"policies-empty\">This sidecar runs no dead-letter policy ([[dead_letter_policies]]).</p>");
        return Ok(out);
    };
    let mut rows = Vec::new();
    for rule in policies.rules() {
        let policy = rule.policy();
        let stuck = match policy.give_up_after() {
            Some(give_up) => {
                let count = shared
                    .policy_statements
                    .stuck(&**conn, rule.message_type(), policy.after(), give_up)
                    .await
                    .map_err(|e| Failure::database(&e))?;
                let class = if count > 0 { "n stuck bad" } else { "n stuck" };
                // A count at the cap stopped there (a bounded read): at least that many.
                let at_least = if count >= relayer_postgres::STUCK_COUNT_CAP { "≥" } else { "" };
                format!("<td class=\"{class}\">{at_least}{count}</td>")
            }
            None => "<td class=\"n\">-</td>".to_owned(),
        };
        let (what, link) = match rule.message_type() {
            DeadLetterType::Queue { original_topic, dead_letter_queue } => (
                format!("queue {original_topic} → {dead_letter_queue}"),
                query(&[("queue", dead_letter_queue), ("topic", original_topic)]),
            ),
            DeadLetterType::Outbox { transport, destination } => (
                format!("outbox {transport}:{destination}"),
                query(&[("kind", "outbox"), ("transport", transport), ("destination", destination)]),
            ),
        };
        rows.push(format!(
            "<td><a href=\"/dead-letters{link}\">{}</a></td>{}{stuck}",
            esc(&what),
            td(&policy.to_string())
        ));
    }
    out.push_str(&table("policies", &["message type", "policy", "stuck (gave up)"], &rows, ""));
    out.push_str(
        "<p class=\"muted\">Stuck letters are due for redrive but older than give_up_after: the policy no longer \
         moves them; redrive or purge them by hand.</p>",
    );
    Ok(out)
}

/// `?view=hex` shows a body as hex even when it is text.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct View {
    view: String,
}

pub(crate) async fn message(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(view): Query<View>,
) -> Response {
    let body = message_body(&shared, &id, view.view == "hex").await;
    render(&shared, &headers, "Dead letter", "/dead-letters", body)
}

async fn message_body(shared: &Shared, id: &str, hex: bool) -> Result<String, Failure> {
    let uuid = Uuid::parse_str(id)
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, format!("message id {id:?}: not a UUID ({e})")))?;
    let id = MessageId::from_uuid(uuid);
    let conn = connection(&shared.pool).await?;
    let queue = shared.dead_letters.show_queue(&*conn, id).await.map_err(|e| Failure::database(&e))?;
    let outbox = shared.dead_letters.show_outbox(&*conn, id).await.map_err(|e| Failure::database(&e))?;
    if queue.is_none() && outbox.is_none() {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("no dead letter with message id {id} in {}", shared.namespace),
        ));
    }
    let mut out = String::new();
    if let Some(l) = &queue {
        let fields = [
            ("kind", "queue dead letter".to_owned()),
            ("seq", l.seq.to_string()),
            ("message id", l.message_id.to_string()),
            ("queue", l.queue.clone()),
            ("from topic", l.original_topic.clone().unwrap_or_else(|| "-".to_owned())),
            ("reason", l.rejection_reason.clone().unwrap_or_else(|| "-".to_owned())),
            ("message", l.rejection_message.clone().unwrap_or_else(|| "-".to_owned())),
            ("handled", l.handled_count.to_string()),
            ("created", l.created_at.to_string()),
            ("dead-lettered", l.dead_lettered_at.to_string()),
            ("trace context", l.trace_context.clone().unwrap_or_else(|| "-".to_owned())),
        ];
        out.push_str(&letter(
            shared,
            "queue",
            &l.message_id.to_string(),
            &fields,
            l.headers.iter(),
            &l.body,
            l.body_bytes,
            hex,
        ));
    }
    if let Some(r) = &outbox {
        let fields = [
            ("kind", "outbox dead row".to_owned()),
            ("seq", r.seq.to_string()),
            ("message id", r.message_id.to_string()),
            ("transport", r.transport.clone()),
            ("destination", r.destination.clone()),
            ("lane", r.lane.clone().unwrap_or_else(|| "-".to_owned())),
            ("tries", r.attempts.to_string()),
            ("last error", r.last_error.clone().unwrap_or_else(|| "-".to_owned())),
            ("created", r.created_at.to_string()),
            ("failed", r.failed_at.to_string()),
            ("trace context", r.trace_context.clone().unwrap_or_else(|| "-".to_owned())),
        ];
        out.push_str(&letter(
            shared,
            "outbox",
            &r.message_id.to_string(),
            &fields,
            r.headers.iter(),
            &r.body,
            r.body_bytes,
            hex,
        ));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn letter<'a>(
    shared: &Shared,
    kind: &str,
    id: &str,
    fields: &[(&str, String)],
    headers: impl Iterator<Item = (&'a String, &'a String)>,
    body: &[u8],
    body_bytes: i64,
    hex: bool,
) -> String {
    let mut out = String::from("<table class=\"fields\"><tbody>");
    for (name, value) in fields {
        let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(name), esc_with(value, true));
    }
    out.push_str("</tbody></table><h2>Headers</h2>");
    let mut sorted: Vec<(&String, &String)> = headers.collect();
    sorted.sort();
    let rows: Vec<String> = sorted.iter().map(|(k, v)| format!("{}{}", td(k), td(v))).collect();
    out.push_str(&table(&format!("{kind}-headers"), &["name", "value"], &rows, "No headers."));
    let text = std::str::from_utf8(body).ok().filter(|_| !hex);
    let other_view = if text.is_some() || hex { "" } else { " (not UTF-8)" };
    let _ = write!(
        out,
        "<h2>Body: {body_bytes} bytes{other_view}</h2><p><a href=\"/dead-letters/message/{id}\">as text</a> · \
         <a href=\"/dead-letters/message/{id}?view=hex\">as hex</a></p>"
    );
    let shown = &body[..body.len().min(BODY_SHOWN)];
    let rendered = match text {
        Some(_) => esc_with(&String::from_utf8_lossy(shown), true),
        None => hex_dump(shown),
    };
    let _ = write!(out, "<pre id=\"{kind}-body\">{rendered}</pre>");
    if body.len() > BODY_SHOWN {
        let _ = write!(out, "<p class=\"note\">First {BODY_SHOWN} bytes shown.</p>");
    }
    if shared.settings.actions {
        let _ = write!(
            out,
            "<p><a class=\"redrive\" href=\"/actions/preview{}\">redrive…</a> · <a class=\"purge\" href=\"/actions/preview{}\">purge…</a></p>",
            query(&[("action", "redrive"), ("kind", kind), ("id", id)]),
            query(&[("action", "purge"), ("kind", kind), ("id", id)]),
        );
    }
    out
}

/// Sixteen bytes a line: offset, hex, and the printable ASCII (others as `.`).
fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 4);
    for (line, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", line * 16);
        for b in chunk {
            let _ = write!(out, "{b:02x} ");
        }
        for _ in chunk.len()..16 {
            out.push_str("   ");
        }
        out.push(' ');
        let ascii: String = chunk
            .iter()
            .map(|&b| if b.is_ascii_graphic() || b == b' ' { char::from(b) } else { '.' })
            .collect();
        out.push_str(&esc(&ascii));
        out.push('\n');
    }
    out
}

/// How many an action selects at most: the `limit` field, else [`PAGE`].
pub(crate) fn action_limit(selection: &Selection) -> Result<u32, String> {
    match selection.limit.trim() {
        "" => Ok(PAGE),
        text => match text.parse::<u32>() {
            Ok(n) if (1..=10_000).contains(&n) => Ok(n),
            _ => Err(format!("limit {text:?}: a number from 1 to 10000")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hex_dump_shows_offsets_bytes_and_escaped_ascii() {
        let dump = hex_dump(b"<a>\x00\xff");
        assert_eq!(dump, format!("00000000  3c 61 3e 00 ff {}&lt;a&gt;..\n", " ".repeat(34)));
    }

    #[test]
    fn a_selection_refuses_fields_of_the_other_table_naming_them() {
        let s = Selection { transport: "x".into(), ..Selection::default() };
        assert_eq!(
            s.filter(10).err().as_deref(),
            Some("transport selects outbox dead rows: choose the outbox")
        );
        let s = Selection { kind: "outbox".into(), queue: "q".into(), ..Selection::default() };
        assert_eq!(s.filter(10).err().as_deref(), Some("queue selects queue dead letters: choose the queue"));
        let s = Selection { older_than: "5 parsecs".into(), ..Selection::default() };
        assert!(s.filter(10).err().unwrap_or_default().starts_with("older than \"5 parsecs\""));
        assert!(!Selection { kind: "outbox".into(), ..Selection::default() }.has_criterion());
        assert!(Selection { reason: "r".into(), ..Selection::default() }.has_criterion());
    }
}
