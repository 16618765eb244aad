//! Text from outside relayer, made fit to be a statement parameter (SPEC §15).
//!
//! A transport's error, a handler's rejection message, a panic's payload, an operator's
//! name: relayer stores each in a `text` column, and PostgreSQL refuses two things about
//! such text that Rust's `String` allows. A NUL character (U+0000) fails the *whole*
//! statement ("invalid byte sequence for encoding UTF8: 0x00") — and the one-statement
//! completion of a batch with it, so the batch would be sent again forever without an
//! attempt ever being counted. And an unbounded text lets one chatty transport grow every
//! row it touches (a field is capped at 1 GiB, and long before that bloats the table).
//!
//! [`BoundedText::from_external`] is the one conversion: NUL becomes U+FFFD (the
//! replacement character, so the text still shows *that* something was there), and text
//! over the limit is cut on a character boundary and marked with [`TRUNCATED`]. The storage
//! crate binds external text only as a `BoundedText`, so no such text can reach a
//! statement unconverted.
//!
//! ```
//! use relayer_core::bounded_text::{BoundedText, TRUNCATED};
//!
//! let clean = BoundedText::from_external("broker said no", 64);
//! assert_eq!(clean.as_str(), "broker said no");
//!
//! let nul = BoundedText::from_external("bad\0byte", 64);
//! assert_eq!(nul.as_str(), "bad\u{fffd}byte");
//!
//! let long = BoundedText::from_external(&"é".repeat(100), 16);
//! assert!(long.as_str().len() <= 16 && long.as_str().ends_with(TRUNCATED));
//! ```

use std::fmt;

/// What replaces a NUL character: U+FFFD, the Unicode replacement character.
pub const NUL_REPLACEMENT: char = '\u{fffd}';

/// What ends a text that was cut to its limit.
pub const TRUNCATED: &str = "…";

/// The longest error text stored, in bytes (UTF-8): a transport's or handler's error chain
/// in `last_error`, a parked lane's `parked_reason`, a dead letter's rejection message, a
/// panic's text. 8 KiB holds any useful cause chain and keeps a row small.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// The longest operator name (`actor`) recorded in the audit table, in bytes.
pub const MAX_ACTOR_BYTES: usize = 256;

/// Text that PostgreSQL's `text` type accepts: valid UTF-8 (a `String`), no NUL, and at
/// most the byte limit it was made with. Made only by [`from_external`](Self::from_external).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BoundedText(String);

impl BoundedText {
    /// `text` with every NUL replaced by [`NUL_REPLACEMENT`], then cut to at most
    /// `max_bytes` bytes on a character boundary, ending with [`TRUNCATED`] when cut. A
    /// `max_bytes` too small to hold the marker gives as much of the text as fits, unmarked.
    /// Text that is already clean and short enough comes back unchanged.
    pub fn from_external(text: &str, max_bytes: usize) -> BoundedText {
        let mut clean = if text.contains('\0') {
            text.replace('\0', NUL_REPLACEMENT.encode_utf8(&mut [0; 4]))
        } else {
            text.to_owned()
        };
        if clean.len() > max_bytes {
            let marker = if max_bytes >= TRUNCATED.len() { TRUNCATED } else { "" };
            let cut = floor_char_boundary(&clean, max_bytes - marker.len());
            clean.truncate(cut);
            clean.push_str(marker);
        }
        BoundedText(clean)
    }

    /// An error text bounded by [`MAX_ERROR_BYTES`].
    pub fn error(text: &str) -> BoundedText {
        BoundedText::from_external(text, MAX_ERROR_BYTES)
    }

    /// An operator name bounded by [`MAX_ACTOR_BYTES`].
    pub fn actor(text: &str) -> BoundedText {
        BoundedText::from_external(text, MAX_ACTOR_BYTES)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for BoundedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for BoundedText {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The largest index `<= at` that is a character boundary of `text`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_replaced_and_long_text_cut_on_a_character_boundary() {
        assert_eq!(BoundedText::from_external("a\0b\0", 64).as_str(), "a\u{fffd}b\u{fffd}");
        // "é" is 2 bytes: 7 bytes of room for text beside the 3-byte marker hold 3 of them.
        assert_eq!(BoundedText::from_external("éééééé", 10).as_str(), "ééé…");
        assert_eq!(BoundedText::from_external("abcdef", 2).as_str(), "ab");
        assert_eq!(BoundedText::from_external("abcdef", 0).as_str(), "");
        assert_eq!(BoundedText::from_external("abc", 3).as_str(), "abc");
        // A NUL's replacement is 3 bytes: the limit counts it.
        assert_eq!(BoundedText::from_external("\0\0\0\0", 8).as_str(), "\u{fffd}…");
    }
}
