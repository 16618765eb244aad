//! What the console serves on and who may act through it, checked before anything binds.

use std::net::SocketAddr;
use std::path::PathBuf;

/// The shortest access token accepted: guessing it must not be practical.
pub(crate) const MIN_TOKEN_LENGTH: usize = 16;

/// How the console is served and whether it may change anything.
#[derive(Clone)]
pub struct ConsoleSettings {
    /// Where to listen. A loopback address, unless [`tls`](Self::tls) and
    /// [`access_token`](Self::access_token) are both set.
    pub listen: SocketAddr,
    /// Whether redrive, purge, release and skip are offered (off: every page is read-only
    /// and every action request is refused).
    pub actions: bool,
    /// Who an action is audited as; required when [`actions`](Self::actions) is set.
    pub actor: Option<ActorSource>,
    /// A secret every request must present (an `Authorization: Bearer` header, or the
    /// cookie the login page sets). Required beyond loopback; at least
    /// 16 characters.
    pub access_token: Option<String>,
    /// Serve HTTPS with this certificate and key. Required beyond loopback.
    pub tls: Option<TlsFiles>,
}

/// Where the actor of an action comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActorSource {
    /// A request header an authenticating proxy sets (`X-Forwarded-User`, say): a request
    /// without it (or with it empty) may not act.
    Header(String),
    /// One fixed name for everyone who can reach the console.
    Name(String),
}

/// A PEM certificate chain and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (PEM).
    pub certificate: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The access token is never shown: `Some("<redacted>")`.
impl std::fmt::Debug for ConsoleSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSettings")
            .field("listen", &self.listen)
            .field("actions", &self.actions)
            .field("actor", &self.actor)
            .field("access_token", &self.access_token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl ConsoleSettings {
    /// Read-only settings listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        ConsoleSettings { listen, actions: false, actor: None, access_token: None, tls: None }
    }

    /// Refuses settings the console must not start with, in one line naming the key
    /// (`console.listen: …`): an address beyond loopback without both TLS and an access
    /// token, actions without an actor, actions naming their actor from a header without an
    /// access token (anyone could send that header), a short token, a bad header name or
    /// actor name.
    pub fn check(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() {
            let mut missing = Vec::new();
            if self.tls.is_none() {
                missing.push("console.tls_certificate and console.tls_key");
            }
            if self.access_token.is_none() {
                missing.push("console.access_token");
            }
            if !missing.is_empty() {
                return Err(format!(
                    "console.listen: {} is not a loopback address; serving beyond this host needs {}",
                    self.listen,
                    missing.join(" and ")
                ));
            }
        }
        if let Some(token) = &self.access_token {
            if token.chars().count() < MIN_TOKEN_LENGTH {
                return Err(format!(
                    "console.access_token: {} characters is too short (at least {MIN_TOKEN_LENGTH})",
                    token.chars().count()
                ));
            }
            if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err("console.access_token: must not hold spaces or control characters".to_owned());
            }
        }
        match (&self.actor, self.actions) {
            (None, true) => {
                return Err("console.actions: actions need an actor to audit: set console.actor_header \
                            (a header your proxy sets) or console.actor (a fixed name)"
                    .to_owned());
            }
            (Some(ActorSource::Header(name)), actions) => {
                if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(format!("console.actor_header: {name:?} is not a valid header name"));
                }
                // Any client can send any header: one is only an identity when the proxy
                // that sets it is the only way in. The token is how the console knows: the
                // proxy presents it, a client that goes around the proxy cannot.
                if actions && self.access_token.is_none() {
                    return Err(format!(
                        "console.actor_header: {name} names the actor only when a proxy sets it and is the only way \
                         in; set console.access_token and have the proxy send it, or set console.actor"
                    ));
                }
            }
            (Some(ActorSource::Name(name)), _) => {
                actor_name(name).map_err(|e| format!("console.actor: {e}"))?;
            }
            (None, false) => {}
        }
        Ok(())
    }
}

/// The longest actor name recorded.
const MAX_ACTOR: usize = 200;

/// `name` as an audit actor (`console:NAME`), refused when empty, too long, or holding a
/// control character (the audit table is read on terminals).
pub(crate) fn actor_name(name: &str) -> Result<String, String> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err("empty: an action is never anonymous".to_owned());
    }
    if trimmed.chars().count() > MAX_ACTOR {
        return Err(format!("longer than {MAX_ACTOR} characters"));
    }
    if trimmed.chars().any(char::is_control) {
        return Err("holds a control character".to_owned());
    }
    Ok(format!("console:{trimmed}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(address: &str) -> ConsoleSettings {
        ConsoleSettings::new(address.parse().expect("an address"))
    }

    /// OBS-3: beyond loopback the console needs TLS and a token; actions need an actor, and
    /// an actor taken from a header needs a token (else anyone could send the header).
    #[test]
    fn settings_the_console_must_not_start_with_are_refused_naming_the_key_obs_3() {
        let tls = TlsFiles { certificate: "c.pem".into(), key: "k.pem".into() };
        assert!(at("127.0.0.1:9188").check().is_ok());
        assert!(at("[::1]:9188").check().is_ok());
        let open = at("0.0.0.0:9188").check().unwrap_err();
        assert!(open.starts_with("console.listen: 0.0.0.0:9188 is not a loopback address"), "{open}");
        assert!(open.contains("console.tls_certificate") && open.contains("console.access_token"), "{open}");
        let mut only_tls = at("10.0.0.5:9188");
        only_tls.tls = Some(tls);
        let refused = only_tls.check().unwrap_err();
        assert!(refused.contains("console.access_token") && !refused.contains("tls_key"), "{refused}");
        let mut served = only_tls;
        served.access_token = Some("0123456789abcdef".to_owned());
        assert!(served.check().is_ok());
        served.access_token = Some("short".to_owned());
        assert!(served.check().unwrap_err().starts_with("console.access_token: 5 characters is too short"));

        let mut acting = at("127.0.0.1:9188");
        acting.actions = true;
        assert!(acting.check().unwrap_err().starts_with("console.actions: actions need an actor"));
        acting.actor = Some(ActorSource::Header("bad header".to_owned()));
        assert!(acting.check().unwrap_err().starts_with("console.actor_header: \"bad header\""));
        acting.actor = Some(ActorSource::Header("X-Forwarded-User".to_owned()));
        let forgeable = acting.check().unwrap_err();
        assert!(
            forgeable.starts_with("console.actor_header: X-Forwarded-User names the actor only when"),
            "{forgeable}"
        );
        assert!(forgeable.contains("console.access_token"), "{forgeable}");
        acting.access_token = Some("0123456789abcdef".to_owned());
        assert!(acting.check().is_ok(), "the proxy presents the token: only it can name the actor");
        acting.actions = false;
        acting.access_token = None;
        assert!(acting.check().is_ok(), "without actions the header names nobody");
        acting.actions = true;
        acting.actor = Some(ActorSource::Name("  ".to_owned()));
        assert!(acting.check().unwrap_err().starts_with("console.actor: empty"));
        acting.actor = Some(ActorSource::Name("ops\u{1b}[2J".to_owned()));
        assert!(acting.check().unwrap_err().starts_with("console.actor: holds a control character"));
    }

    #[test]
    fn an_actor_is_recorded_as_coming_from_the_console_obs_3() {
        assert_eq!(actor_name(" alice ").as_deref(), Ok("console:alice"));
    }
}
