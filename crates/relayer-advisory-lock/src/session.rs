//! A dedicated lock session: one PostgreSQL connection that holds at most one advisory lock.
//!
//! A session is opened from the lock's `Config`, probed once to prove that session state
//! survives between statements (it does not behind a transaction-mode pooler, LDR-6), and
//! carries the three statements the lock needs, prepared once so that acquiring and
//! releasing cost one round trip each. Dropping a session drops its `Client`; the
//! connection task then says goodbye to the server and ends, and the server frees every
//! advisory lock the session held.
//!
//! Released sessions whose unlock succeeded hold no lock and may be reused; they wait in a
//! small bounded [`IdleSessions`] list. A session in any other state is dropped, never
//! reused.
//!
//! No wait on a session is unbounded (RES-5): opening one, and each of its statements,
//! takes at most the lock's call timeout. A statement without an answer in time closes the
//! session's socket at once (a black-holed connection would otherwise hold the caller until
//! the kernel gives up) and fails; the caller then treats the lock as lost. The session
//! also asks the server to probe the connection (`tcp_keepalives_*`, `tcp_user_timeout`),
//! so a holder cut off by the network loses its lock server-side within a minute, not the
//! two hours of the kernel's defaults.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relayer_core::{LockError, LockErrorKind};
use tokio::task::AbortHandle;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, SimpleQueryMessage, Socket, Statement};

use crate::TARGET;

/// Takes the lock without waiting; the pid proves which backend answered.
const TRY_LOCK_SQL: &str = "SELECT pg_try_advisory_lock($1), pg_backend_pid()";

/// Releases the lock; `false` means this session did not hold it.
const UNLOCK_SQL: &str = "SELECT pg_advisory_unlock($1), pg_backend_pid()";

/// Whether this very backend still holds the lock. A bigint advisory key shows in `pg_locks`
/// split in two: `classid` is its high 32 bits, `objid` its low 32 bits, and `objsubid` is 1
/// (2 is used by the two-int4 form of the functions).
const HELD_SQL: &str = "SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND objsubid = 1 AND ((classid::int8 << 32) | objid::int8) = $1
    ), pg_backend_pid()";

/// The custom setting the probe writes and reads back.
const PROBE_SETTING: &str = "relayer.session_probe";

/// How many released sessions are kept for reuse per lock instance.
pub(crate) const MAX_IDLE_SESSIONS: usize = 4;

/// One open lock session.
pub(crate) struct Session {
    client: Client,
    /// Ends the connection's task, closing its socket, when a statement got no answer.
    connection: AbortHandle,
    /// The longest one statement waits for its answer.
    bound: Duration,
    pid: i32,
    try_lock: Statement,
    unlock: Statement,
    held: Statement,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("pid", &self.pid).field("closed", &self.client.is_closed()).finish()
    }
}

/// The outcome of one statement on a session, before it is turned into a `LockError`.
#[derive(Debug)]
pub(crate) enum SessionError {
    /// The statement failed or the connection is gone.
    Database(tokio_postgres::Error),
    /// The statement answered from another backend than the one the session was opened on.
    WrongBackend { expected: i32, actual: i32 },
    /// No answer came within the call timeout; the session's socket was closed (RES-5).
    Unanswered(Duration),
}

impl SessionError {
    /// Whether the connection had already closed (the server ended it, or it broke).
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self, SessionError::Database(e) if e.is_closed())
    }

    /// The `LockError` for `resource`; `Database` errors get `database_kind`.
    pub(crate) fn into_lock_error(self, resource: &str, database_kind: LockErrorKind) -> LockError {
        match self {
            SessionError::Database(e) => LockError::new(resource, database_kind).with_source(e),
            SessionError::WrongBackend { expected, actual } => {
                LockError::new(resource, LockErrorKind::Unsupported).with_source(pooler_message(&format!(
                    "the statement ran on backend pid {actual}, the session was opened on pid {expected}"
                )))
            }
            SessionError::Unanswered(bound) => {
                LockError::new(resource, database_kind).with_source(unanswered(bound))
            }
        }
    }
}

