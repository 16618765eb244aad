//! Start-time checks of the dead-letter policies (DLP-6, OPT-5): pure, so the host calls
//! them before it starts anything.

use relayer_core::{DeadLetterPolicies, DeadLetterType, SubscriptionQueues};

use crate::error::StartError;

/// Checks `policies` against the host's consumer `subscriptions` (their queues, dead-letter
/// and invalid-message queues) and the names of its `transports`.
///
/// With subscriptions, every queue type with a policy needs exactly one subscription of its
/// topic dead-lettering into the policy's queue (DLP-6). A host without any subscription
/// runs the policies for consumers in other processes (a sidecar): there is nothing to
/// check them against. An outbox type must name a transport the host knows, when it knows
/// any, or its redriven rows could never be sent (OPT-5).
pub(crate) fn check_dead_letter_setup(
    policies: &DeadLetterPolicies,
    subscriptions: &[SubscriptionQueues],
    transports: &[&str],
) -> Result<(), StartError> {
    if !subscriptions.is_empty() {
        policies.check_subscriptions(subscriptions).map_err(StartError::DeadLetters)?;
    }
    if !transports.is_empty() {
        for rule in policies.rules() {
            if let DeadLetterType::Outbox { transport, .. } = rule.message_type()
                && !transports.contains(&transport.as_str())
            {
                return Err(StartError::DeadLetterTransport { transport: transport.clone() });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use relayer_core::{DeadLetterPolicy, DeadLetterRule};

    use super::*;

    fn policies() -> DeadLetterPolicies {
        let expire = DeadLetterPolicy::expire(Duration::from_secs(60));
        DeadLetterPolicies::new([
            DeadLetterRule::queue("orders", "orders.dead", expire),
            DeadLetterRule::outbox("queue", "billing", expire),
        ])
        .unwrap()
    }

    #[test]
    fn policies_are_checked_against_the_subscriptions_dlp_6() {
        let transports = [];
        // No consumer in this host: the policies serve other processes.
        check_dead_letter_setup(&policies(), &[], &transports).unwrap();
        let fitting = [SubscriptionQueues::new("orders", Some("orders.dead"))];
        check_dead_letter_setup(&policies(), &fitting, &transports).unwrap();
        let without_dlq =
            [SubscriptionQueues::new("orders", None), SubscriptionQueues::new("invoices", Some("d"))];
        let error = check_dead_letter_setup(&policies(), &without_dlq, &transports).unwrap_err();
        assert!(matches!(error, StartError::DeadLetters(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "relayer setup: dead-letter policy for queue \"orders\" (dead letters in \"orders.dead\"): no \
             subscription of queue \"orders\" has a dead-letter queue; a type with a policy needs exactly one"
        );
    }

    #[test]
    fn an_outbox_policy_needs_a_known_transport_opt_5() {
        // A host without transports runs the policies for dispatchers in other processes.
        check_dead_letter_setup(&policies(), &[], &[]).unwrap();
        check_dead_letter_setup(&policies(), &[], &["nats", "queue"]).unwrap();
        let transports = ["nats"];
        let error = check_dead_letter_setup(&policies(), &[], &transports).unwrap_err();
        assert_eq!(
            error.to_string(),
            "relayer setup: a dead-letter policy redrives into transport \"queue\", which this host does not register"
        );
    }
}
