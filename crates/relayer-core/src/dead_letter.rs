//! Dead-letter policies (DLP-1..DLP-6): what happens to a message type's dead letters, and
//! whether a set of policies fits the subscriptions that produce them.
//!
//! # The model
//!
//! A consumer that gives up on a message moves it to its subscription's dead-letter queue,
//! stamped with the queue it came from (`original_topic`), a reason and `dead_lettered_at`
//! (QUE-2). A *message type* is that original topic; several types may share one
//! dead-letter queue (DLP-4), so a type is named by both: [`DeadLetterType::Queue`]. The
//! outbox has dead letters of its own — rows that reached `max_attempts` (DSP-5) — and
//! there a type is a transport and destination: [`DeadLetterType::Outbox`].
//!
//! Each type may have one [`DeadLetterPolicy`] (DLP-1): **redrive** its dead letters back to
//! where they came from once they have waited `after` since dead-lettering, for as long as
//! the message is younger than `give_up_after` since its creation; or **expire** (delete)
//! them `after` dead-lettering. Types without a policy keep their dead letters. A redrive
//! that comes too late gives up: the dead letter stays where it is, and every pass counts
//! and logs it (DLP-5). Both windows are measured on the database clock (DLP-2, NS-4), so
//! [`DeadLetterPolicy::decide`] takes the database's `now`.
//!
//! A dead letter without an original topic was not produced by relayer and is never touched;
//! neither is a message that could not be decoded (`unacceptable`): redriving it would only
//! fail again (DLP-4, QUE-2). Expiry deletes both kinds of a type's rows alike, since it
//! needs no destination.
//!
//! [`DeadLetterPolicies`] is a validated set (one policy per type, sensible names), also read
//! from configuration files ([`crate::dead_letter_config`]), and
//! [`DeadLetterPolicies::check_subscriptions`] is the start-time check of DLP-6: every
//! queue type with a policy needs exactly one subscription of its topic, dead-lettering into
//! the policy's queue.
//!
//! ```
//! use std::time::Duration;
//! use relayer_core::dead_letter::{
//!     DeadLetterPolicies, DeadLetterPolicy, DeadLetterRule, SubscriptionQueues,
//! };
//!
//! let hour = Duration::from_secs(3_600);
//! let policies = DeadLetterPolicies::new([
//!     DeadLetterRule::queue("orders", "dead", DeadLetterPolicy::redrive(hour, 24 * hour).unwrap()),
//!     DeadLetterRule::queue("invoices", "dead", DeadLetterPolicy::expire(7 * 24 * hour)),
//! ])
//! .unwrap();
//! let subscriptions = [
//!     SubscriptionQueues::new("orders", Some("dead")),
//!     SubscriptionQueues::new("invoices", Some("dead")),
//! ];
//! policies.check_subscriptions(&subscriptions).unwrap();
//! let error = policies.check_subscriptions(&subscriptions[..1]).unwrap_err();
//! assert!(error.to_string().contains("\"invoices\""), "{error}");
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use crate::options::error::{Field, OptionsError};
use crate::options::validate::check_greater;
use crate::time::Timestamp;

/// The rejection reason of a message that could not be decoded (QUE-2). Policies never
/// redrive it: it would fail the same way again.
pub const UNACCEPTABLE: &str = "unacceptable";

/// The columns of a dead letter that a policy reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetterRow {
    /// The topic the message was dead-lettered from; `None` for a dead letter relayer did
    /// not produce, which no policy ever touches (DLP-4).
    pub original_topic: Option<String>,
    /// When the message was dead-lettered (database clock).
    pub dead_lettered_at: Timestamp,
    /// When the message was first created (database clock).
    pub created_at: Timestamp,
    /// Why it was dead-lettered; [`UNACCEPTABLE`] for a message that could not be decoded,
    /// which no policy redrives.
    pub rejection_reason: Option<String>,
}