/// Why a lock session gave up on a statement.
pub(crate) fn unanswered(bound: Duration) -> String {
    format!(
        "no answer from PostgreSQL within {bound:?} (a silent network or a stuck server): the lock \
         session was closed"
    )
}

/// The server-side settings that make PostgreSQL probe a lock session's connection and drop
/// it when the network goes silent, from the client's own keepalive settings (RES-5).
/// `tcp_user_timeout` exists from PostgreSQL 12 on, and is only set there.
fn server_probe_sql(config: &Config) -> String {
    let idle = config.get_keepalives_idle().as_secs().max(1);
    let interval = config.get_keepalives_interval().map_or(5, |d| d.as_secs().max(1));
    let count = config.get_keepalives_retries().unwrap_or(3).max(1);
    let user_timeout = config.get_tcp_user_timeout().map_or(20_000, Duration::as_millis);
    format!(
        "SELECT set_config('tcp_keepalives_idle', '{idle}', false), \
                set_config('tcp_keepalives_interval', '{interval}', false), \
                set_config('tcp_keepalives_count', '{count}', false); \
         SELECT set_config('tcp_user_timeout', '{user_timeout}', false) \
         WHERE current_setting('server_version_num')::int >= 120000"
    )
}

impl Session {
    /// Opens, probes and prepares a new session, all within `bound` (RES-5).
    pub(crate) async fn open<T>(
        config: &Config,
        tls: T,
        resource: &str,
        bound: Duration,
    ) -> Result<Session, LockError>
    where
        T: MakeTlsConnect<Socket> + Clone,
        T::Stream: Send + 'static,
    {
        let timed_out = || LockError::new(resource, LockErrorKind::Database).with_source(unanswered(bound));
        let db = |e: tokio_postgres::Error| LockError::new(resource, LockErrorKind::Database).with_source(e);
        let (client, connection) = tokio::time::timeout(bound, config.connect(tls.clone()))
            .await
            .map_err(|_| timed_out())?
            .map_err(db)?;
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(target: TARGET, error = %e, "lock session connection ended with an error");
            }
        })
        .abort_handle();
        match tokio::time::timeout(bound, Session::start(config, tls, resource, client)).await {
            Ok(Ok((client, pid, [try_lock, unlock, held]))) => {
                tracing::debug!(target: TARGET, pid, "lock session opened");
                Ok(Session { client, connection, bound, pid, try_lock, unlock, held })
            }
            // The client is gone with `start`: the connection says goodbye and ends.
            Ok(Err(error)) => Err(error),
            Err(_) => {
                connection.abort();
                Err(timed_out())
            }
        }
    }

    /// Probes a freshly opened session, asks the server to probe its connection, and
    /// prepares the lock's statements; the pid of its backend, with the statements.
    async fn start<T>(
        config: &Config,
        tls: T,
        resource: &str,
        client: Client,
    ) -> Result<(Client, i32, [Statement; 3]), LockError>
    where
        T: MakeTlsConnect<Socket> + Clone,
        T::Stream: Send + 'static,
    {
        let db = |e: tokio_postgres::Error| LockError::new(resource, LockErrorKind::Database).with_source(e);

        // The probe uses the simple query protocol: a transaction-mode pooler may also refuse
        // named prepared statements, and we want to name the pooler, not that symptom.
        let nonce = probe_nonce();
        let first = client
            .simple_query(&format!(
                "SELECT set_config('{PROBE_SETTING}', '{nonce}', false), pg_backend_pid()"
            ))
            .await
            .map_err(db)?;
        let second = client
            .simple_query(&format!("SELECT current_setting('{PROBE_SETTING}', true), pg_backend_pid()"))
            .await
            .map_err(db)?;
        let pid = probe_verdict(&nonce, first_row(&first), first_row(&second))
            .map_err(|why| LockError::new(resource, LockErrorKind::Unsupported).with_source(why))?;
        // A quiet transaction-mode pooler passes that probe: it hands each statement of this
        // connection to the same idle server, whose settings it does not reset. It then hands
        // a second connection that same server, where a real session (direct, or through a
        // session-mode pooler) keeps its backend to itself.
        let witness = other_connection_pid(config, tls).await.map_err(db)?;
        if witness == Some(pid) {
            return Err(LockError::new(resource, LockErrorKind::Unsupported).with_source(pooler_message(
                &format!("a second connection was served by this session's backend (pid {pid})"),
            )));
        }

        client.simple_query(&server_probe_sql(config)).await.map_err(db)?;

        let (try_lock, unlock, held) = tokio::try_join!(
            client.prepare(TRY_LOCK_SQL),
            client.prepare(UNLOCK_SQL),
            client.prepare(HELD_SQL),
        )
        .map_err(db)?;
        Ok((client, pid, [try_lock, unlock, held]))
    }

    /// The backend pid this session was opened on.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the connection has already closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// `pg_try_advisory_lock(key)`: one round trip.
    pub(crate) async fn try_lock(&self, key: i64) -> Result<bool, SessionError> {
        self.run(&self.try_lock, key).await
    }

    /// `pg_advisory_unlock(key)`: one round trip; `false` if this session did not hold it.
    pub(crate) async fn unlock(&self, key: i64) -> Result<bool, SessionError> {
        self.run(&self.unlock, key).await
    }

    /// Whether this session's backend still holds `key`, per `pg_locks`.
    pub(crate) async fn holds(&self, key: i64) -> Result<bool, SessionError> {
        self.run(&self.held, key).await
    }

    /// `call` within the call timeout; past it the socket is closed at once (RES-5).
    async fn bounded<R>(
        &self,
        call: impl Future<Output = Result<R, tokio_postgres::Error>>,
    ) -> Result<R, SessionError> {
        match tokio::time::timeout(self.bound, call).await {
            Ok(result) => result.map_err(SessionError::Database),
            Err(_) => {
                self.connection.abort();
                tracing::warn!(target: TARGET, pid = self.pid, bound = ?self.bound,
                    "no answer on the lock session within its call timeout: closed it (RES-5)");
                Err(SessionError::Unanswered(self.bound))
            }
        }
    }

    /// Runs a `(bool, pid)` statement within the call timeout and checks the pid.
    async fn run(&self, statement: &Statement, key: i64) -> Result<bool, SessionError> {
        let row = self.bounded(self.client.query_one(statement, &[&key])).await?;
        let answer: bool = row.try_get(0).map_err(SessionError::Database)?;
        let pid: i32 = row.try_get(1).map_err(SessionError::Database)?;
        if pid == self.pid {
            Ok(answer)
        } else {
            Err(SessionError::WrongBackend { expected: self.pid, actual: pid })
        }
    }
}

