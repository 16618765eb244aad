//! `relayer run`'s configuration: a TOML file with `RELAYER_*` environment variables layered
//! on top (figment), refused in one line naming the path of the first bad value.
//!
//! Naming: `RELAYER_` then the path in capitals, sections separated by a double underscore:
//! `sweeper.batch_size` ← `RELAYER_SWEEPER__BATCH_SIZE`, `namespace.schema` ←
//! `RELAYER_NAMESPACE__SCHEMA`, `database_url` ← `RELAYER_DATABASE_URL`. Of the variables
//! without `__`, only `RELAYER_DATABASE_URL`, `RELAYER_POOL_SIZE` and `RELAYER_INSTANCE_ID`
//! are configuration (`RELAYER_LOG` is the log filter). A worker runs when its section is present. The
//! worker sections are the worker options types themselves (OPT-2: human durations,
//! `infinite` retentions, unknown keys refused, ranges checked).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use relayer_console::{ActorSource, ConsoleSettings, TlsFiles};
use relayer_core::namespace::IdentifierKind;
use relayer_core::{
    CleanupOptions, DeadLetterOptions, DeadLetterPolicies, DispatcherOptions, Namespace, SweeperOptions,
};
use serde::Deserialize;

use crate::config_error::{one_line, single_line};

/// The environment variables' prefix.
pub(crate) const ENV_PREFIX: &str = "RELAYER_";
/// The top-level keys that a variable without `__` may set. Other `RELAYER_X` variables
/// (`RELAYER_LOG`, test and tool settings) are not configuration; any variable with `__`
/// is, so a misspelt section is refused.
const TOP_LEVEL: &[&str] = &["database_url", "pool_size", "instance_id"];

/// The whole configuration of a sidecar, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    database_url: Option<String>,
    pool_size: Option<u32>,
    instance_id: Option<String>,
    #[serde(default)]
    namespace: NamespaceSection,
    metrics: Option<MetricsSection>,
    console: Option<ConsoleSection>,
    dispatcher: Option<DispatcherOptions>,
    sweeper: Option<SweeperOptions>,
    cleanup: Option<CleanupOptions>,
    dead_letter: Option<DeadLetterOptions>,
    /// One table per message type (`relayer_core::dead_letter_config`), validated as a set.
    dead_letter_policies: Option<DeadLetterPolicies>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NamespaceSection {
    schema: String,
    prefix: String,
}

impl Default for NamespaceSection {
    fn default() -> Self {
        NamespaceSection {
            schema: "public".to_owned(),
            prefix: relayer_core::namespace::DEFAULT_PREFIX.to_owned(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    listen: SocketAddr,
    #[serde(default = "default_sample_interval", with = "relayer_core::duration::human")]
    sample_interval: Duration,
}

/// `[console]`: the operator console (`relayer_console`), served beside the workers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsoleSection {
    listen: SocketAddr,
    #[serde(default)]
    actions: bool,
    actor_header: Option<String>,
    actor: Option<String>,
    access_token: Option<String>,
    tls_certificate: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

impl ConsoleSection {
    fn validate(self) -> Result<ConsoleSettings, String> {
        let actor = match (self.actor_header, self.actor) {
            (Some(_), Some(_)) => {
                return Err("console.actor: set console.actor_header or console.actor, not both".to_owned());
            }
            (Some(header), None) => Some(ActorSource::Header(header)),
            (None, Some(name)) => Some(ActorSource::Name(name)),
            (None, None) => None,
        };
        let tls = match (self.tls_certificate, self.tls_key) {
            (Some(certificate), Some(key)) => {
                for (name, path) in [("tls_certificate", &certificate), ("tls_key", &key)] {
                    if !path.is_file() {
                        return Err(format!("console.{name}: {}: no such file", path.display()));
                    }
                }
                Some(TlsFiles { certificate, key })
            }
            (Some(_), None) => {
                return Err("console.tls_key: missing (console.tls_certificate is set)".to_owned());
            }
            (None, Some(_)) => {
                return Err("console.tls_certificate: missing (console.tls_key is set)".to_owned());
            }
            (None, None) => None,
        };
        let settings = ConsoleSettings {
            listen: self.listen,
            actions: self.actions,
            actor,
            access_token: self.access_token,
            tls,
        };
        settings.check()?;
        Ok(settings)
    }
}

fn default_sample_interval() -> Duration {
    Duration::from_secs(15)
}

/// A validated sidecar configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) database_url: Option<String>,
    /// Connections in each pool the sidecar opens; `None`: each sized from its workers.
    pub(crate) pool_size: Option<u32>,
    pub(crate) instance_id: Option<String>,
    pub(crate) namespace: Namespace,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) console: Option<ConsoleSettings>,
    pub(crate) dispatcher: Option<DispatcherOptions>,
    pub(crate) sweeper: Option<SweeperOptions>,
    pub(crate) cleanup: Option<CleanupOptions>,
    pub(crate) dead_letter: Option<DeadLetterOptions>,
    pub(crate) policies: Option<DeadLetterPolicies>,
}

/// Where metrics are served.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Metrics {
    pub(crate) listen: SocketAddr,
    pub(crate) sample_interval: Duration,
}