/// What a policy does with its message type's dead letters (DLP-1, DLP-2).
///
/// `after` counts from dead-lettering, `give_up_after` from the message's creation.
/// Construction checks `give_up_after > after` (`after` ≥ 0 holds by type), naming the
/// field and the value.
///
/// ```
/// use std::time::Duration;
/// use relayer_core::dead_letter::{DeadLetterDecision, DeadLetterPolicy, DeadLetterRow};
/// use relayer_core::Timestamp;
/// let hour = Duration::from_secs(3_600);
/// let policy = DeadLetterPolicy::redrive(hour, 24 * hour).unwrap();
/// let row = DeadLetterRow {
///     original_topic: Some("orders".into()),
///     dead_lettered_at: Timestamp::EPOCH,
///     created_at: Timestamp::EPOCH,
///     rejection_reason: Some("handler".into()),
/// };
/// assert_eq!(policy.decide(&row, Timestamp::EPOCH.saturating_add(hour)), DeadLetterDecision::Redrive);
/// assert_eq!(policy.decide(&row, Timestamp::EPOCH.saturating_add(24 * hour)), DeadLetterDecision::GaveUp);
/// assert!(DeadLetterPolicy::redrive(hour, hour).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeadLetterPolicy {
    action: DeadLetterAction,
}

/// The action of a [`DeadLetterPolicy`], as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadLetterAction {
    /// Move dead letters back to their original topic `after` dead-lettering, until
    /// `give_up_after` creation.
    Redrive {
        /// Wait after dead-lettering.
        after: Duration,
        /// Age since creation past which a message is no longer redriven.
        give_up_after: Duration,
    },
    /// Delete dead letters `after` dead-lettering.
    Expire {
        /// Wait after dead-lettering.
        after: Duration,
    },
}

impl DeadLetterPolicy {
    /// Redrive `after` dead-lettering, until `give_up_after` creation. Refuses
    /// `give_up_after <= after`: no message could ever be redriven.
    pub fn redrive(after: Duration, give_up_after: Duration) -> Result<Self, OptionsError> {
        check_greater(Field::bare("give_up_after"), give_up_after, Field::bare("after"), after)?;
        Ok(DeadLetterPolicy { action: DeadLetterAction::Redrive { after, give_up_after } })
    }

    /// Delete `after` dead-lettering. Any duration is valid, zero included.
    pub const fn expire(after: Duration) -> Self {
        DeadLetterPolicy { action: DeadLetterAction::Expire { after } }
    }

    /// The configured action.
    pub const fn action(&self) -> DeadLetterAction {
        self.action
    }

    /// The wait after dead-lettering, for either action.
    pub const fn after(&self) -> Duration {
        match self.action {
            DeadLetterAction::Redrive { after, .. } | DeadLetterAction::Expire { after } => after,
        }
    }

    /// The age since creation past which a redrive gives up; `None` for expiry.
    pub const fn give_up_after(&self) -> Option<Duration> {
        match self.action {
            DeadLetterAction::Redrive { give_up_after, .. } => Some(give_up_after),
            DeadLetterAction::Expire { .. } => None,
        }
    }

    /// What to do with `row` at `now` (DLP-2, DLP-4, DLP-5).
    ///
    /// A dead letter without an original topic is [`Untouched`](DeadLetterDecision::Untouched),
    /// and so is an [`UNACCEPTABLE`] one under a redrive policy. Otherwise it waits until `after` has passed since dead-lettering (inclusive); then
    /// an expire policy expires it, and a redrive policy redrives it unless it is already
    /// `give_up_after` old or older since creation, in which case it gave up. The worker
    /// only ever looks at rows of its own type's original topic in its dead-letter queue.
    pub fn decide(&self, row: &DeadLetterRow, now: Timestamp) -> DeadLetterDecision {
        let undecodable = row.rejection_reason.as_deref() == Some(UNACCEPTABLE);
        if row.original_topic.is_none() || (undecodable && self.give_up_after().is_some()) {
            return DeadLetterDecision::Untouched;
        }
        if row.dead_lettered_at > now.saturating_sub(self.after()) {
            return DeadLetterDecision::Wait;
        }
        match self.action {
            DeadLetterAction::Expire { .. } => DeadLetterDecision::Expire,
            DeadLetterAction::Redrive { give_up_after, .. } => {
                if row.created_at <= now.saturating_sub(give_up_after) {
                    DeadLetterDecision::GaveUp
                } else {
                    DeadLetterDecision::Redrive
                }
            }
        }
    }
}

