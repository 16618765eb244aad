//! The digest behind options fingerprints (OPT-4): replicas that disagree on their options
//! show different fingerprints.

use sha1::{Digest, Sha1};

/// SHA-1 of `text`, in lowercase hex.
pub(crate) fn sha1_hex(text: &str) -> String {
    Sha1::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}