impl Config {
    /// Reads `path`, layers `RELAYER_*` variables from `env` on top, and validates it all.
    /// The error is one line naming the path of the first bad value.
    pub(crate) fn load(path: &Path) -> Result<Config, String> {
        if !path.is_file() {
            return Err(format!("{}: no such configuration file", path.display()));
        }
        let figment = Figment::from(Toml::file(path)).merge(
            Env::prefixed(ENV_PREFIX)
                .filter(|key| {
                    key.as_str().contains("__")
                        || TOP_LEVEL.iter().any(|top| key.as_str().eq_ignore_ascii_case(top))
                })
                .split("__"),
        );
        let file: File = figment.extract().map_err(|e| one_line(&e, path, ENV_PREFIX, TOP_LEVEL))?;
        file.validate()
    }

    /// The workers this configuration runs, by name.
    pub(crate) fn workers(&self) -> Vec<&'static str> {
        [
            self.dispatcher.as_ref().map(|_| "dispatcher"),
            self.sweeper.as_ref().map(|_| "sweeper"),
            self.cleanup.as_ref().map(|_| "cleanup"),
            self.policies.as_ref().map(|_| "dead_letter"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The effective configuration, as JSON (the database URL is left out).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "namespace": {"schema": self.namespace.schema(), "prefix": self.namespace.prefix()},
            "pool_size": self.pool_size,
            "instance_id": self.instance_id,
            "metrics": self.metrics.map(|m| serde_json::json!({
                "listen": m.listen.to_string(),
                "sample_interval": relayer_core::duration::format_duration(m.sample_interval),
            })),
            // The access token is a secret: only whether one is set.
            "console": self.console.as_ref().map(|c| serde_json::json!({
                "listen": c.listen.to_string(),
                "actions": c.actions,
                "actor_header": match &c.actor { Some(ActorSource::Header(h)) => Some(h.clone()), _ => None },
                "actor": match &c.actor { Some(ActorSource::Name(n)) => Some(n.clone()), _ => None },
                "access_token": c.access_token.as_ref().map(|_| "(set)"),
                "tls": c.tls.is_some(),
            })),
            "dispatcher": self.dispatcher,
            "sweeper": self.sweeper,
            "cleanup": self.cleanup,
            "dead_letter": self.dead_letter,
            "dead_letter_policies": self.policies.as_ref().map(|p| p.rules().iter().map(ToString::to_string).collect::<Vec<_>>()),
            "workers": self.workers(),
        })
    }
}

