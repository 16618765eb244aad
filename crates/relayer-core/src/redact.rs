//! Showing a URL that may not parse without its credentials, for transports' messages.

/// `raw` as a message may show it when it may not parse as a URL: the scheme and host, never
/// the user info, and `/…` for whatever follows the host (a path or query may hold anything).
/// `None` when `raw` has no `://`.
///
/// The user info is everything between `://` and the **last** `@`: a password may hold `/`,
/// `?`, `#` or `@` (unencoded, which is what makes such a URL unparseable), so cutting the
/// authority at the first of them would show part of it. An `@` in a path or query also
/// hides the host: in doubt, hide more.
///
/// ```
/// use relayer_core::redact::redact_url_userinfo;
/// assert_eq!(redact_url_userinfo("nats://user:pa/ss@host:4222").as_deref(), Some("nats://***@host:4222"));
/// assert_eq!(redact_url_userinfo("amqp://host/vhost").as_deref(), Some("amqp://host/…"));
/// assert_eq!(redact_url_userinfo("host:4222"), None);
/// ```
pub fn redact_url_userinfo(raw: &str) -> Option<String> {
    let (scheme, rest) = raw.split_once("://")?;
    let (at, after) = match rest.rfind('@') {
        Some(last) => ("***@", &rest[last + 1..]),
        None => ("", rest),
    };
    let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (host, more) = after.split_at(host_end);
    let more = if more.is_empty() { "" } else { "/…" };
    Some(format!("{scheme}://{at}{host}{more}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn user_info_ends_at_the_last_at_sign_trn_3() {
        let shown = |raw: &str| redact_url_userinfo(raw).unwrap();
        assert_eq!(shown("nats://user:pa/ss@host"), "nats://***@host");
        assert_eq!(shown("amqp://user:p?a#s@s@host:5672/vhost?x=1"), "amqp://***@host:5672/…");
        assert_eq!(shown("nats://host:4222"), "nats://host:4222");
        assert_eq!(shown("nats://host/path"), "nats://host/…");
        assert_eq!(shown("nats://"), "nats://");
    }

    proptest! {
        /// Whatever the password holds (separators and `@` included), no part of it of more
        /// than one character is shown.
        #[test]
        fn no_part_of_the_user_info_is_shown_trn_3(secret in "S3CR[\\PC]{4,24}") {
            let shown = redact_url_userinfo(&format!("nats://app:{secret}@host:4222")).unwrap();
            prop_assert!(!shown.contains("S3CR") && !shown.contains("app"), "{}", shown);
        }
    }
}
