//! The TLS settings of a libpq connection string that tokio-postgres does not parse:
//! `sslrootcert`, `sslcert`, `sslkey`, and the `sslmode` values `allow`, `verify-ca` and
//! `verify-full`.
//!
//! [`TlsUrl::split`] takes them out of a `postgres://` URL or a `key=value` string and
//! leaves the rest, byte for byte, for tokio-postgres.

use std::path::PathBuf;

/// libpq's `sslmode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LibpqSslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl LibpqSslMode {
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => LibpqSslMode::Disable,
            "allow" => LibpqSslMode::Allow,
            "prefer" => LibpqSslMode::Prefer,
            "require" => LibpqSslMode::Require,
            "verify-ca" => LibpqSslMode::VerifyCa,
            "verify-full" => LibpqSslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode {other:?} is none of disable, allow, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

/// A connection string without its TLS settings, and those settings.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TlsUrl {
    /// The connection string for tokio-postgres: everything but the TLS settings.
    pub(crate) remaining: String,
    pub(crate) mode: Option<LibpqSslMode>,
    pub(crate) root_cert: Option<PathBuf>,
    /// The client certificate (`sslcert`) and where it was named.
    pub(crate) cert: Option<NamedFile>,
    /// The client certificate's private key (`sslkey`) and where it was named.
    pub(crate) key: Option<NamedFile>,
}

/// A file and the setting that named it (`sslcert`, `PGSSLKEY` …), for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedFile {
    pub(crate) path: PathBuf,
    pub(crate) named_by: &'static str,
}

impl NamedFile {
    pub(crate) fn new(path: impl Into<PathBuf>, named_by: &'static str) -> NamedFile {
        NamedFile { path: path.into(), named_by }
    }
}

/// libpq's `sslpassword` (an encrypted client key), which relayer does not decrypt.
const UNSUPPORTED_PASSWORD: &str = "sslpassword is not supported: relayer reads unencrypted client keys only \
     (decrypt it, e.g. `openssl pkey -in key.pem -out plain.pem`, and keep it readable by its owner alone)";

impl TlsUrl {
    /// Splits `url`; a bad `sslmode` or an unterminated quote is an error naming it.
    pub(crate) fn split(url: &str) -> Result<TlsUrl, String> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            split_url(url)
        } else {
            split_key_values(url)
        }
    }
}

/// A `postgres://…?key=value&…` URL: the query's pairs are percent-encoded.
fn split_url(url: &str) -> Result<TlsUrl, String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut split = TlsUrl { remaining: String::new(), mode: None, root_cert: None, cert: None, key: None };
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key)?.as_str() {
            "sslmode" => split.mode = Some(LibpqSslMode::parse(&percent_decode(value)?)?),
            "sslrootcert" => split.root_cert = Some(PathBuf::from(percent_decode(value)?)),
            "sslcert" => split.cert = Some(NamedFile::new(percent_decode(value)?, "sslcert")),
            "sslkey" => split.key = Some(NamedFile::new(percent_decode(value)?, "sslkey")),
            "sslpassword" => return Err(UNSUPPORTED_PASSWORD.to_owned()),
            _ => kept.push(pair),
        }
    }
    split.remaining = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok(split)
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or_else(|| format!("bad percent-encoding in {text:?}"))?;
            let byte =
                u8::from_str_radix(hex, 16).map_err(|_| format!("bad percent-encoding in {text:?}"))?;
            decoded.push(byte);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| format!("{text:?} does not decode to UTF-8"))
}

/// A `key=value key='quoted value'` string: the TLS pairs are cut out, the rest kept as
/// written.
fn split_key_values(text: &str) -> Result<TlsUrl, String> {
    let mut split = TlsUrl { remaining: String::new(), mode: None, root_cert: None, cert: None, key: None };
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            break;
        }
        let (key, value, after) = key_value(trimmed)?;
        match key {
            "sslmode" => split.mode = Some(LibpqSslMode::parse(&value)?),
            "sslrootcert" => split.root_cert = Some(PathBuf::from(value)),
            "sslcert" => split.cert = Some(NamedFile::new(value, "sslcert")),
            "sslkey" => split.key = Some(NamedFile::new(value, "sslkey")),
            "sslpassword" => return Err(UNSUPPORTED_PASSWORD.to_owned()),
            _ => {
                if !kept.is_empty() {
                    kept.push(' ');
                }
                kept.push_str(&trimmed[..trimmed.len() - after.len()]);
            }
        }
        rest = after;
    }
    split.remaining = kept;
    Ok(split)
}