impl File {
    fn validate(self) -> Result<Config, String> {
        let namespace = Namespace::new(&self.namespace.schema, &self.namespace.prefix).map_err(|e| {
            let field = match e.kind() {
                IdentifierKind::Schema => "schema",
                IdentifierKind::Prefix => "prefix",
            };
            format!("namespace.{field}: {e}")
        })?;
        let pool_size = self.pool_size;
        if let Some(size) = pool_size
            && !(1..=64).contains(&size)
        {
            return Err(format!("pool_size: {size} is out of range (1..=64)"));
        }
        if let Some(url) = &self.database_url {
            parse_database_url(url, "database_url", None)?;
        }
        if self.instance_id.as_deref().is_some_and(|id| id.trim().is_empty()) {
            return Err("instance_id: must not be empty".to_owned());
        }
        if let Some(metrics) = &self.metrics {
            if !metrics.listen.ip().is_loopback() {
                return Err(format!(
                    "metrics.listen: {} is not a loopback address (expose it through a proxy you control)",
                    metrics.listen
                ));
            }
            if metrics.sample_interval.is_zero() {
                return Err("metrics.sample_interval: 0s must be positive".to_owned());
            }
        }
        let policies = self.dead_letter_policies.filter(|policies| !policies.is_empty());
        if policies.is_none() && self.dead_letter.is_some() {
            return Err("dead_letter: set, but no [[dead_letter_policies]] to apply".to_owned());
        }
        let config = Config {
            database_url: self.database_url,
            pool_size,
            instance_id: self.instance_id,
            namespace,
            metrics: self.metrics.map(|m| Metrics { listen: m.listen, sample_interval: m.sample_interval }),
            console: self.console.map(ConsoleSection::validate).transpose()?,
            dispatcher: self.dispatcher,
            sweeper: self.sweeper,
            cleanup: self.cleanup,
            dead_letter: self.dead_letter,
            policies,
        };
        if config.workers().is_empty() {
            return Err(
                "nothing to run: add a [sweeper], [cleanup], [dispatcher] section or [[dead_letter_policies]]"
                    .to_owned(),
            );
        }
        Ok(config)
    }
}

