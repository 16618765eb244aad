//! Dead-letter policies in configuration files (OPT-2): a list of rules, one table per
//! message type, durations as human strings, unknown keys refused, and every rule validated
//! as [`DeadLetterPolicies::new`] does.
//!
//! ```
//! use relayer_core::dead_letter::DeadLetterPolicies;
//!
//! #[derive(Debug, serde::Deserialize)]
//! struct Config {
//!     policies: DeadLetterPolicies,
//! }
//! let config: Config = toml::from_str(r#"
//!     [[policies]]
//!     original_topic = "orders"
//!     dead_letter_queue = "orders.dead"
//!     action = "redrive"
//!     after = "1h"
//!     give_up_after = "1d"
//!
//!     [[policies]]
//!     transport = "nats"
//!     destination = "audit"
//!     action = "expire"
//!     after = "7d"
//! "#).unwrap();
//! assert_eq!(config.policies.rules().len(), 2);
//!
//! let refused = toml::from_str::<Config>(r#"
//!     [[policies]]
//!     original_topic = "orders"
//!     dead_letter_queue = "orders.dead"
//!     action = "redrive"
//!     after = "1d"
//!     give_up_after = "1h"
//! "#).unwrap_err();
//! assert!(refused.to_string().contains("give_up_after: 1h must be greater than after (1d)"), "{refused}");
//! ```

use serde::{Deserialize, Serialize};

use crate::dead_letter::{
    DeadLetterAction, DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, DeadLetterType,
};
use crate::duration::HumanDuration;

/// One rule as configuration writes it: a queue type (`original_topic` and
/// `dead_letter_queue`) or an outbox type (`transport` and `destination`), an `action`, and
/// its windows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterRuleConfig {
    /// The queue the messages were consumed from (queue types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_topic: Option<String>,
    /// The queue holding their dead letters (queue types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_queue: Option<String>,
    /// The transport (outbox types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The destination (outbox types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// What to do.
    pub action: ActionName,
    /// Wait after dead-lettering.
    pub after: HumanDuration,
    /// For `redrive` (and only there): the age since creation past which it gives up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub give_up_after: Option<HumanDuration>,
}

/// The `action` of a [`DeadLetterRuleConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionName {
    /// Move dead letters back.
    Redrive,
    /// Delete them.
    Expire,
}

impl TryFrom<DeadLetterRuleConfig> for DeadLetterRule {
    type Error = String;

    fn try_from(config: DeadLetterRuleConfig) -> Result<Self, String> {
        let policy = match (config.action, config.give_up_after) {
            (ActionName::Redrive, Some(give_up_after)) => {
                DeadLetterPolicy::redrive(config.after.0, give_up_after.0).map_err(|e| e.to_string())?
            }
            (ActionName::Redrive, None) => return Err("give_up_after: a redrive needs it".to_owned()),
            (ActionName::Expire, None) => DeadLetterPolicy::expire(config.after.0),
            (ActionName::Expire, Some(_)) => {
                return Err(
                    "give_up_after: only a redrive gives up; leave it out of an expire rule".to_owned()
                );
            }
        };
        match (config.original_topic, config.dead_letter_queue, config.transport, config.destination) {
            (Some(topic), Some(queue), None, None) => Ok(DeadLetterRule::queue(topic, queue, policy)),
            (None, None, Some(transport), Some(destination)) => {
                Ok(DeadLetterRule::outbox(transport, destination, policy))
            }
            _ => Err("a dead-letter rule names either original_topic and dead_letter_queue (a queue type) \
                      or transport and destination (an outbox type)"
                .to_owned()),
        }
    }
}

impl From<&DeadLetterRule> for DeadLetterRuleConfig {
    fn from(rule: &DeadLetterRule) -> Self {
        let (action, give_up_after) = match rule.policy().action() {
            DeadLetterAction::Redrive { give_up_after, .. } => {
                (ActionName::Redrive, Some(HumanDuration(give_up_after)))
            }
            DeadLetterAction::Expire { .. } => (ActionName::Expire, None),
        };
        let mut config = DeadLetterRuleConfig {
            original_topic: None,
            dead_letter_queue: None,
            transport: None,
            destination: None,
            action,
            after: HumanDuration(rule.policy().after()),
            give_up_after,
        };
        match rule.message_type().clone() {
            DeadLetterType::Queue { original_topic, dead_letter_queue } => {
                config.original_topic = Some(original_topic);
                config.dead_letter_queue = Some(dead_letter_queue);
            }
            DeadLetterType::Outbox { transport, destination } => {
                config.transport = Some(transport);
                config.destination = Some(destination);
            }
        }
        config
    }
}

impl Serialize for DeadLetterPolicies {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.rules().iter().map(DeadLetterRuleConfig::from))
    }
}

impl<'de> Deserialize<'de> for DeadLetterPolicies {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let configs = Vec::<DeadLetterRuleConfig>::deserialize(deserializer)?;
        let rules = configs
            .into_iter()
            .enumerate()
            .map(|(index, config)| {
                DeadLetterRule::try_from(config)
                    .map_err(|e| serde::de::Error::custom(format!("dead-letter rule {}: {e}", index + 1)))
            })
            .collect::<Result<Vec<_>, D::Error>>()?;
        DeadLetterPolicies::new(rules).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn policies_round_trip_through_serde_and_refuse_bad_rules_opt_2() {
        let hour = Duration::from_secs(3_600);
        let policies = DeadLetterPolicies::new([
            DeadLetterRule::queue("orders", "dead", DeadLetterPolicy::redrive(hour, 24 * hour).unwrap()),
            DeadLetterRule::outbox("nats", "audit", DeadLetterPolicy::expire(Duration::ZERO)),
        ])
        .unwrap();
        let json = serde_json::to_string(&policies).unwrap();
        assert_eq!(
            json,
            r#"[{"original_topic":"orders","dead_letter_queue":"dead","action":"redrive","after":"1h","give_up_after":"1d"},{"transport":"nats","destination":"audit","action":"expire","after":"0s"}]"#
        );
        assert_eq!(serde_json::from_str::<DeadLetterPolicies>(&json).unwrap(), policies);

        let cases = [
            (
                r#"[{"original_topic":"o","dead_letter_queue":"d","action":"redrive","after":"1h"}]"#,
                "dead-letter rule 1: give_up_after: a redrive needs it",
            ),
            (
                r#"[{"transport":"t","destination":"d","action":"expire","after":"1h","give_up_after":"2h"}]"#,
                "only a redrive gives up",
            ),
            (
                r#"[{"original_topic":"o","transport":"t","action":"expire","after":"1h"}]"#,
                "names either original_topic and dead_letter_queue",
            ),
            (
                r#"[{"original_topic":"o","dead_letter_queue":"d","action":"expire","after":"1h","colour":"red"}]"#,
                "unknown field `colour`",
            ),
            (
                r#"[{"original_topic":"o","dead_letter_queue":"d","action":"requeue","after":"1h"}]"#,
                "unknown variant `requeue`",
            ),
            (
                r#"[{"original_topic":"o","dead_letter_queue":"d","action":"expire","after":"soon"}]"#,
                "invalid duration",
            ),
            (
                r#"[{"original_topic":"o","dead_letter_queue":"d","action":"expire","after":"1h"},{"original_topic":"o","dead_letter_queue":"d","action":"expire","after":"2h"}]"#,
                "has two policies",
            ),
        ];
        for (json, expected) in cases {
            let error = serde_json::from_str::<DeadLetterPolicies>(json).unwrap_err().to_string();
            assert!(error.contains(expected), "{json}: {error}");
        }
    }
}
