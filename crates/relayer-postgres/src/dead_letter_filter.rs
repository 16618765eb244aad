//! The filters of the dead-letter API (DLP-7): which queue dead letters or outbox dead rows
//! a listing or an action selects, rendered as a `WHERE` clause whose values are all bind
//! parameters.

use std::fmt::{self, Write as _};
use std::time::Duration;

use relayer_core::MessageId;
use relayer_core::time::database_micros;
use tokio_postgres::types::{ToSql, Type};

/// Rows a listing or an action takes unless told otherwise.
pub const DEFAULT_LIMIT: u32 = 100;

/// What both filters share: age, message id, keyset position and limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Common {
    older_than: Option<Duration>,
    message_id: Option<MessageId>,
    after_seq: Option<i64>,
    pub(crate) limit: u32,
}

impl Common {
    const fn new() -> Self {
        Common { older_than: None, message_id: None, after_seq: None, limit: DEFAULT_LIMIT }
    }

    fn selects_something(&self) -> bool {
        self.older_than.is_some() || self.message_id.is_some()
    }

    /// Adds the shared criteria to `clauses`; ages count from `aged_column`.
    fn render(&self, clauses: &mut Where, aged_column: &str) {
        if let Some(age) = self.older_than {
            let at = clauses.bind(database_micros(age), Type::INT8);
            clauses.and(format!("{aged_column} <= now() - {at}::int8 * interval '1 microsecond'"));
        }
        if let Some(id) = self.message_id {
            clauses.equal("message_id", *id.as_uuid(), Type::UUID);
        }
        if let Some(seq) = self.after_seq {
            let at = clauses.bind(seq, Type::INT8);
            clauses.and(format!("seq > {at}"));
        }
    }

    /// Writes the shared criteria after `text`, the filter's own ones.
    fn fmt(&self, mut text: String, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(&mut text, "older_than", self.older_than.map(relayer_core::HumanDuration).as_ref());
        describe(&mut text, "message_id", self.message_id.as_ref());
        describe(&mut text, "after_seq", self.after_seq.as_ref());
        write!(f, "{text}limit={}", self.limit)
    }
}

/// The setters of [`Common`]'s criteria, on a filter with a `common` field.
macro_rules! common_criteria {
    ($what:literal, $aged:literal) => {
        /// One message, by id.
        pub fn message(message_id: MessageId) -> Self {
            Self::new().message_id(message_id)
        }

        #[doc = concat!($aged, " at least `age` ago (database clock).")]
        pub fn older_than(mut self, age: Duration) -> Self {
            self.common.older_than = Some(age);
            self
        }

        /// With message id `message_id`.
        pub fn message_id(mut self, message_id: MessageId) -> Self {
            self.common.message_id = Some(message_id);
            self
        }

        #[doc = concat!("Only ", $what, " after `seq` (keyset paging: the last `seq` of the previous page).")]
        pub fn after_seq(mut self, seq: i64) -> Self {
            self.common.after_seq = Some(seq);
            self
        }

        #[doc = concat!("At most `limit` ", $what, " (1..=10000).")]
        pub fn limit(mut self, limit: u32) -> Self {
            self.common.limit = limit;
            self
        }
    };
}

/// Selects queue dead letters; criteria combine with AND.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueDeadLetterFilter {
    queue: Option<String>,
    original_topic: Option<String>,
    reason: Option<String>,
    pub(crate) common: Common,
}

impl Default for Common {
    fn default() -> Self {
        Common::new()
    }
}

impl QueueDeadLetterFilter {
    /// Every dead letter, [`DEFAULT_LIMIT`] at a time.
    pub fn new() -> Self {
        QueueDeadLetterFilter::default()
    }

    common_criteria!("dead letters", "Dead-lettered");

    /// Held in dead-letter queue `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Dead-lettered from `topic`.
    pub fn original_topic(mut self, topic: impl Into<String>) -> Self {
        self.original_topic = Some(topic.into());
        self
    }