/// Released sessions that hold no lock, kept for the next `try_lock`.
#[derive(Debug, Default)]
pub(crate) struct IdleSessions {
    sessions: Mutex<Vec<Session>>,
}

impl IdleSessions {
    /// A session to reuse, if one is idle and still connected. Closed ones are dropped.
    pub(crate) fn take(&self) -> Option<Session> {
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(session) = sessions.pop() {
            if !session.is_closed() {
                return Some(session);
            }
        }
        None
    }

    /// Keeps `session` (which must hold no lock) unless the list is full; else it is closed.
    pub(crate) fn put(&self, session: Session) {
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if sessions.len() < MAX_IDLE_SESSIONS && !session.is_closed() {
            sessions.push(session);
        }
        // Otherwise `session` is dropped here, which closes it.
    }

    /// Closes every idle session.
    pub(crate) fn close_all(&self) {
        let drained: Vec<Session> =
            std::mem::take(&mut *self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        drop(drained);
    }
}

/// The backend pid a second, short-lived connection made with `config` is served by.
async fn other_connection_pid<T>(config: &Config, tls: T) -> Result<Option<i32>, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection) = config.connect(tls).await?;
    let driver = tokio::spawn(connection);
    // Two columns, as `first_row` reads them.
    let answer = client.simple_query("SELECT pg_backend_pid(), NULL").await;
    drop(client);
    let _ = driver.await;
    Ok(first_row(&answer?).and_then(|(pid, _)| pid?.parse().ok()))
}

