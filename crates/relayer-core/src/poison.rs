//! When a failing row stops being retried (DSP-5): a pure decision the completion's SQL
//! mirrors.

use std::num::NonZeroU32;

use crate::transport::ErrorClass;

/// Whether a failed send makes the row poison, i.e. moves it to the dead table (DSP-5).
///
/// `attempts_after_failure` counts the failure just seen. Without `max_attempts` nothing
/// is poison: a failing row stays pending, and durable, forever. With it, a row is poison
/// once it reaches `max_attempts`, or at once when the error is permanent (TRN-2), since
/// retrying cannot help.
pub fn is_poison(attempts_after_failure: u32, max_attempts: Option<NonZeroU32>, class: ErrorClass) -> bool {
    match max_attempts {
        None => false,
        Some(max) => class == ErrorClass::Permanent || attempts_after_failure >= max.get(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_needs_max_attempts_dsp_5() {
        let three = NonZeroU32::new(3);
        assert!(!is_poison(2, three, ErrorClass::Transient));
        assert!(is_poison(3, three, ErrorClass::Transient));
        assert!(is_poison(1, three, ErrorClass::Permanent), "permanent counts at once");
        assert!(!is_poison(u32::MAX, None, ErrorClass::Transient));
        assert!(!is_poison(1, None, ErrorClass::Permanent), "without max_attempts rows stay pending");
    }
}
