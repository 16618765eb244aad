//! The storage crate's error: opaque, with the questions a caller actually asks
//! (is it transient? is it about the schema?) answered by methods.

use std::fmt;

use relayer_core::Namespace;

/// An error from relayer's PostgreSQL storage.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {kind}")]
pub struct StorageError {
    context: String,
    kind: StorageErrorKind,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// What kind of storage failure this is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// The database failed a statement or the connection broke.
    Database,
    /// No connection could be had from the pool in time.
    Pool,
    /// The namespace has no relayer schema.
    SchemaMissing,
    /// The namespace's schema is older than this version of relayer needs.
    SchemaOutdated {
        /// The version found.
        found: i32,
        /// The version required.
        required: i32,
    },
    /// The namespace's schema is newer than this version of relayer knows how to migrate.
    SchemaTooNew {
        /// The version found.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
    /// A row could not be decoded (e.g. malformed headers).
    MalformedRow,
}

impl fmt::Display for StorageErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageErrorKind::Database => f.write_str("database error"),
            StorageErrorKind::Pool => f.write_str("no pooled connection available"),
            StorageErrorKind::SchemaMissing => {
                f.write_str("relayer schema not found; apply it with `relayer schema apply` or `migrate`")
            }
            StorageErrorKind::SchemaOutdated { found, required } => write!(
                f,
                "schema version {found} is older than the required {required}; apply migrations first"
            ),
            StorageErrorKind::SchemaTooNew { found, known } => write!(
                f,
                "schema version {found} is newer than this build of relayer knows ({known}); upgrade relayer"
            ),
            StorageErrorKind::MalformedRow => f.write_str("malformed row"),
        }
    }
}

/// Column `index` of a row of `what`, read with `try_get`: a NULL where a value is
/// required, or a type this build does not expect (a schema changed by hand), is a
/// [`StorageErrorKind::MalformedRow`] error naming `what` and the column, never a panic.
pub(crate) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    index: usize,
    what: &str,
) -> Result<T, StorageError> {
    row.try_get(index).map_err(|e| {
        let name = row.columns().get(index).map_or("?", tokio_postgres::Column::name);
        StorageError {
            context: format!("reading column {index} ({name}) of {what}"),
            kind: StorageErrorKind::MalformedRow,
            source: Some(e.into()),
        }
    })
}

/// tokio-postgres's own "timeout waiting for server" error, for a statement or startup that
/// relayer gave up on (RES-5): it carries no SQLSTATE, so it classifies as transient like any
/// lost connection. tokio-postgres offers no public constructor; its hidden one is used here
/// only, so a change to it is one edit.
pub(crate) fn timed_out() -> tokio_postgres::Error {
    tokio_postgres::Error::__private_api_timeout()
}

/// `1 message`, `2 messages`: a batch's size in an error's context.
pub(crate) fn messages(count: usize) -> String {
    match count {
        1 => "1 message".to_owned(),
        count => format!("{count} messages"),
    }
}

impl StorageError {
    pub(crate) fn new(context: impl Into<String>, kind: StorageErrorKind) -> Self {
        StorageError { context: context.into(), kind, source: None }
    }

    /// A database error while doing `context` (for adapters that run their own statements).
    pub fn database(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        StorageError {
            context: context.into(),
            kind: StorageErrorKind::Database,
            source: Some(source.into()),
        }
    }

    /// No pooled connection could be had while doing `context`: the pool timed out, or
    /// opening a connection failed (transient either way).
    pub fn pool(context: impl Into<String>, source: bb8::RunError<tokio_postgres::Error>) -> Self {
        let kind = match &source {
            // A connection the pool tried to open failed: say so with the server's reason.
            bb8::RunError::User(_) => StorageErrorKind::Pool,
            bb8::RunError::TimedOut => StorageErrorKind::Pool,
        };
        StorageError { context: context.into(), kind, source: Some(source.into()) }
    }

