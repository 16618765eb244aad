//! Text from the database in HTML. A body, header, error or queue name may hold anything:
//! markup (`<script>`), quotes that would end an attribute, control characters, or Unicode
//! direction controls that reorder what a line shows ("Trojan Source"). [`esc`] makes any
//! of it inert text: the five HTML metacharacters as entities, every control character and
//! direction control as a visible `\u{…}` escape (as the CLI's tables show them).

use std::fmt::Write as _;

/// Whether `c` changes how the text around it is shown: a control character (C0, DEL, C1)
/// or a direction control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F).
fn is_hidden_effect(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// `text` as inert HTML text, safe in an element and in a double- or single-quoted
/// attribute. Line breaks are kept when `keep_newlines` (a `<pre>` body), else escaped.
pub(crate) fn esc_with(text: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' if keep_newlines => out.push('\n'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' if keep_newlines => out.push('\t'),
            '\t' => out.push_str("\\t"),
            c if is_hidden_effect(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` as inert HTML text on one line.
pub(crate) fn esc(text: &str) -> String {
    esc_with(text, false)
}

/// `value` percent-encoded for a URL's query or path segment (every byte but the unreserved
/// ones), then safe in an attribute as it is.
pub(crate) fn url(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A query string from `pairs`, leaving out empty values: `?a=1&amp;b=2` (escaped for an
/// attribute), or empty.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> =
        pairs.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}", url(v))).collect();
    if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&amp;")) }
}

/// The pages' shared stylesheet: inline, so nothing is fetched from anywhere.
const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2230;background:#f6f7f9}\
header{background:#1d2230;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:center}\
header a{color:#cfd8ff;text-decoration:none}header a.here{color:#fff;font-weight:600}\
header .ns{margin-left:auto;color:#9aa3b5;font-size:12px}main{padding:16px 20px;max-width:1200px}\
h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}\
table{border-collapse:collapse;background:#fff;margin-bottom:8px}th,td{border:1px solid #dde1e8;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#eef0f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#fff;border:1px solid #dde1e8;padding:10px 14px;min-width:140px}\
.card b{display:block;font-size:22px}.bad{color:#b3261e;font-weight:600}.ok{color:#1e7b34}.muted{color:#6b7385}\
pre{background:#fff;border:1px solid #dde1e8;padding:8px;overflow:auto;max-height:480px;white-space:pre-wrap;word-break:break-all}\
form.inline{display:inline}button{font:inherit;padding:3px 10px;cursor:pointer}button.danger{background:#b3261e;color:#fff;border:0}\
.note{background:#fff8e1;border:1px solid #f0d98c;padding:8px 12px;margin:8px 0}.error{background:#fdecea;border:1px solid #f3b7b1;padding:8px 12px}\
input,select{font:inherit;padding:2px 4px}.filters label{margin-right:10px}svg{background:#fff;border:1px solid #dde1e8}";

/// The navigation entries: path, label.
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/workers", "Workers"),
    ("/dead-letters", "Dead letters"),
    ("/lanes", "Lanes"),
    ("/doctor", "Doctor"),
];

/// A whole page: `title`, the navigation with `here` marked, and `body` (already HTML).
pub(crate) fn page(title: &str, here: &str, namespace: &str, actions: Option<&str>, body: &str) -> String {
    let mut nav = String::new();
    for (path, label) in NAV {
        let class = if *path == here { " class=\"here\"" } else { "" };
        let _ = write!(nav, "<a href=\"{path}\"{class}>{label}</a>");
    }
    let mode = match actions {
        Some(actor) => format!("actions on · {}", esc(actor)),
        None => "read-only".to_owned(),
    };
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{title} · relayer</title>\
         <style>{STYLE}</style></head><body><header><strong>relayer</strong>{nav}\
         <span class=\"ns\">namespace <span id=\"namespace\">{ns}</span> · <span id=\"mode\">{mode}</span></span></header>\
         <main><h1>{title}</h1>{body}</main></body></html>",
        title = esc(title),
        ns = esc(namespace),
    )
}

/// A table: headers, then rows of cells already rendered as `<td>` elements.
pub(crate) fn table(id: &str, headers: &[&str], rows: &[String], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"muted\" id=\"{id}-empty\">{}</p>", esc(empty));
    }
    let mut out = format!("<table id=\"{id}\"><thead><tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        let _ = write!(out, "<tr>{row}</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A text cell.
pub(crate) fn td(text: &str) -> String {
    format!("<td>{}</td>", esc(text))
}

/// A number cell with a class naming what it counts (the browser tests read them).
pub(crate) fn td_n(class: &str, value: impl std::fmt::Display) -> String {
    format!("<td class=\"n {class}\">{value}</td>")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn markup_quotes_and_controls_become_inert_text() {
        assert_eq!(esc("<script>alert('x')</script>"), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
        assert_eq!(esc("\" onmouseover=\"x"), "&quot; onmouseover=&quot;x");
        assert_eq!(esc("a\u{1b}[2Jb\u{202e}c"), "a\\u{1b}[2Jb\\u{202e}c");
        assert_eq!(esc_with("one\ntwo\r", true), "one\ntwo\\r");
        assert_eq!(url("a b&c/é"), "a%20b%26c%2F%C3%A9");
        assert_eq!(query(&[("queue", "q 1"), ("reason", ""), ("x", "y")]), "?queue=q%201&amp;x=y");
    }

    proptest! {
        /// OBS-3: whatever the text, the escaped form holds no markup character, no quote,
        /// no control character and no direction control (line breaks only when kept).
        #[test]
        fn escaped_text_holds_no_markup_nor_control_obs_3(
            text in "(\\PC|\\pC|[<>&\"'\u{202a}-\u{202e}\u{2066}-\u{2069}\u{200e}\u{200f}])*",
            keep in any::<bool>(),
        ) {
            let shown = esc_with(&text, keep);
            prop_assert!(!shown.contains(['<', '>', '"', '\'']), "{shown:?}");
            prop_assert!(shown.chars().all(|c| !is_hidden_effect(c) || (keep && (c == '\n' || c == '\t'))), "{shown:?}");
            // Every `&` starts an entity this function wrote.
            for (i, _) in shown.match_indices('&') {
                let rest = &shown[i..];
                prop_assert!(["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"].iter().any(|e| rest.starts_with(e)), "{shown:?}");
            }
        }

        /// OBS-3: printable text without metacharacters is shown as it is.
        #[test]
        fn plain_text_is_unchanged_obs_3(text in "[^\\p{Cc}<>&\"'\u{202a}-\u{202e}\u{2066}-\u{2069}\u{200e}\u{200f}]*") {
            prop_assert_eq!(esc(&text), text.as_str());
        }
    }
}
