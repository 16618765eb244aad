//! Text from the database — bodies, headers, errors, reasons — shown on an operator's
//! terminal. A control character in it (an ANSI escape sequence, a carriage return, a C1
//! code) could rewrite the screen, hide a line or forge one, and a Unicode direction
//! control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) could reorder what the line
//! shows ("Trojan Source"); every one is shown escaped instead (`\u{1b}`, `\r`, `\t`,
//! `\u{202e}`), and printable text is printed as it is.
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

/// Whether `c` changes how a terminal shows the text around it: a control character
/// (`char::is_control`: C0, DEL, C1), a Unicode direction control (embeddings and
/// overrides U+202A–U+202E, isolates U+2066–U+2069, marks U+200E, U+200F and the Arabic
/// letter mark U+061C), a line or paragraph separator (U+2028, U+2029: a line break on
/// many terminals) or an invisible character that can hide or join text (zero-width space,
/// joiners U+200B–U+200D, word joiner U+2060, byte-order mark U+FEFF).
fn is_hidden_effect(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200b}'..='\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{2060}'
                | '\u{feff}'
        )
}

/// `text` with every control character and direction control ([`is_hidden_effect`])
/// escaped — but `\n` with [`Newlines::Keep`]. Printable text is returned unchanged.
pub(crate) fn printable(text: &str, newlines: Newlines) -> String {
    if !text.chars().any(|c| is_hidden_effect(c) && !(c == '\n' && newlines == Newlines::Keep)) {
        return text.to_owned();
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' if newlines == Newlines::Keep => shown.push('\n'),
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if is_hidden_effect(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
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
    fn separators_and_invisible_characters_are_escaped_spec_15() {
        assert_eq!(printable("a\u{2028}b\u{2029}c", Newlines::Keep), "a\\u{2028}b\\u{2029}c");
        assert_eq!(
            printable("x\u{61c}y\u{200b}z\u{feff}", Newlines::Escape),
            "x\\u{61c}y\\u{200b}z\\u{feff}"
        );
    }

    #[test]
    fn escapes_are_readable() {
        assert_eq!(printable("a\u{1b}[2Jb", Newlines::Escape), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\ry\tz", Newlines::Keep), "x\\ry\\tz");
        assert_eq!(printable("one\ntwo", Newlines::Keep), "one\ntwo");
        assert_eq!(printable("one\ntwo", Newlines::Escape), "one\\ntwo");
        assert_eq!(printable("csi\u{9b}31m del\u{7f}", Newlines::Escape), "csi\\u{9b}31m del\\u{7f}");
        assert_eq!(
            printable("a\u{202e}cba\u{2066}x\u{200f}", Newlines::Keep),
            "a\\u{202e}cba\\u{2066}x\\u{200f}"
        );
    }

    proptest! {
        /// OBS-3: whatever the text (direction controls mixed in), what is printed holds no
        /// control character nor direction control but the line breaks kept on purpose.
        #[test]
        fn output_holds_no_control_character_but_kept_newlines_obs_3(
            text in "(\\PC|\\pC|[\u{202a}-\u{202e}\u{2066}-\u{2069}\u{200e}\u{200f}])*",
            keep in any::<bool>(),
        ) {
            let newlines = if keep { Newlines::Keep } else { Newlines::Escape };
            let shown = printable(&text, newlines);
            prop_assert!(shown.chars().all(|c| !is_hidden_effect(c) || (keep && c == '\n')), "{shown:?}");
            prop_assert_eq!(shown.matches('\n').count(), if keep { text.matches('\n').count() } else { 0 });
        }

        /// OBS-3: printable text (controls and direction controls aside, anything: letters,
        /// quotes, backslashes, emoji, right-to-left scripts) is printed exactly as it is.
        #[test]
        fn printable_text_is_unchanged_obs_3(text in "[^\\p{Cc}\u{202a}-\u{202e}\u{2066}-\u{2069}\u{200b}-\u{200f}\u{061c}\u{2028}\u{2029}\u{2060}\u{feff}]*") {
            prop_assert_eq!(printable(&text, Newlines::Escape), text.as_str());
            prop_assert_eq!(printable(&text, Newlines::Keep), text.as_str());
        }
    }
}
