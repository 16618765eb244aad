//! Text from the database — bodies, headers, errors, reasons — shown on an operator's
//! terminal. A control character in it (an ANSI escape sequence, a carriage return, a C1
//! code) could rewrite the screen, hide a line or forge one; every one is shown escaped
//! instead (`\u{1b}`, `\r`, `\t`), and printable text is printed as it is.
//!
//! JSON output is data, not a screen: serde_json escapes the C0 controls there, and the
//! values are left as stored.

/// Whether a line break in the text is kept (a multi-line error) or shown escaped (a table
/// cell, a field value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Newlines {
    Keep,
    Escape,
}

/// `text` with every control character (`char::is_control`: C0, DEL, C1) escaped — but
/// `\n` with [`Newlines::Keep`]. Printable text is returned unchanged.
pub(crate) fn printable(text: &str, newlines: Newlines) -> String {
    if !text.chars().any(|c| c.is_control() && !(c == '\n' && newlines == Newlines::Keep)) {
        return text.to_owned();
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' if newlines == Newlines::Keep => shown.push('\n'),
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if c.is_control() => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn escapes_are_readable() {
        assert_eq!(printable("a\u{1b}[2Jb", Newlines::Escape), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\ry\tz", Newlines::Keep), "x\\ry\\tz");
        assert_eq!(printable("one\ntwo", Newlines::Keep), "one\ntwo");
        assert_eq!(printable("one\ntwo", Newlines::Escape), "one\\ntwo");
        assert_eq!(printable("csi\u{9b}31m del\u{7f}", Newlines::Escape), "csi\\u{9b}31m del\\u{7f}");
    }

    proptest! {
        /// OBS-3: whatever the text, what is printed holds no control character but the
        /// line breaks kept on purpose.
        #[test]
        fn output_holds_no_control_character_but_kept_newlines_obs_3(text in any::<String>(), keep in any::<bool>()) {
            let newlines = if keep { Newlines::Keep } else { Newlines::Escape };
            let shown = printable(&text, newlines);
            prop_assert!(shown.chars().all(|c| !c.is_control() || (keep && c == '\n')), "{shown:?}");
            prop_assert_eq!(shown.matches('\n').count(), if keep { text.matches('\n').count() } else { 0 });
        }

        /// OBS-3: printable text (controls aside, anything: letters, quotes, backslashes,
        /// emoji, right-to-left scripts) is printed exactly as it is.
        #[test]
        fn printable_text_is_unchanged_obs_3(text in "[^\\p{Cc}]*") {
            prop_assert_eq!(printable(&text, Newlines::Escape), text.as_str());
            prop_assert_eq!(printable(&text, Newlines::Keep), text.as_str());
        }
    }
}
