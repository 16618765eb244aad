//! The broker's address: an AMQP URI parsed once, its host kept as written (an IP literal
//! stays that IP), and a redacted form — the only one any message shows.

use std::fmt;

use lapin::uri::{AMQPScheme, AMQPUri};
use relayer_core::redact::redact_url_userinfo;
use url::{Host, Url};

use crate::options::OptionError;

/// Query parameters whose values are secrets wherever they appear in a broker URL.
const SECRET_QUERY_KEYS: [&str; 6] = ["auth", "token", "password", "pass", "secret", "jwt"];

/// A parsed `amqp://` or `amqps://` URI.
#[derive(Clone)]
pub(crate) struct Address {
    pub(crate) uri: AMQPUri,
    /// The URI with its user info and secret query values replaced by `***`.
    pub(crate) redacted: String,
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl Address {
    /// Parses `raw`. A refusal names the problem and shows the URI only redacted.
    pub(crate) fn parse(raw: &str) -> Result<Address, OptionError> {
        let invalid = |problem: String| OptionError {
            field: "uri",
            problem: format!("{} is invalid: {problem}", redact_str(raw)),
        };
        // `url`'s own errors never echo the input; lapin's parser sometimes does (with the
        // password), so it runs only on what `url` accepted, and its refusals are scrubbed.
        let url = Url::parse(raw).map_err(|e| invalid(e.to_string()))?;
        if url.cannot_be_a_base() {
            return Err(invalid(
                "it has no `//` authority (amqp://user:password@host:port/vhost)".to_owned(),
            ));
        }
        let mut uri: AMQPUri = raw.parse().map_err(|problem: String| invalid(scrub(&problem, &url)))?;
        // lapin's parser turns every IP literal into `localhost` (it reads only a domain).
        match url.host() {
            Some(Host::Ipv4(ip)) => uri.authority.host = ip.to_string(),
            Some(Host::Ipv6(ip)) => uri.authority.host = ip.to_string(),
            Some(Host::Domain(_)) | None => {}
        }
        Ok(Address { uri, redacted: redact(&url) })
    }

    /// Whether the scheme is `amqps`.
    pub(crate) fn is_tls(&self) -> bool {
        self.uri.scheme == AMQPScheme::AMQPS
    }

    /// `host:port` for messages (`[::1]:5672` for an IPv6 host).
    pub(crate) fn host_port(&self) -> String {
        let host = &self.uri.authority.host;
        if host.contains(':') {
            format!("[{host}]:{}", self.uri.authority.port)
        } else {
            format!("{host}:{}", self.uri.authority.port)
        }
    }
}

/// `url` with its user info and the values of secret query parameters replaced by `***`.
fn redact(url: &Url) -> String {
    let mut shown = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
        // A user name alone may itself be a token: hidden too. Setting these on a URL that
        // has a host cannot fail.
        let _ = shown.set_password(None);
        let _ = shown.set_username("***");
        if url.password().is_some() {
            let _ = shown.set_username(url.username());
            let _ = shown.set_password(Some("***"));
        }
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(key, value)| {
                let secret = SECRET_QUERY_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k));
                (key.into_owned(), if secret { "***".to_owned() } else { value.into_owned() })
            })
            .collect();
        shown.query_pairs_mut().clear().extend_pairs(pairs);
    }
    shown.to_string()
}

/// [`redact`] for a string that may not parse: everything between `://` and the last `@`
/// of the string is hidden ([`redact_url_userinfo`]); a string without `://` is not shown at
/// all.
pub(crate) fn redact_str(raw: &str) -> String {
    if let Ok(url) = Url::parse(raw)
        && !url.cannot_be_a_base()
    {
        return redact(&url);
    }
    // Never the URI when it has no scheme: nothing says where its secrets are.
    redact_url_userinfo(raw).unwrap_or_else(|| "the URI".to_owned())
}

/// `problem` without the user name, password or secret query values of `url`.
fn scrub(problem: &str, url: &Url) -> String {
    let mut secrets: Vec<String> = Vec::new();
    if !url.username().is_empty() {
        secrets.push(url.username().to_owned());
    }
    secrets.extend(url.password().map(str::to_owned));
    secrets.extend(
        url.query_pairs()
            .filter(|(key, _)| SECRET_QUERY_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k)))
            .map(|(_, value)| value.into_owned()),
    );
    let mut scrubbed = problem.replace(url.as_str(), &redact(url));
    for secret in secrets.iter().filter(|secret| !secret.is_empty()) {
        scrubbed = scrubbed.replace(secret.as_str(), "***");
        // Percent-decoded forms too.
        if let Some(decoded) = percent_decoded(secret) {
            scrubbed = scrubbed.replace(decoded.as_str(), "***");
        }
    }
    scrubbed
}