    pub(crate) fn schema(namespace: &Namespace, kind: StorageErrorKind) -> Self {
        StorageError::new(format!("namespace {namespace}"), kind)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> &StorageErrorKind {
        &self.kind
    }

    /// The database error underneath, if any.
    pub fn as_db_error(&self) -> Option<&tokio_postgres::error::DbError> {
        self.source
            .as_deref()
            .and_then(|e| e.downcast_ref::<tokio_postgres::Error>())
            .and_then(tokio_postgres::Error::as_db_error)
    }

    /// The SQLSTATE code, if the server reported one.
    pub fn code(&self) -> Option<&tokio_postgres::error::SqlState> {
        self.as_db_error().map(tokio_postgres::error::DbError::code)
    }

    /// Whether retrying later may succeed: a lost or refused connection, a pool timeout,
    /// a serialization failure or deadlock, a server shutting down or starting up.
    pub fn is_transient(&self) -> bool {
        self.retry() != Retry::Never
    }

    /// Whether this is a conflict with a concurrent transaction (a deadlock, a
    /// serialization failure, a lock not available) worth retrying at once, after a short
    /// pause, rather than after an outage's backoff.
    pub fn is_conflict(&self) -> bool {
        self.retry() == Retry::AtOnce
    }

    fn retry(&self) -> Retry {
        match self.kind {
            StorageErrorKind::Pool => Retry::Later,
            StorageErrorKind::Database => {
                retry_for_sqlstate(self.code().map(tokio_postgres::error::SqlState::code))
            }
            _ => Retry::Never,
        }
    }
}

/// When a failed statement may be tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A conflict with a concurrent transaction: after a short jittered pause.
    AtOnce,
    /// An outage (connection, resources, operator): after the pass backoff.
    Later,
    /// It will fail again until someone changes something.
    Never,
}

/// The retry class of a database error by its SQLSTATE (`None`: the server sent none — an
/// I/O error or a closed connection). Pure, so any code, even a malformed one, is classified
/// without panicking.
pub(crate) fn retry_for_sqlstate(code: Option<&str>) -> Retry {
    let Some(code) = code else { return Retry::Later };
    match code {
        // serialization_failure, deadlock_detected, lock_not_available (a lock_timeout).
        "40001" | "40P01" | "55P03" => Retry::AtOnce,
        // 08: connection exception; 53: insufficient resources; 57: operator intervention
        // (admin shutdown, cannot connect now, a cancelled statement).
        _ if matches!(code.get(..2), Some("08" | "53" | "57")) => Retry::Later,
        _ => Retry::Never,
    }
}

#[cfg(test)]
mod retry_tests {
    use super::{Retry, retry_for_sqlstate};

    #[test]
    fn sqlstates_are_classified_as_conflicts_outages_or_permanent() {
        let table = [
            (Some("40P01"), Retry::AtOnce), // deadlock_detected
            (Some("40001"), Retry::AtOnce), // serialization_failure
            (Some("55P03"), Retry::AtOnce), // lock_not_available
            (None, Retry::Later),           // I/O error, closed connection
            (Some("08006"), Retry::Later),  // connection_failure
            (Some("53300"), Retry::Later),  // too_many_connections
            (Some("57P01"), Retry::Later),  // admin_shutdown
            (Some("57P03"), Retry::Later),  // cannot_connect_now
            (Some("57014"), Retry::Later),  // query_canceled (statement_timeout)
            (Some("40002"), Retry::Never),  // transaction_integrity_constraint_violation
            (Some("42P01"), Retry::Never),  // undefined_table
            (Some("23505"), Retry::Never),  // unique_violation
            (Some("22P02"), Retry::Never),  // invalid_text_representation
            (Some(""), Retry::Never),
            (Some("5"), Retry::Never),
            (Some("é8"), Retry::Never),
        ];
        for (code, retry) in table {
            assert_eq!(retry_for_sqlstate(code), retry, "{code:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_code_is_classified_without_panicking_and_conflicts_are_exactly_three(code in ".{0,6}") {
            let retry = retry_for_sqlstate(Some(&code));
            proptest::prop_assert_eq!(retry == Retry::AtOnce, ["40001", "40P01", "55P03"].contains(&code.as_str()));
        }
    }
}

#[cfg(test)]
mod sqlstate_tests {
    use super::{Retry, retry_for_sqlstate};

    /// SPEC §15: a malformed SQLSTATE (empty, one character, a multi-byte character where
    /// the class ends) is classified, never sliced into a panic.
    #[test]
    fn malformed_sqlstates_are_classified_without_panicking_spec_15() {
        for code in ["", "0", "é", "0é", "\u{fffd}8006"] {
            assert_eq!(retry_for_sqlstate(Some(code)), Retry::Never, "{code:?}");
        }
        assert_eq!(retry_for_sqlstate(Some("08006")), Retry::Later);
        assert_eq!(retry_for_sqlstate(Some("57P01")), Retry::Later);
        assert_eq!(retry_for_sqlstate(Some("40P01")), Retry::AtOnce);
        assert_eq!(retry_for_sqlstate(Some("23505")), Retry::Never);
    }
}

#[cfg(test)]
mod messages_tests {
    #[test]
    fn one_message_is_singular() {
        assert_eq!(super::messages(1), "1 message");
        assert_eq!(super::messages(0), "0 messages");
        assert_eq!(super::messages(2), "2 messages");
    }
}
