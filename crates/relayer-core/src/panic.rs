//! What a caught panic said: the text of its payload, for logs and stored errors.

use std::any::Any;

/// The message of a panic payload caught with `catch_unwind`: the `&str` or `String` that
/// `panic!` carried, or `"a non-string panic payload"` for any other value.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
/// assert_eq!(relayer_core::panic_text(payload.as_ref()), "boom 7");
/// ```
pub fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-string panic payload")
}