/// The first data row of a simple query's answer, as text columns.
fn first_row(messages: &[SimpleQueryMessage]) -> Option<(Option<&str>, Option<&str>)> {
    messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some((row.get(0), row.get(1))),
        _ => None,
    })
}

/// Decides whether the session probe proves a real session: the setting written by the first
/// statement must be read back by the second, on the same backend. Returns the backend pid.
fn probe_verdict(
    nonce: &str,
    first: Option<(Option<&str>, Option<&str>)>,
    second: Option<(Option<&str>, Option<&str>)>,
) -> Result<i32, String> {
    let parse_pid = |pid: Option<&str>| pid.and_then(|p| p.parse::<i32>().ok());
    let (Some((_, first_pid)), Some((value, second_pid))) = (first, second) else {
        return Err("the session probe returned no row".to_owned());
    };
    let (Some(first_pid), Some(second_pid)) = (parse_pid(first_pid), parse_pid(second_pid)) else {
        return Err("the session probe returned no backend pid".to_owned());
    };
    if first_pid != second_pid {
        return Err(pooler_message(&format!(
            "two statements on one connection ran on backends {first_pid} and {second_pid}"
        )));
    }
    if value != Some(nonce) {
        return Err(pooler_message("a session setting did not survive to the next statement"));
    }
    Ok(first_pid)
}

/// The explanation given whenever session state is seen not to persist.
fn pooler_message(what: &str) -> String {
    format!(
        "{what}: session advisory locks need a real PostgreSQL session, which a transaction-mode \
         connection pooler (e.g. PgBouncer pool_mode=transaction) does not provide; connect the \
         lock directly to PostgreSQL or through a session-mode pool, or use lease leadership"
    )
}

/// A value no other probe will have written: process id, a counter and the clock.
fn probe_nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}-{n:x}-{nanos:x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_accepts_a_real_session() {
        let verdict = probe_verdict("n1", Some((Some("n1"), Some("42"))), Some((Some("n1"), Some("42"))));
        assert_eq!(verdict, Ok(42));
    }

    /// LDR-6: a pooler that moves the second statement to another backend is named and refused.
    #[test]
    fn probe_refuses_a_different_backend() {
        let verdict = probe_verdict("n1", Some((Some("n1"), Some("42"))), Some((Some("n1"), Some("43"))));
        let message = verdict.expect_err("refused");
        assert!(message.contains("transaction-mode"), "{message}");
    }

    /// LDR-6: a pooler that resets session state between statements (same backend) is refused.
    #[test]
    fn probe_refuses_a_lost_setting() {
        for lost in [None, Some(""), Some("another-nonce")] {
            let verdict = probe_verdict("n1", Some((Some("n1"), Some("42"))), Some((lost, Some("42"))));
            let message = verdict.expect_err("refused");
            assert!(message.contains("transaction-mode"), "{message}");
        }
    }

    #[test]
    fn probe_refuses_an_empty_answer() {
        assert!(probe_verdict("n1", None, Some((Some("n1"), Some("42")))).is_err());
        assert!(probe_verdict("n1", Some((Some("n1"), None)), Some((Some("n1"), Some("42")))).is_err());
    }

    #[test]
    fn probe_nonces_differ() {
        assert_ne!(probe_nonce(), probe_nonce());
    }
}
