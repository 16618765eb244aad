//! Properties of [`BoundedText`]: external text made fit for a `text` parameter (SPEC §15).
#![allow(clippy::unwrap_used)] // A failed unwrap is a failed property.

use proptest::prelude::*;
use relayer_core::BoundedText;
use relayer_core::bounded_text::{NUL_REPLACEMENT, TRUNCATED};

/// Text rich in what matters: NULs, multi-byte characters, long runs.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            prop_oneof![Just('\0'), Just('é'), Just('😀'), Just('a'), any::<char>()],
            0..400
        )
        .prop_map(|chars| chars.into_iter().collect()),
    ]
}

proptest! {
    /// SPEC §15: whatever the input and the limit, the result has no NUL, is within the
    /// limit and is valid UTF-8 (PostgreSQL's `text` accepts it).
    #[test]
    fn bounded_text_never_holds_a_nul_nor_exceeds_its_limit_spec_15(text in any_text(), max in 0usize..600) {
        let bounded = BoundedText::from_external(&text, max);
        prop_assert!(!bounded.as_str().contains('\0'));
        prop_assert!(bounded.as_str().len() <= max);
        prop_assert!(std::str::from_utf8(bounded.as_str().as_bytes()).is_ok());
    }

    /// SPEC §15: clean text within the limit is kept as it is.
    #[test]
    fn clean_short_text_is_kept_unchanged_spec_15(text in any::<String>(), extra in 0usize..50) {
        let text = text.replace('\0', "");
        let bounded = BoundedText::from_external(&text, text.len() + extra);
        prop_assert_eq!(bounded.as_str(), text.as_str());
    }

    /// SPEC §15: what is kept is a prefix of the input with NULs replaced, marked when cut
    /// (and the limit holds the marker).
    #[test]
    fn a_cut_text_is_a_marked_prefix_of_the_sanitized_input_spec_15(text in any_text(), max in 3usize..600) {
        let sanitized = text.replace('\0', &NUL_REPLACEMENT.to_string());
        let bounded = BoundedText::from_external(&text, max).into_string();
        if sanitized.len() <= max {
            prop_assert_eq!(bounded, sanitized);
        } else {
            let kept = bounded.strip_suffix(TRUNCATED).unwrap();
            prop_assert!(sanitized.starts_with(kept));
            // Nothing more would fit: the next character would pass the limit.
            let next = sanitized[kept.len()..].chars().next().unwrap();
            prop_assert!(kept.len() + next.len_utf8() + TRUNCATED.len() > max);
        }
    }
}