    /// With rejection reason `reason`.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    pub(crate) fn selects_something(&self) -> bool {
        self.queue.is_some()
            || self.original_topic.is_some()
            || self.reason.is_some()
            || self.common.selects_something()
    }

    /// The filter's `WHERE`, starting with `base`.
    pub(crate) fn render(&self, base: &str) -> Where {
        let mut clauses = Where::new(base);
        for (column, value) in [
            ("queue", &self.queue),
            ("original_topic", &self.original_topic),
            ("rejection_reason", &self.reason),
        ] {
            if let Some(value) = value {
                clauses.equal(column, value.clone(), Type::TEXT);
            }
        }
        self.common.render(&mut clauses, "dead_lettered_at");
        clauses
    }
}

impl fmt::Display for QueueDeadLetterFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        describe(&mut text, "queue", self.queue.as_ref());
        describe(&mut text, "original_topic", self.original_topic.as_ref());
        describe(&mut text, "reason", self.reason.as_ref());
        self.common.fmt(text, f)
    }
}

/// Selects rows of the outbox's dead table; criteria combine with AND.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutboxDeadFilter {
    transport: Option<String>,
    destination: Option<String>,
    lane: Option<String>,
    pub(crate) common: Common,
}

impl OutboxDeadFilter {
    /// Every dead row, [`DEFAULT_LIMIT`] at a time.
    pub fn new() -> Self {
        OutboxDeadFilter::default()
    }

    common_criteria!("dead rows", "Failed");

    /// For transport `transport`.
    pub fn transport(mut self, transport: impl Into<String>) -> Self {
        self.transport = Some(transport.into());
        self
    }

    /// For destination `destination`.
    pub fn destination(mut self, destination: impl Into<String>) -> Self {
        self.destination = Some(destination.into());
        self
    }

    /// Of lane `lane`.
    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    pub(crate) fn selects_something(&self) -> bool {
        self.transport.is_some()
            || self.destination.is_some()
            || self.lane.is_some()
            || self.common.selects_something()
    }

    pub(crate) fn render(&self) -> Where {
        let mut clauses = Where::new("true");
        for (column, value) in
            [("transport", &self.transport), ("destination", &self.destination), ("lane", &self.lane)]
        {
            if let Some(value) = value {
                clauses.equal(column, value.clone(), Type::TEXT);
            }
        }
        self.common.render(&mut clauses, "failed_at");
        clauses
    }
}

impl fmt::Display for OutboxDeadFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        describe(&mut text, "transport", self.transport.as_ref());
        describe(&mut text, "destination", self.destination.as_ref());
        describe(&mut text, "lane", self.lane.as_ref());
        self.common.fmt(text, f)
    }
}

fn describe(text: &mut String, name: &str, value: Option<&impl fmt::Display>) {
    if let Some(value) = value {
        let _ = write!(text, "{name}={value} ");
    }
}

/// A `WHERE` clause under construction and its bound values ($1, $2, … in order).
pub(crate) struct Where {
    clauses: Vec<String>,
    values: Vec<(Box<dyn ToSql + Sync + Send>, Type)>,
}

impl Where {
    fn new(base: &str) -> Self {
        Where { clauses: vec![base.to_owned()], values: Vec::new() }
    }

    /// Binds `value` and returns its placeholder.
    pub(crate) fn bind(&mut self, value: impl ToSql + Sync + Send + 'static, ty: Type) -> String {
        self.values.push((Box::new(value), ty));
        format!("${}", self.values.len())
    }

    pub(crate) fn and(&mut self, clause: String) {
        self.clauses.push(clause);
    }

    pub(crate) fn equal(&mut self, column: &str, value: impl ToSql + Sync + Send + 'static, ty: Type) {
        let at = self.bind(value, ty);
        self.and(format!("{column} = {at}"));
    }

    pub(crate) fn sql(&self) -> String {
        self.clauses.join(" AND ")
    }

    pub(crate) fn params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.values.iter().map(|(value, ty)| (&**value as &(dyn ToSql + Sync), ty.clone())).collect()
    }
}