impl fmt::Display for DeadLetterPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::duration::HumanDuration;
        match self.action {
            DeadLetterAction::Redrive { after, give_up_after } => {
                write!(f, "redrive after {} until {} old", HumanDuration(after), HumanDuration(give_up_after))
            }
            DeadLetterAction::Expire { after } => write!(f, "expire after {}", HumanDuration(after)),
        }
    }
}

/// The outcome of [`DeadLetterPolicy::decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadLetterDecision {
    /// No original topic: never touched by any policy (DLP-4).
    Untouched,
    /// Not yet `after` since dead-lettering: leave it for a later pass.
    Wait,
    /// Move it back to its original topic with a fresh handled count (DLP-3).
    Redrive,
    /// Delete it.
    Expire,
    /// Redrive was due but the message is past `give_up_after`: left in place, counted
    /// and logged by every pass (DLP-5).
    GaveUp,
}

/// A message type whose dead letters a policy governs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeadLetterType {
    /// Messages of queue `original_topic` dead-lettered into `dead_letter_queue` (QUE-2).
    /// Policy statements match both, so types may share a dead-letter queue (DLP-4).
    Queue {
        /// The queue the messages were consumed from, and are redriven to.
        original_topic: String,
        /// The queue holding their dead letters.
        dead_letter_queue: String,
    },
    /// Unordered rows of the outbox's dead table sent to `destination` of `transport`
    /// (DSP-5); redriven back into the outbox. Lane rows are left to operators: a redrive
    /// would place them behind later rows of their lane (LAN-5).
    Outbox {
        /// The transport name.
        transport: String,
        /// The destination.
        destination: String,
    },
}

impl fmt::Display for DeadLetterType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadLetterType::Queue { original_topic, dead_letter_queue } => {
                write!(f, "queue {original_topic:?} (dead letters in {dead_letter_queue:?})")
            }
            DeadLetterType::Outbox { transport, destination } => {
                write!(f, "outbox {transport:?} → {destination:?}")
            }
        }
    }
}

/// One message type and its policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeadLetterRule {
    message_type: DeadLetterType,
    policy: DeadLetterPolicy,
}

impl DeadLetterRule {
    /// `policy` for messages of queue `original_topic`, dead-lettered into
    /// `dead_letter_queue`.
    pub fn queue(
        original_topic: impl Into<String>,
        dead_letter_queue: impl Into<String>,
        policy: DeadLetterPolicy,
    ) -> Self {
        let message_type = DeadLetterType::Queue {
            original_topic: original_topic.into(),
            dead_letter_queue: dead_letter_queue.into(),
        };
        DeadLetterRule { message_type, policy }
    }

    /// `policy` for the outbox's dead rows of `transport` and `destination`.
    pub fn outbox(
        transport: impl Into<String>,
        destination: impl Into<String>,
        policy: DeadLetterPolicy,
    ) -> Self {
        let message_type =
            DeadLetterType::Outbox { transport: transport.into(), destination: destination.into() };
        DeadLetterRule { message_type, policy }
    }

    /// The message type.
    pub fn message_type(&self) -> &DeadLetterType {
        &self.message_type
    }

    /// Its policy.
    pub fn policy(&self) -> DeadLetterPolicy {
        self.policy
    }
}

impl fmt::Display for DeadLetterRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message_type, self.policy)
    }
}

/// The queues of one consumer subscription, as DLP-6 sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionQueues {
    /// The queue the subscription consumes.
    pub queue: String,
    /// Where it dead-letters, if anywhere.
    pub dead_letter_queue: Option<String>,
    /// Where it puts messages it cannot decode, if anywhere. Never touched by a policy.
    pub invalid_message_queue: Option<String>,
}

