//! The server list of a NATS URL: each address without its credentials, the credentials
//! apart (async-nats ignores a URL's user info and would print it in its logs), and a
//! redacted form, the only one any message shows.

use std::fmt;

use async_nats::ServerAddr;
use relayer_core::redact::redact_url_userinfo;

use crate::options::OptionError;

/// Query parameters whose values are secrets wherever they appear in a server URL.
const SECRET_QUERY_KEYS: [&str; 6] = ["auth", "token", "password", "pass", "secret", "jwt"];

/// How the client authenticates, taken from the URL's user info.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// `nats://user:password@host`.
    UserPassword { user: String, password: String },
    /// `nats://token@host`.
    Token(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::UserPassword { user, .. } => write!(f, "UserPassword({user:?}, ***)"),
            Credentials::Token(_) => f.write_str("Token(***)"),
        }
    }
}

/// The parsed servers of one URL.
#[derive(Debug)]
pub(crate) struct Servers {
    pub(crate) addresses: Vec<ServerAddr>,
    pub(crate) credentials: Option<Credentials>,
    /// Every server, user info and secret query values replaced by `***`.
    pub(crate) redacted: String,
}

impl Servers {
    /// Parses `raw`: one server URL or several separated by commas (`nats://` and port 4222
    /// assumed when left out). Every server given credentials must give the same ones.
    pub(crate) fn parse(raw: &str) -> Result<Servers, OptionError> {
        let mut addresses = Vec::new();
        let mut credentials: Option<Credentials> = None;
        let mut redacted = Vec::new();
        for (index, server) in raw.split(',').map(str::trim).enumerate() {
            let invalid = |problem: String| {
                OptionError::new("url", format!("server #{} ({}) {problem}", index + 1, redact_str(server)))
            };
            if server.is_empty() {
                return Err(invalid("is empty".to_owned()));
            }
            // async-nats's parser does not echo its input; its refusal is shown as is.
            let mut url =
                server.parse::<ServerAddr>().map_err(|e| invalid(format!("is invalid: {e}")))?.into_inner();
            let found = match (url.username(), url.password()) {
                ("", None) => None,
                (user, Some(password)) => Some(Credentials::UserPassword {
                    user: percent_decoded(user).map_err(invalid)?,
                    password: percent_decoded(password).map_err(invalid)?,
                }),
                (token, None) => Some(Credentials::Token(percent_decoded(token).map_err(invalid)?)),
            };
            redacted.push(redact(&url));
            if let Some(found) = found {
                match &credentials {
                    Some(earlier) if *earlier != found => {
                        return Err(invalid(
                            "carries credentials that differ from an earlier server's: give every server \
                             the same ones"
                                .to_owned(),
                        ));
                    }
                    _ => credentials = Some(found),
                }
                // Neither can fail on a URL with a host, which every NATS address has.
                let _ = url.set_password(None);
                let _ = url.set_username("");
            }
            // A NATS address has no use for a query; it may hold a secret.
            url.set_query(None);
            addresses.push(ServerAddr::from_url(url).map_err(|e| invalid(format!("is invalid: {e}")))?);
        }
        Ok(Servers { addresses, credentials, redacted: redacted.join(",") })
    }
}

impl Servers {
    /// Whether the URL asks for TLS: every server `tls://`. A list mixing `tls://` and
    /// `nats://` servers is refused, naming it (redacted): the client would otherwise speak
    /// plaintext to a server it discovers or fails over to, which the `tls://` ones forbid.
    pub(crate) fn tls_required(&self) -> Result<bool, OptionError> {
        let tls = self.addresses.iter().filter(|server| server.tls_required()).count();
        if tls == 0 || tls == self.addresses.len() {
            return Ok(tls > 0);
        }
        Err(OptionError::new(
            "url",
            format!(
                "{} mixes tls:// and nats:// servers: make every server tls:// (or set with_ca_file / \
                 with_tls_first to require TLS of all), or none",
                self.redacted
            ),
        ))
    }
}

