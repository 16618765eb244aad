//! A subscription: which queue a pump serves, where its failures go, and its options.

use relayer_core::ConsumerOptions;

/// The suffix of the dead-letter queue a subscription gets unless it names one.
pub const DEAD_LETTER_SUFFIX: &str = ".dead_letters";

/// One queue and how to consume it (QUE-1, QUE-2).
///
/// Every subscription has a dead-letter queue — `{queue}.dead_letters` unless set — so a
/// rejected message is never lost. Undecodable rows go to the invalid-message queue when
/// one is set, else to the dead-letter queue as `unacceptable`.
///
/// ```
/// use relayer_consumer::Subscription;
/// use relayer_core::ConsumerOptions;
///
/// let orders = Subscription::new("orders", ConsumerOptions::default())
///     .unwrap()
///     .with_dead_letter_queue("dead")
///     .unwrap();
/// assert_eq!(orders.dead_letter_queue(), "dead");
/// assert_eq!(orders.inbox_consumer(), "orders");
/// assert!(Subscription::new("", ConsumerOptions::default()).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    queue: String,
    dead_letter_queue: String,
    invalid_message_queue: Option<String>,
    inbox_consumer: String,
    options: ConsumerOptions,
}

/// A subscription refused at construction: the field and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("subscription {field}: {value:?} {problem}")]
pub struct SubscriptionError {
    field: &'static str,
    value: String,
    problem: &'static str,
}

impl Subscription {
    /// A subscription of `queue`, dead-lettering into `{queue}.dead_letters`, its inbox
    /// consumer named after the queue.
    pub fn new(queue: impl Into<String>, options: ConsumerOptions) -> Result<Self, SubscriptionError> {
        let queue = check_name("queue", queue.into())?;
        Ok(Subscription {
            dead_letter_queue: format!("{queue}{DEAD_LETTER_SUFFIX}"),
            invalid_message_queue: None,
            inbox_consumer: queue.clone(),
            queue,
            options,
        })
    }

    /// Dead-letters into `queue` (which several subscriptions may share, DLP-4).
    pub fn with_dead_letter_queue(mut self, queue: impl Into<String>) -> Result<Self, SubscriptionError> {
        self.dead_letter_queue = self.check_other("dead_letter_queue", queue.into())?;
        Ok(self)
    }

    /// Moves rows that cannot be decoded into `queue` instead of the dead-letter queue.
    pub fn with_invalid_message_queue(mut self, queue: impl Into<String>) -> Result<Self, SubscriptionError> {
        self.invalid_message_queue = Some(self.check_other("invalid_message_queue", queue.into())?);
        Ok(self)
    }

    /// Names this subscription's rows in the inbox (inbox-wrapped handlers only).
    pub fn with_inbox_consumer(mut self, name: impl Into<String>) -> Result<Self, SubscriptionError> {
        self.inbox_consumer = check_name("inbox_consumer", name.into())?;
        Ok(self)
    }

    /// The queue this subscription consumes.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Where rejected and exhausted messages go.
    pub fn dead_letter_queue(&self) -> &str {
        &self.dead_letter_queue
    }

    /// Where undecodable rows go, if not to the dead-letter queue.
    pub fn invalid_message_queue(&self) -> Option<&str> {
        self.invalid_message_queue.as_deref()
    }

    /// The consumer name of this subscription's inbox rows.
    pub fn inbox_consumer(&self) -> &str {
        &self.inbox_consumer
    }

    /// The pump's options.
    pub fn options(&self) -> &ConsumerOptions {
        &self.options
    }

    fn check_other(&self, field: &'static str, name: String) -> Result<String, SubscriptionError> {
        let name = check_name(field, name)?;
        if name == self.queue {
            return Err(SubscriptionError { field, value: name, problem: "is the subscribed queue itself" });
        }
        Ok(name)
    }
}

fn check_name(field: &'static str, name: String) -> Result<String, SubscriptionError> {
    let problem = if name.trim().is_empty() {
        "is empty"
    } else if name.contains('\0') {
        "contains a NUL character"
    } else {
        return Ok(name);
    };
    Err(SubscriptionError { field, value: name, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_errors_name_the_field() {
        let options = ConsumerOptions::default();
        let error = Subscription::new("a\0", options.clone()).unwrap_err();
        assert_eq!(error.to_string(), "subscription queue: \"a\\0\" contains a NUL character");
        let orders = Subscription::new("orders", options).unwrap();
        assert_eq!(orders.dead_letter_queue(), "orders.dead_letters");
        let error = orders.clone().with_dead_letter_queue("orders").unwrap_err();
        assert_eq!(
            error.to_string(),
            "subscription dead_letter_queue: \"orders\" is the subscribed queue itself"
        );
        assert!(orders.with_invalid_message_queue(" ").is_err());
    }
}