impl SubscriptionQueues {
    /// A subscription of `queue` dead-lettering into `dead_letter_queue`.
    pub fn new(queue: impl Into<String>, dead_letter_queue: Option<&str>) -> Self {
        SubscriptionQueues {
            queue: queue.into(),
            dead_letter_queue: dead_letter_queue.map(str::to_owned),
            invalid_message_queue: None,
        }
    }

    /// With an invalid-message queue.
    pub fn with_invalid_message_queue(mut self, queue: impl Into<String>) -> Self {
        self.invalid_message_queue = Some(queue.into());
        self
    }
}

/// Why a set of policies was refused, at construction or at start (DLP-1, DLP-4, DLP-6).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterSetupError {
    /// A name of the type is empty.
    #[error("dead-letter policy for {message_type}: {field} must not be empty")]
    EmptyName {
        /// The type.
        message_type: DeadLetterType,
        /// The empty field, e.g. `original_topic`.
        field: &'static str,
    },
    /// A queue type's dead-letter queue is its own topic: a redrive would be a no-op loop.
    #[error(
        "dead-letter policy for {message_type}: the dead-letter queue must differ from the original topic"
    )]
    OwnDeadLetterQueue {
        /// The type.
        message_type: DeadLetterType,
    },
    /// Two policies for one type (DLP-1: at most one each).
    #[error("dead-letter policies: {message_type} has two policies; a message type may have one")]
    DuplicateType {
        /// The type.
        message_type: DeadLetterType,
    },
    /// No subscription consumes the type's topic with a dead-letter queue (DLP-6).
    #[error(
        "dead-letter policy for {message_type}: no subscription of queue {original_topic:?} has a dead-letter queue; \
         a type with a policy needs exactly one"
    )]
    NoSubscription {
        /// The type.
        message_type: DeadLetterType,
        /// Its topic.
        original_topic: String,
    },
    /// Several subscriptions of the type's topic have a dead-letter queue (DLP-6).
    #[error(
        "dead-letter policy for {message_type}: {count} subscriptions of queue {original_topic:?} have a \
         dead-letter queue; a type with a policy needs exactly one"
    )]
    SeveralSubscriptions {
        /// The type.
        message_type: DeadLetterType,
        /// Its topic.
        original_topic: String,
        /// How many.
        count: usize,
    },
    /// The subscription dead-letters somewhere else than the policy says.
    #[error(
        "dead-letter policy for {message_type}: the subscription of queue {original_topic:?} dead-letters \
         into {subscription_queue:?}, not the policy's queue"
    )]
    OtherDeadLetterQueue {
        /// The type.
        message_type: DeadLetterType,
        /// Its topic.
        original_topic: String,
        /// Where the subscription dead-letters.
        subscription_queue: String,
    },
    /// The policy's dead-letter queue is a subscription's invalid-message queue (DLP-4).
    #[error(
        "dead-letter policy for {message_type}: {queue:?} is the invalid-message queue of the subscription \
         of {subscription:?}, which no policy may touch"
    )]
    InvalidMessageQueue {
        /// The type.
        message_type: DeadLetterType,
        /// The queue.
        queue: String,
        /// The subscription's queue.
        subscription: String,
    },
}

/// A validated set of dead-letter policies: one per message type (DLP-1), names present,
/// no queue type dead-lettering into its own topic. The policy worker runs one pass per set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterPolicies {
    rules: Vec<DeadLetterRule>,
}