/// `url` as a connection configuration, refused in one line naming `name` when it is not
/// a connection string or names no host to connect to — without connecting. The URL itself
/// is never echoed: it may carry a password.
pub(crate) fn parse_database_url(
    url: &str,
    name: &str,
    ca_file: Option<&std::path::Path>,
) -> Result<relayer::postgres::Connector, String> {
    // The TLS settings (sslmode, sslrootcert) are read too: a CA file that cannot be read
    // is a bad configuration as much as a bad host is.
    let connector = relayer::postgres::connector_from_url(url, ca_file)
        .map_err(|e| format!("{name}: {}", single_line(&relayer_core::error_chain(&e))))?;
    if connector.config().get_hosts().is_empty() {
        return Err(format!("{name}: names no host (add host=… or postgres://HOST/…)"));
    }
    Ok(connector)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, String> {
        let path = std::env::temp_dir().join(format!("relayer-config-{}.toml", relayer_core::Uuid::new_v4()));
        std::fs::write(&path, text).unwrap();
        let loaded = Config::load(&path);
        let _ = std::fs::remove_file(&path);
        loaded
    }

    #[test]
    fn a_full_file_is_read_with_human_durations_opt_2() {
        let config = load(
            "[namespace]\nschema = \"messaging\"\n[sweeper]\nbatch_size = 200\nsweep_interval = \"2s\"\n\
             [cleanup]\ndead_retention = \"infinite\"\n[metrics]\nlisten = \"127.0.0.1:9187\"\n\
             [[dead_letter_policies]]\noriginal_topic = \"orders\"\ndead_letter_queue = \"orders.dead\"\n\
             action = \"redrive\"\nafter = \"1h\"\ngive_up_after = \"1d\"\n",
        )
        .unwrap();
        assert_eq!(config.namespace.schema(), "messaging");
        assert_eq!(config.sweeper.as_ref().unwrap().batch_size(), 200);
        assert_eq!(config.sweeper.as_ref().unwrap().sweep_interval(), Duration::from_secs(2));
        assert_eq!(config.workers(), ["sweeper", "cleanup", "dead_letter"]);
    }

    /// OBS-3: a console section is read with its actor; the access token never appears in
    /// the effective configuration.
    #[test]
    fn a_console_section_is_read_and_its_token_never_shown_obs_3() {
        let config = load(
            "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\nactions = true\nactor_header = \"X-Forwarded-User\"\n\
             access_token = \"0123456789abcdef-secret\"\n",
        )
        .unwrap();
        let console = config.console.as_ref().unwrap();
        assert!(console.actions);
        assert_eq!(console.actor, Some(ActorSource::Header("X-Forwarded-User".to_owned())));
        let shown = config.to_json().to_string();
        assert!(!shown.contains("secret") && shown.contains("X-Forwarded-User"), "{shown}");
    }

    #[test]
    fn each_bad_value_is_refused_in_one_line_naming_its_path_opt_2() {
        let cases = [
            ("[sweeper]\nbatch_size = 0\n", "sweeper.batch_size: 0 is out of range"),
            ("[sweeper]\nbatch_siz = 10\n", "sweeper.batch_siz: unknown key"),
            ("[sweeper]\nsweep_interval = \"5 parsecs\"\n", "sweeper.sweep_interval: "),
            ("[cleanup]\ninbox_retention = \"forever\"\n", "cleanup.inbox_retention: "),
            ("colour = \"blue\"\n[sweeper]\n", "colour: unknown key"),
            // A file that does not parse: the parser's multi-line report, on one line.
            ("[sweeper\nbatch_size = 1\n", ""),
            (
                "[namespace]\nschema = \"a;b\"\nprefix = \"r_\"\n[sweeper]\n",
                "namespace.schema: invalid schema \"a;b\"",
            ),
            (
                "[sweeper]\n[metrics]\nlisten = \"0.0.0.0:9187\"\n",
                "metrics.listen: 0.0.0.0:9187 is not a loopback",
            ),
            ("[sweeper]\n[metrics]\nlisten = \"nowhere\"\n", "metrics.listen: "),
            (
                "[[dead_letter_policies]]\noriginal_topic = \"q\"\ndead_letter_queue = \"d\"\naction = \"redrive\"\nafter = \"1d\"\ngive_up_after = \"1h\"\n",
                "dead_letter_policies: dead-letter rule 1: give_up_after: 1h must be greater than after (1d)",
            ),
            ("[namespace]\nprefix = \"r-\"\n[sweeper]\n", "namespace.prefix: invalid table prefix \"r-\""),
            ("pool_size = 0\n[sweeper]\n", "pool_size: 0 is out of range"),
            (
                "database_url = \"postgres://db:port/app\"\n[sweeper]\n",
                "database_url: not a valid connection string",
            ),
            ("database_url = \"host=db dbname\"\n[sweeper]\n", "database_url: not a valid connection string"),
            ("database_url = \"dbname=app\"\n[sweeper]\n", "database_url: names no host"),
            ("", "nothing to run"),
            (
                "[sweeper]\n[console]\nlisten = \"0.0.0.0:9188\"\n",
                "console.listen: 0.0.0.0:9188 is not a loopback address; serving beyond this host needs",
            ),
            (
                "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\nactions = true\n",
                "console.actions: actions need an actor",
            ),
            (
                "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\nactor = \"a\"\nactor_header = \"X-User\"\n",
                "console.actor: set console.actor_header or console.actor, not both",
            ),
            (
                "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\ntls_certificate = \"/nonexistent.pem\"\n",
                "console.tls_key: missing (console.tls_certificate is set)",
            ),
            (
                "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\ntls_certificate = \"/nonexistent.pem\"\ntls_key = \"/nonexistent.key\"\n",
                "console.tls_certificate: /nonexistent.pem: no such file",
            ),
            (
                "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\ncolour = 1\n",
                "console.colour: unknown key",
            ),
            (
                "[sweeper]\n[console]\nlisten = \"127.0.0.1:9188\"\naccess_token = \"short\"\n",
                "console.access_token: 5 characters",
            ),
        ];
        for (text, expected) in cases {
            let error = load(text).unwrap_err();
            assert!(error.starts_with(expected), "{text:?}: {error}");
            assert!(!error.contains('\n'), "{text:?}: {error}");
        }
    }
}
