//! libpq's environment defaults for the TLS settings a connection string leaves out:
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`, read as libpq reads them — a
//! value in the connection string wins, the variable fills in what it does not say.
//! Without this, an operator's `PGSSLMODE=verify-full` would be ignored and the connection
//! would fall to the default `prefer` (encrypted, but unverified), and a server that
//! authenticates clients by certificate would refuse relayer.

use std::path::PathBuf;

use crate::libpq_url::{LibpqSslMode, NamedFile, TlsUrl};

/// The TLS variables of the environment, as read once per connection string.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LibpqEnv {
    pub(crate) sslmode: Option<String>,
    pub(crate) sslrootcert: Option<PathBuf>,
    pub(crate) sslcert: Option<PathBuf>,
    pub(crate) sslkey: Option<PathBuf>,
}

impl LibpqEnv {
    /// This process's `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`; empty
    /// values count as unset, as in libpq.
    pub(crate) fn read() -> LibpqEnv {
        let var = |name| std::env::var_os(name).filter(|value| !value.is_empty());
        LibpqEnv {
            sslmode: var("PGSSLMODE").map(|mode| mode.to_string_lossy().into_owned()),
            sslrootcert: var("PGSSLROOTCERT").map(PathBuf::from),
            sslcert: var("PGSSLCERT").map(PathBuf::from),
            sslkey: var("PGSSLKEY").map(PathBuf::from),
        }
    }

    /// Fills in what `url` leaves out; a bad `PGSSLMODE` is an error naming the variable.
    pub(crate) fn fill(&self, url: &mut TlsUrl) -> Result<(), String> {
        if url.mode.is_none()
            && let Some(mode) = &self.sslmode
        {
            url.mode = Some(LibpqSslMode::parse(mode).map_err(|e| format!("PGSSLMODE: {e}"))?);
        }
        if url.root_cert.is_none() {
            url.root_cert.clone_from(&self.sslrootcert);
        }
        if url.cert.is_none() {
            url.cert = self.sslcert.as_ref().map(|path| NamedFile::new(path, "PGSSLCERT"));
        }
        if url.key.is_none() {
            url.key = self.sslkey.as_ref().map(|path| NamedFile::new(path, "PGSSLKEY"));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use super::*;

    fn env(mode: Option<&str>, root: Option<&str>) -> LibpqEnv {
        LibpqEnv {
            sslmode: mode.map(str::to_owned),
            sslrootcert: root.map(PathBuf::from),
            ..LibpqEnv::default()
        }
    }

    #[test]
    fn pgsslcert_and_pgsslkey_fill_in_what_the_url_leaves_out_naming_themselves() {
        let client = LibpqEnv {
            sslcert: Some(PathBuf::from("/env/me.crt")),
            sslkey: Some(PathBuf::from("/env/me.key")),
            ..LibpqEnv::default()
        };
        let mut url = TlsUrl::split("host=db").unwrap();
        client.fill(&mut url).unwrap();
        assert_eq!(url.cert, Some(NamedFile::new("/env/me.crt", "PGSSLCERT")));
        assert_eq!(url.key, Some(NamedFile::new("/env/me.key", "PGSSLKEY")));
        let mut url = TlsUrl::split("host=db sslcert=/mine.crt").unwrap();
        client.fill(&mut url).unwrap();
        assert_eq!(url.cert, Some(NamedFile::new("/mine.crt", "sslcert")), "the string wins");
        assert_eq!(url.key, Some(NamedFile::new("/env/me.key", "PGSSLKEY")));
    }

    #[test]
    fn the_environment_fills_in_what_the_url_leaves_out() {
        let mut url = TlsUrl::split("host=db user=me").unwrap();
        env(Some("verify-full"), Some("/etc/ca.pem")).fill(&mut url).unwrap();
        assert_eq!(url.mode, Some(LibpqSslMode::VerifyFull));
        assert_eq!(url.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(url.remaining, "host=db user=me");
    }

    #[test]
    fn the_url_wins_over_the_environment() {
        let mut url = TlsUrl::split("postgres://db/app?sslmode=require&sslrootcert=%2Fmine.pem").unwrap();
        env(Some("verify-full"), Some("/theirs.pem")).fill(&mut url).unwrap();
        assert_eq!(
            (url.mode, url.root_cert),
            (Some(LibpqSslMode::Require), Some(PathBuf::from("/mine.pem")))
        );
        let mut url = TlsUrl::split("host=db sslmode=disable").unwrap();
        env(Some("verify-full"), None).fill(&mut url).unwrap();
        assert_eq!(url.mode, Some(LibpqSslMode::Disable));
    }

    #[test]
    fn a_bad_pgsslmode_is_refused_naming_the_variable() {
        let mut url = TlsUrl::split("host=db").unwrap();
        let error = env(Some("verify"), None).fill(&mut url).unwrap_err();
        assert!(error.starts_with("PGSSLMODE: sslmode \"verify\""), "{error}");
        // Unused when the URL says it.
        let mut url = TlsUrl::split("host=db sslmode=require").unwrap();
        env(Some("verify"), None).fill(&mut url).unwrap();
    }
}