impl DeadLetterPolicies {
    /// Validates `rules` into a set; refuses the first problem, naming the type.
    pub fn new(rules: impl IntoIterator<Item = DeadLetterRule>) -> Result<Self, DeadLetterSetupError> {
        let rules: Vec<DeadLetterRule> = rules.into_iter().collect();
        let mut seen = BTreeSet::new();
        for rule in &rules {
            let message_type = &rule.message_type;
            let empty = |field| DeadLetterSetupError::EmptyName { message_type: message_type.clone(), field };
            match message_type {
                DeadLetterType::Queue { original_topic, dead_letter_queue } => {
                    if original_topic.is_empty() {
                        return Err(empty("original_topic"));
                    }
                    if dead_letter_queue.is_empty() {
                        return Err(empty("dead_letter_queue"));
                    }
                    if original_topic == dead_letter_queue {
                        return Err(DeadLetterSetupError::OwnDeadLetterQueue {
                            message_type: message_type.clone(),
                        });
                    }
                }
                DeadLetterType::Outbox { transport, destination } => {
                    if transport.is_empty() {
                        return Err(empty("transport"));
                    }
                    if destination.is_empty() {
                        return Err(empty("destination"));
                    }
                }
            }
            // Two policies of one topic are two types only if their dead-letter queues
            // differ; the subscription check then refuses all but one of them.
            if !seen.insert(message_type.clone()) {
                return Err(DeadLetterSetupError::DuplicateType { message_type: message_type.clone() });
            }
        }
        Ok(DeadLetterPolicies { rules })
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> &[DeadLetterRule] {
        &self.rules
    }

    /// Whether the set has no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// A stable fingerprint of the set (OPT-4): the SHA-1, in hex, of its rules as
    /// displayed, in order. Replicas applying different policies to one namespace differ.
    pub fn fingerprint(&self) -> String {
        use sha1::{Digest, Sha1};
        Sha1::digest(self.to_string().as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// DLP-6, checked at start: every queue type with a policy has exactly one subscription
    /// of its topic with a dead-letter queue, and that queue is the policy's; no policy's
    /// dead-letter queue is a subscription's invalid-message queue (DLP-4). Outbox types
    /// need no subscription.
    pub fn check_subscriptions(
        &self,
        subscriptions: &[SubscriptionQueues],
    ) -> Result<(), DeadLetterSetupError> {
        for rule in &self.rules {
            let DeadLetterType::Queue { original_topic, dead_letter_queue } = &rule.message_type else {
                continue;
            };
            let message_type = rule.message_type.clone();
            if let Some(subscription) = subscriptions
                .iter()
                .find(|s| s.invalid_message_queue.as_deref() == Some(dead_letter_queue.as_str()))
            {
                return Err(DeadLetterSetupError::InvalidMessageQueue {
                    message_type,
                    queue: dead_letter_queue.clone(),
                    subscription: subscription.queue.clone(),
                });
            }
            let mut dead_lettering = subscriptions
                .iter()
                .filter(|s| &s.queue == original_topic)
                .filter_map(|s| s.dead_letter_queue.as_deref());
            let original_topic = original_topic.clone();
            match (dead_lettering.next(), dead_lettering.count()) {
                (None, _) => {
                    return Err(DeadLetterSetupError::NoSubscription { message_type, original_topic });
                }
                (Some(queue), 0) if queue == dead_letter_queue => {}
                (Some(queue), 0) => {
                    return Err(DeadLetterSetupError::OtherDeadLetterQueue {
                        message_type,
                        original_topic,
                        subscription_queue: queue.to_owned(),
                    });
                }
                (Some(_), others) => {
                    return Err(DeadLetterSetupError::SeveralSubscriptions {
                        message_type,
                        original_topic,
                        count: others + 1,
                    });
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for DeadLetterPolicies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, rule) in self.rules.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{rule}")?;
        }
        Ok(())
    }
}

/// A cycle among `subscriptions`' dead-letter and invalid-message queues (QUE-2): each
/// queue in order, the first repeated at the end (`["a", "b", "a"]`), or `None`.
///
/// A message dead-lettered from `a` into `b`, whose own subscription dead-letters into
/// `a`, would move between the two forever, its handled count reset each time. The host
/// refuses such a setup at start (OPT-5). Edges go from a subscription's queue to its
/// dead-letter queue and to its invalid-message queue; a queue without a subscription here
/// ends a path.
///
/// ```
/// use relayer_core::dead_letter::{SubscriptionQueues, dead_letter_cycle};
///
/// let a = SubscriptionQueues::new("a", Some("b"));
/// let b = SubscriptionQueues::new("b", Some("a"));
/// assert_eq!(dead_letter_cycle(&[a.clone(), b]), Some(vec!["a".into(), "b".into(), "a".into()]));
/// assert_eq!(dead_letter_cycle(&[a, SubscriptionQueues::new("b", Some("dead"))]), None);
/// ```
pub fn dead_letter_cycle(subscriptions: &[SubscriptionQueues]) -> Option<Vec<String>> {
    use std::collections::BTreeMap;
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for subscription in subscriptions {
        let targets = next.entry(subscription.queue.as_str()).or_default();
        targets.extend(subscription.dead_letter_queue.as_deref());
        targets.extend(subscription.invalid_message_queue.as_deref());
    }
    // Depth-first, iteratively: `path` is the current chain, `done` the queues whose every
    // path was followed without meeting a cycle.
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for start in next.keys().copied() {
        if done.contains(start) {
            continue;
        }
        let mut path: Vec<(&str, usize)> = vec![(start, 0)];
        while let Some(&(queue, edge)) = path.last() {
            let targets = next.get(queue).map_or(&[][..], Vec::as_slice);
            let Some(target) = targets.get(edge).copied() else {
                done.insert(queue);
                path.pop();
                continue;
            };
            if let Some(last) = path.last_mut() {
                last.1 += 1;
            }
            if let Some(at) = path.iter().position(|(on_path, _)| *on_path == target) {
                let mut cycle: Vec<String> = path[at..].iter().map(|(q, _)| (*q).to_owned()).collect();
                cycle.push(target.to_owned());
                return Some(cycle);
            }
            if !done.contains(target) {
                path.push((target, 0));
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use crate::test_clock::{at, secs};

    #[test]
    fn dead_letter_policies_are_validated_dlp_2() {
        let error = DeadLetterPolicy::redrive(secs(3_600), secs(3_600)).unwrap_err();
        assert_eq!(error.to_string(), "give_up_after: 1h must be greater than after (1h)");
        assert_eq!(error.field(), "give_up_after");
        DeadLetterPolicy::redrive(Duration::ZERO, Duration::from_nanos(1)).unwrap();
        assert_eq!(DeadLetterPolicy::expire(Duration::ZERO).after(), Duration::ZERO);
        assert_eq!(
            DeadLetterPolicy::redrive(secs(60), secs(3_600)).unwrap().to_string(),
            "redrive after 1m until 1h old"
        );
    }

    #[test]
    fn dead_letter_decisions_follow_dlp_2_and_dlp_5() {
        use DeadLetterDecision::*;
        let redrive = DeadLetterPolicy::redrive(secs(60), secs(600)).unwrap();
        let expire = DeadLetterPolicy::expire(secs(60));
        let row = |created: i64, dead: i64| DeadLetterRow {
            original_topic: Some("orders".into()),
            dead_lettered_at: at(dead),
            created_at: at(created),
            rejection_reason: None,
        };
        // (created_at, dead_lettered_at, now) → (redrive, expire)
        let table = [
            ((0, 100, 159), (Wait, Wait)),
            ((0, 100, 160), (Redrive, Expire)),
            ((0, 100, 599), (Redrive, Expire)),
            ((0, 100, 600), (GaveUp, Expire)),
            ((0, 590, 620), (Wait, Wait)),
            ((0, 590, 650), (GaveUp, Expire)),
            ((0, 100, 10_000), (GaveUp, Expire)),
        ];
        for ((created, dead, now), (on_redrive, on_expire)) in table {
            let row = row(created, dead);
            assert_eq!(redrive.decide(&row, at(now)), on_redrive, "redrive {created} {dead} {now}");
            assert_eq!(expire.decide(&row, at(now)), on_expire, "expire {created} {dead} {now}");
        }
        let foreign = DeadLetterRow { original_topic: None, ..row(0, 0) };
        assert_eq!(redrive.decide(&foreign, Timestamp::MAX), Untouched);
        assert_eq!(expire.decide(&foreign, Timestamp::MAX), Untouched);
        let undecodable = DeadLetterRow { rejection_reason: Some(UNACCEPTABLE.into()), ..row(0, 100) };
        assert_eq!(redrive.decide(&undecodable, at(160)), Untouched, "redriving it would fail again");
        assert_eq!(expire.decide(&undecodable, at(160)), Expire);
    }

    fn expire() -> DeadLetterPolicy {
        DeadLetterPolicy::expire(secs(60))
    }

    #[test]
    fn a_set_refuses_duplicates_empty_names_and_self_dead_lettering_dlp_1() {
        let cases = [
            (
                vec![
                    DeadLetterRule::queue("orders", "dead", expire()),
                    DeadLetterRule::queue("orders", "dead", expire()),
                ],
                "dead-letter policies: queue \"orders\" (dead letters in \"dead\") has two policies; a message type may have one",
            ),
            (
                vec![DeadLetterRule::queue("", "dead", expire())],
                "dead-letter policy for queue \"\" (dead letters in \"dead\"): original_topic must not be empty",
            ),
            (
                vec![DeadLetterRule::outbox("queue", "", expire())],
                "dead-letter policy for outbox \"queue\" → \"\": destination must not be empty",
            ),
            (
                vec![DeadLetterRule::queue("orders", "orders", expire())],
                "dead-letter policy for queue \"orders\" (dead letters in \"orders\"): the dead-letter queue must differ from the original topic",
            ),
        ];
        for (rules, expected) in cases {
            assert_eq!(DeadLetterPolicies::new(rules).unwrap_err().to_string(), expected);
        }
        let one = DeadLetterPolicies::new([DeadLetterRule::queue("orders", "dead", expire())]).unwrap();
        let other = DeadLetterPolicies::new([DeadLetterRule::queue(
            "orders",
            "dead",
            DeadLetterPolicy::expire(secs(61)),
        )]);
        assert_eq!(one.fingerprint().len(), 40);
        assert_ne!(
            one.fingerprint(),
            other.unwrap().fingerprint(),
            "OPT-4: a changed window is a disagreement"
        );
        let shared = DeadLetterPolicies::new([
            DeadLetterRule::queue("orders", "dead", expire()),
            DeadLetterRule::queue("invoices", "dead", expire()),
            DeadLetterRule::outbox("queue", "orders", expire()),
        ])
        .unwrap();
        assert_eq!(shared.rules().len(), 3, "two types may share one dead-letter queue (DLP-4)");
    }

    #[test]
    fn each_policy_needs_exactly_one_subscription_with_its_dead_letter_queue_dlp_6() {
        let policies = DeadLetterPolicies::new([
            DeadLetterRule::queue("orders", "dead", expire()),
            DeadLetterRule::outbox("nats", "orders", expire()),
        ])
        .unwrap();
        let ok = [SubscriptionQueues::new("orders", Some("dead")), SubscriptionQueues::new("orders", None)];
        policies.check_subscriptions(&ok).unwrap();

        let none = policies.check_subscriptions(&[SubscriptionQueues::new("orders", None)]).unwrap_err();
        assert!(matches!(none, DeadLetterSetupError::NoSubscription { .. }), "{none}");
        assert!(
            none.to_string().contains("no subscription of queue \"orders\" has a dead-letter queue"),
            "{none}"
        );
        let two = [
            SubscriptionQueues::new("orders", Some("dead")),
            SubscriptionQueues::new("orders", Some("dead")),
        ];
        let error = policies.check_subscriptions(&two).unwrap_err();
        assert!(matches!(error, DeadLetterSetupError::SeveralSubscriptions { count: 2, .. }), "{error}");
        let other = policies
            .check_subscriptions(&[SubscriptionQueues::new("orders", Some("elsewhere"))])
            .unwrap_err();
        assert!(matches!(other, DeadLetterSetupError::OtherDeadLetterQueue { .. }), "{other}");
        let invalid = [
            SubscriptionQueues::new("orders", Some("dead")),
            SubscriptionQueues::new("billing", Some("billing.dead")).with_invalid_message_queue("dead"),
        ];
        let error = policies.check_subscriptions(&invalid).unwrap_err();
        assert!(matches!(error, DeadLetterSetupError::InvalidMessageQueue { .. }), "{error}");
    }
}