fn percent_decoded(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().filter(|decoded| decoded != encoded && !decoded.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ip_literal_host_stays_that_ip_trn_3() {
        let v6 = Address::parse("amqp://guest:guest@[::1]:5673/%2f").unwrap();
        assert_eq!(v6.uri.authority.host, "::1");
        assert_eq!(v6.uri.authority.port, 5673);
        assert_eq!(v6.host_port(), "[::1]:5673");
        let v4 = Address::parse("amqp://10.1.2.3/%2f").unwrap();
        assert_eq!(v4.uri.authority.host, "10.1.2.3");
        assert_eq!(v4.uri.authority.port, 5672);
        let name = Address::parse("amqps://broker.example:5671/%2f").unwrap();
        assert_eq!(name.uri.authority.host, "broker.example");
        assert!(name.is_tls());
    }

    #[test]
    fn user_info_and_secret_query_values_are_redacted_trn_3() {
        let address = Address::parse("amqps://app:s3cret@broker:5671/%2f?token=t0k3n&heartbeat=10").unwrap();
        assert_eq!(address.redacted, "amqps://app:***@broker:5671/%2f?token=***&heartbeat=10");
        let debug = format!("{address:?}");
        assert!(!debug.contains("s3cret") && !debug.contains("t0k3n"), "{debug}");
        // A user name alone may be a token.
        assert_eq!(Address::parse("amqp://t0k3n@broker/").unwrap().redacted, "amqp://***@broker/");
    }

    #[test]
    fn an_invalid_uri_is_refused_without_its_secrets_trn_3() {
        for raw in [
            "amqp://app:s3cret@broker:notaport/%2f",
            "amqp:app:s3cret@broker",
            "http://app:s3cret@broker/",
            "amqp://app:s3cret@bro ker/",
            // Unencoded separators in the password: the user info still ends at the last `@`.
            "amqp://app:s3c/ret@broker:5672/%2f",
            "amqp://app:s3c?ret@broker",
            "amqp://app:s3c#ret@broker",
            "amqp://app:s3c/r@et@broker:notaport",
        ] {
            let error = Address::parse(raw).unwrap_err();
            let shown = format!("{error} {error:?}");
            assert!(shown.contains("option `uri`"), "{shown}");
            assert!(!shown.contains("s3cret"), "{raw}: {shown}");
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Percent-encodes everything but unreserved characters, as a URI's user info needs.
    fn encoded(text: &str) -> String {
        text.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect()
    }

    proptest! {
        /// Whatever the secret (any characters, percent-encoded in the URI), as a password
        /// or a token query value, it appears in no redacted form and no refusal, and lapin
        /// receives exactly it as the password.
        #[test]
        fn no_secret_survives_redaction_trn_3(secret in "S3CR[\\PC]{4,24}", port in 1u16..) {
            let raw = format!("amqps://app:{}@host:{port}/%2f?token={}", encoded(&secret), encoded(&secret));
            let address = Address::parse(&raw).unwrap();
            prop_assert_eq!(&address.uri.authority.userinfo.password, &secret);
            let shown = format!("{address:?} {}", address.redacted);
            prop_assert!(!shown.contains(&secret) && !shown.contains(&encoded(&secret)), "{}", shown);

            for invalid in [
                format!("amqp://app:{}@host:{port}0000000/%2f", encoded(&secret)),
                format!("amqp:app:{}@host", encoded(&secret)),
                format!("amqp://app:{}@host/%2f?heartbeat=x", encoded(&secret)),
            ] {
                let error = Address::parse(&invalid).unwrap_err();
                let shown = format!("{error} {error:?}");
                prop_assert!(!shown.contains(&secret) && !shown.contains(&encoded(&secret)), "{}", shown);
            }

            // Unencoded (`/`, `?`, `#`, `@` included): valid or not, no part of it is shown.
            let raw = format!("amqp://app:{secret}@host:{port}/%2f");
            let shown = match Address::parse(&raw) {
                Ok(address) => format!("{address:?} {}", address.redacted),
                Err(error) => format!("{error} {error:?}"),
            };
            prop_assert!(!shown.contains("S3CR"), "{}", shown);
        }
    }
}