/// The first `key = value` of `text` (which starts at the key): the key, the unescaped
/// value, and what follows it.
fn key_value(text: &str) -> Result<(&str, String, &str), String> {
    let key_end = text.find(|c: char| c == '=' || c.is_whitespace()).unwrap_or(text.len());
    let key = &text[..key_end];
    let after_key = text[key_end..].trim_start();
    let Some(after_equals) = after_key.strip_prefix('=') else {
        return Err(format!("{key:?} has no `=` and no value"));
    };
    let value_text = after_equals.trim_start();
    let mut value = String::new();
    let mut chars = value_text.char_indices();
    if value_text.starts_with('\'') {
        chars.next();
        loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("the value of {key:?} ends in a lone backslash")),
                },
                Some((i, '\'')) => return Ok((key, value, &value_text[i + 1..])),
                Some((_, c)) => value.push(c),
                None => return Err(format!("the quoted value of {key:?} is not closed")),
            }
        }
    }
    loop {
        match chars.next() {
            Some((i, c)) if c.is_whitespace() => return Ok((key, value, &value_text[i..])),
            Some((_, '\\')) => match chars.next() {
                Some((_, c)) => value.push(c),
                None => return Err(format!("the value of {key:?} ends in a lone backslash")),
            },
            Some((_, c)) => value.push(c),
            None => return Ok((key, value, "")),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn split(text: &str) -> TlsUrl {
        TlsUrl::split(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn urls_lose_only_their_tls_pairs() {
        let url = split(
            "postgres://u@db:5433/app?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        );
        assert_eq!(url.remaining, "postgres://u@db:5433/app?application_name=x");
        assert_eq!(url.mode, Some(LibpqSslMode::VerifyFull));
        assert_eq!(url.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        let url = split("postgresql://db/app?sslmode=require");
        assert_eq!((url.remaining.as_str(), url.mode), ("postgresql://db/app", Some(LibpqSslMode::Require)));
        assert_eq!(split("postgres://db/app").mode, None);
    }

    #[test]
    fn key_values_lose_only_their_tls_pairs_quotes_and_all() {
        let kv =
            split(r"host=db  sslmode = verify-ca password='a \' b' sslrootcert='/my certs/ca.pem' user=me");
        assert_eq!(kv.remaining, r"host=db password='a \' b' user=me");
        assert_eq!(kv.mode, Some(LibpqSslMode::VerifyCa));
        assert_eq!(kv.root_cert, Some(PathBuf::from("/my certs/ca.pem")));
        let parsed: tokio_postgres::Config = kv.remaining.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.get_password(), Some(&b"a ' b"[..]));
    }

    #[test]
    fn client_certificate_pairs_are_taken_out_naming_where_they_came_from() {
        let url = split("postgres://db/app?sslcert=%2Fc%2Fme.crt&application_name=x&sslkey=%2Fc%2Fme.key");
        assert_eq!(url.remaining, "postgres://db/app?application_name=x");
        assert_eq!(url.cert, Some(NamedFile::new("/c/me.crt", "sslcert")));
        assert_eq!(url.key, Some(NamedFile::new("/c/me.key", "sslkey")));
        let kv = split("host=db sslcert='/my certs/me.crt' sslkey=/k user=me");
        assert_eq!(kv.remaining, "host=db user=me");
        assert_eq!(kv.cert, Some(NamedFile::new("/my certs/me.crt", "sslcert")));
        assert_eq!(kv.key, Some(NamedFile::new("/k", "sslkey")));
        for text in ["host=db sslpassword=x", "postgres://db/app?sslpassword=x"] {
            let error = TlsUrl::split(text).unwrap_err();
            assert!(error.starts_with("sslpassword is not supported"), "{error}");
        }
    }

    #[test]
    fn bad_tls_settings_are_refused_naming_them() {
        let error = TlsUrl::split("host=db sslmode=verify").unwrap_err();
        assert!(error.contains("\"verify\""), "{error}");
        let error = TlsUrl::split("host=db sslrootcert='/x").unwrap_err();
        assert!(error.contains("sslrootcert"), "{error}");
        let error = TlsUrl::split("postgres://db/x?sslrootcert=%zz").unwrap_err();
        assert!(error.contains("%zz"), "{error}");
    }

    fn quote(value: &str) -> String {
        format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
    }

    proptest! {
        /// Whatever other pairs a key=value string holds, and wherever the TLS pairs sit,
        /// the TLS values come out exactly and tokio-postgres reads the rest as before.
        #[test]
        fn key_value_strings_keep_every_other_pair(
            password in "[ -~]{0,12}",
            root in "[ -~]{1,12}",
            position in 0usize..3,
        ) {
            let mut pairs = vec![format!("password={}", quote(&password)), "user=me".to_owned(), "host=db".to_owned()];
            pairs.insert(position, format!("sslrootcert={}", quote(&root)));
            pairs.insert(position, "sslmode=verify-full".to_owned());
            let kv = TlsUrl::split(&pairs.join(" ")).map_err(TestCaseError::fail)?;
            prop_assert_eq!(kv.mode, Some(LibpqSslMode::VerifyFull));
            prop_assert_eq!(kv.root_cert, Some(PathBuf::from(&root)));
            let parsed: tokio_postgres::Config = kv.remaining.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
            prop_assert_eq!(parsed.get_password(), Some(password.as_bytes()));
            prop_assert_eq!(parsed.get_user(), Some("me"));
        }
    }
}