/// `url` with its user info and the values of secret query parameters replaced by `***`.
fn redact(url: &url::Url) -> String {
    let mut shown = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
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

/// A server as a message may show it when it does not parse: scheme and host, never what
/// stands before the last `@` (`nats://` assumed when left out).
fn redact_str(raw: &str) -> String {
    redact_url_userinfo(raw)
        .or_else(|| redact_url_userinfo(&format!("nats://{raw}")))
        .unwrap_or_else(|| "nats://…".to_owned())
}

/// Percent-decodes user info as the URL carries it.
fn percent_decoded(encoded: &str) -> Result<String, String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let byte = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| "has a malformed %-escape in its user info".to_owned())?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "has user info that is not UTF-8 once decoded".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_addresses_and_the_url_is_shown_redacted_trn_3() {
        let servers =
            Servers::parse("nats://app:s3%2Fcret@a:4222, tls://app:s3%2Fcret@b?token=t0k3n").unwrap();
        assert_eq!(
            servers.credentials,
            Some(Credentials::UserPassword { user: "app".to_owned(), password: "s3/cret".to_owned() })
        );
        assert_eq!(servers.redacted, "nats://app:***@a:4222,tls://app:***@b?token=***");
        for address in &servers.addresses {
            let shown = format!("{address:?} {}", address.as_url_str());
            assert!(!shown.contains("s3") && !shown.contains("app"), "{shown}");
        }
        assert!(servers.addresses[1].tls_required());
        let debug = format!("{servers:?}");
        assert!(!debug.contains("s3") && !debug.contains("t0k3n"), "{debug}");

        let token = Servers::parse("t0k3n@127.0.0.1").unwrap();
        assert_eq!(token.credentials, Some(Credentials::Token("t0k3n".to_owned())));
        assert_eq!(token.redacted, "nats://***@127.0.0.1");
        assert!(!format!("{token:?}").contains("t0k3n"));
        assert_eq!(Servers::parse("nats://[::1]:4223").unwrap().addresses[0].host(), "::1");
    }

    #[test]
    fn a_tls_server_requires_tls_of_every_server_and_a_mixed_list_is_refused_trn_3() {
        let tls = |raw: &str| Servers::parse(raw).unwrap().tls_required();
        assert!(tls("tls://a,tls://b:4333").unwrap());
        assert!(!tls("nats://a,b").unwrap());
        let error = tls("nats://a,tls://app:s3cret@b").unwrap_err().to_string();
        assert!(error.contains("nats://a,tls://app:***@b mixes tls:// and nats:// servers"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }

    #[test]
    fn bad_servers_are_refused_naming_which_without_their_secrets_trn_3() {
        let refused = |raw: &str| {
            let error = Servers::parse(raw).unwrap_err();
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("s3cret"), "{raw}: {shown}");
            shown
        };
        assert!(
            refused("nats://app:s3cret@a:notaport").contains("server #1 (nats://***@a:notaport) is invalid")
        );
        assert!(refused("nats://a,http://app:s3cret@b").contains("server #2 (http://***@b) is invalid"));
        assert!(refused("nats://a,,nats://b").contains("server #2 (nats://) is empty"));
        // Unencoded separators in the password: the user info still ends at the last `@`.
        assert!(refused("nats://app:s3c/ret@a").contains("server #1 (nats://***@a)"));
        assert!(refused("nats://app:s3c/r@et@a:notaport").contains("server #1 (nats://***@a:notaport)"));
        let differing = refused("nats://app:s3cret@a,nats://other:s3cret@b");
        assert!(differing.contains("differ from an earlier server's"), "{differing}");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Percent-encodes everything but unreserved characters, as a URL's user info needs.
    fn encoded(text: &str) -> String {
        text.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect()
    }

    proptest! {
        /// Whatever the secret (any characters, percent-encoded in the URL), as a password,
        /// a token or a secret query value, it appears in no redacted form and no error,
        /// and the decoded credentials are exactly it.
        #[test]
        fn no_secret_survives_redaction_trn_3(secret in "S3CR[\\PC]{4,24}", port in 1u16..) {
            let password = format!("nats://app:{}@host:{port}?token={}", encoded(&secret), encoded(&secret));
            let servers = Servers::parse(&password).unwrap();
            prop_assert_eq!(
                &servers.credentials,
                &Some(Credentials::UserPassword { user: "app".to_owned(), password: secret.clone() })
            );
            let shown = format!("{servers:?} {}", servers.redacted);
            prop_assert!(!shown.contains(&secret) && !shown.contains(&encoded(&secret)), "{}", shown);

            let token = Servers::parse(&format!("tls://{}@host:{port}", encoded(&secret))).unwrap();
            prop_assert_eq!(&token.credentials, &Some(Credentials::Token(secret.clone())));
            let shown = format!("{token:?} {}", token.redacted);
            prop_assert!(!shown.contains(&secret) && !shown.contains(&encoded(&secret)), "{}", shown);

            let invalid = Servers::parse(&format!("nats://app:{}@host:{port}0000000", encoded(&secret)));
            let shown = format!("{invalid:?}");
            prop_assert!(!shown.contains(&secret) && !shown.contains(&encoded(&secret)), "{}", shown);

            // Unencoded (`/`, `?`, `#`, `@` included): valid or not, no part of it is shown.
            // Not a comma, which separates servers: such a password must be encoded.
            let unencoded = secret.replace(',', "%2C");
            let shown = match Servers::parse(&format!("nats://app:{unencoded}@host:{port}")) {
                Ok(servers) => format!("{servers:?} {}", servers.redacted),
                Err(error) => format!("{error} {error:?}"),
            };
            prop_assert!(!shown.contains("S3CR"), "{}", shown);
        }
    }
}
