//! A configuration error as the one line `relayer run` and `relayer config check` print:
//! `path: problem (where it came from)` — the file, or the `RELAYER_*` variable.

use std::path::Path;

/// A figment error as one line: `path: problem (where it came from)`; `env_prefix` is the
/// prefix of the variables the configuration reads (`RELAYER_`), `top_level` the keys a
/// variable without `__` sets (the others name a section).
pub(crate) fn one_line(error: &figment::Error, file: &Path, env_prefix: &str, top_level: &[&str]) -> String {
    use figment::error::Kind;
    let path = error.path.join(".");
    let problem = match &error.kind {
        Kind::UnknownField(field, _) => {
            let full = if path.is_empty() || path.to_lowercase().ends_with(&field.to_lowercase()) {
                if path.is_empty() { field.clone() } else { path }
            } else {
                format!("{path}.{field}")
            };
            return format!("{full}: unknown key{}", origin(error, file, env_prefix, top_level));
        }
        Kind::MissingField(field) => {
            let full = if path.is_empty() || error.path.last().map(String::as_str) == Some(&**field) {
                if path.is_empty() { field.to_string() } else { path }
            } else {
                format!("{path}.{field}")
            };
            return format!("{full}: missing{}", origin(error, file, env_prefix, top_level));
        }
        // A parser's message may span lines (a source snippet with a caret): one line.
        Kind::Message(message) => single_line(message),
        other => other.to_string(),
    };
    // The options types name their field themselves (`sweeper.batch_size: 0 is out of …`).
    if !path.is_empty()
        && (problem.starts_with(&format!("{path}.")) || problem.starts_with(&format!("{path}:")))
    {
        return format!("{problem}{}", origin(error, file, env_prefix, top_level));
    }
    if path.is_empty() {
        format!("{problem}{}", origin(error, file, env_prefix, top_level))
    } else {
        format!("{path}: {problem}{}", origin(error, file, env_prefix, top_level))
    }
}

/// ` (in FILE)` or ` (from VARIABLE)`.
fn origin(error: &figment::Error, file: &Path, env_prefix: &str, top_level: &[&str]) -> String {
    match &error.metadata {
        Some(metadata) if metadata.name.contains("environment") => {
            let name: Vec<String> = error.path.iter().map(|key| key.to_uppercase()).collect();
            // A one-key path names a top-level value (`RELAYER_POOL_SIZE`) or a whole
            // section, set by some `RELAYER_SECTION__…` variable.
            let section = error.path.len() == 1 && !top_level.contains(&error.path[0].as_str());
            let wildcard = if section { "__*" } else { "" };
            format!(" (from {env_prefix}{}{wildcard})", name.join("__"))
        }
        _ => format!(" (in {})", file.display()),
    }
}

/// `text` on one line: its non-empty lines, trimmed, joined with `; `.
pub(crate) fn single_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join("; ")
}
