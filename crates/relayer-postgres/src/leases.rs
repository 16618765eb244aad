//! Leadership leases (LDR-2, LDR-6): one row per job in `{prefix}leases`.
//!
//! A lease names its holder (`owner`, unique per worker instance), a `term` that grows by
//! one each time a *different* owner takes the row, and `expires_at` on the database clock
//! (NS-4). A pass becomes leader with [`LeaseStatements::acquire`], run inside the pass's
//! own transaction: it locks the lease row with `FOR UPDATE SKIP LOCKED` and keeps that lock
//! until the transaction ends, so even an expired lease cannot let a second connected owner
//! overlap a running pass. A contender never waits behind a running pass: a locked row is
//! skipped, and a skipped row that exists means "someone's pass is running, not leader this
//! turn". Otherwise the row is taken when it is ours (same term), expired (term + 1) or
//! absent (term 1); a live lease of another owner is left alone.
//!
//! [`LeaseStatements::renew`] restarts the expiry, sent with the last statements of a pass before it
//! commits; [`LeaseStatements::release`] ends a lease at graceful shutdown so another
//! instance takes over at once instead of after expiry.
//!
//! A leader whose pass is many short transactions (cleanup's batches) cannot keep one row
//! lock for the pass: each of its batches locks the lease row, acts only while the lease
//! still has the same owner and term and has not expired, and renews it, in one statement
//! ([`RetentionStatements::delete_expired`](crate::retention::RetentionStatements::delete_expired) under a lease). A deposed
//! leader that wakes up late therefore changes nothing, and no contender can take the lease
//! while a batch runs (its row is locked) or between batches (it was just renewed).
//! [`fence_clause`] is that condition for other statements; [`LeaseStatements::holds`]
//! evaluates it on its own.
//!
//! Every statement reads the row through the primary key `leases_pkey (job)`.

use std::time::{Duration, SystemTime};

use relayer_core::time::database_micros;
use relayer_core::{Namespace, Timestamp, advisory_lock_key};
use tokio_postgres::types::Type;

use crate::error::StorageError;
use crate::exec::{Executor, Prepared, one_row};
use crate::pool::{PgClient, PgPool};

// Pure data, defined in the core crate next to the `HoldLease` trait; re-exported so
// `relayer_postgres::Lease` keeps working.
pub use relayer_core::store::Lease;

/// The lease statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct LeaseStatements {
    namespace: Namespace,
    lock_and_take: String,
    row_exists: String,
    holds: String,
    insert_first: String,
    renew: String,
    release: String,
}

impl LeaseStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let leases = namespace.table("leases");
        LeaseStatements {
            namespace: namespace.clone(),
            // The common turn in one round trip: lock the row (SKIP LOCKED: a row locked by a
            // running pass is not waited for) and, when it is ours or expired, take it. SET
            // expressions read the old row: the same owner keeps its term, a new owner gets the
            // next one. `locked` = 0 means absent or held by a running pass (see
            // `insert_if_absent`); a locked row without `term` is another owner's live lease.
            lock_and_take: format!(
                "WITH locked AS ( \
                   SELECT job, owner, expires_at > now() AS live FROM {leases} \
                   WHERE job = $1 FOR UPDATE SKIP LOCKED), \
                 taken AS ( \
                   UPDATE {leases} l SET \
                     term = CASE WHEN l.owner = $2 THEN l.term ELSE l.term + 1 END, \
                     acquired_at = CASE WHEN l.owner = $2 THEN l.acquired_at ELSE now() END, \
                     owner = $2, renewed_at = now(), \
                     expires_at = now() + ($3::int8 * interval '1 microsecond') \
                   FROM locked WHERE l.job = locked.job AND (locked.owner = $2 OR NOT locked.live) \
                   RETURNING l.term, l.expires_at, locked.owner <> $2 AS took_over) \
                 SELECT (SELECT count(*) FROM locked), taken.term, taken.expires_at, taken.took_over \
                 FROM (SELECT) AS one LEFT JOIN taken ON true"
            ),
            // A plain (MVCC) read never waits: it tells "absent" from "locked by a running pass".
            row_exists: format!("SELECT EXISTS (SELECT 1 FROM {leases} WHERE job = $1)"),
            holds: format!("SELECT {}", fence_clause(namespace, 1)),
            // A unique-index conflict with an uncommitted insert would wait for that transaction;
            // the transaction-scoped advisory lock lets only one first inserter try at a time, and
            // the others return at once as "not leader".
            insert_first: format!(
                "INSERT INTO {leases} (job, owner, term, expires_at) \
                 SELECT $1, $2, 1, now() + ($3::bigint * interval '1 microsecond') \
                 WHERE pg_try_advisory_xact_lock($4) \
                 ON CONFLICT (job) DO NOTHING \
                 RETURNING term, expires_at"
            ),
            // Fenced by owner and term. Inside the lease-holding transaction the row is our own
            // lock, so SKIP LOCKED skips nothing; outside it a contender's brief probe is skipped
            // instead of waited for (the renewal then reports the lease as not renewed).
            // clock_timestamp(), not now(): the expiry restarts when the pass ends (LDR-2), and
            // now() is still the instant the pass's transaction began.
            renew: format!(
                "UPDATE {leases} SET renewed_at = clock_timestamp(), \
                   expires_at = clock_timestamp() + ($4::int8 * interval '1 microsecond') \
                 WHERE job = (SELECT job FROM {leases} \
                              WHERE job = $1 AND owner = $2 AND term = $3 FOR UPDATE SKIP LOCKED) \
                 RETURNING expires_at"
            ),
            // The row (and its term) stays, so terms keep growing across holders.
            release: format!(
                "UPDATE {leases} SET expires_at = now() \
                 WHERE job = (SELECT job FROM {leases} \
                              WHERE job = $1 AND owner = $2 AND expires_at > now() FOR UPDATE SKIP LOCKED)"
            ),
        }
    }

    /// Tries to lead `job` as `owner` for `lease_duration`, inside the caller's transaction
    /// `tx`. Never waits for another pass.
    ///
    /// `Some` means this transaction holds the lease row lock until it ends: renew with
    /// [`renew`](Self::renew) as its last statement. `None` means another owner leads (a
    /// live lease, or a pass running right now): skip this turn, and end the transaction.
    pub async fn acquire(
        &self,
        tx: &impl Executor,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, StorageError> {
        let context = || format!("acquiring lease {job:?} for {owner:?}");
        let row = one_row(
            tx,
            &self.lock_and_take,
            &[(&job, Type::TEXT), (&owner, Type::TEXT), (&database_micros(lease_duration), Type::INT8)],
            &context(),
        )
        .await?;
        if row.get::<_, i64>(0) == 0 {
            return self.insert_if_absent(tx, job, owner, lease_duration).await;
        }
        let Some(term) = row.get::<_, Option<i64>>(1) else {
            return Ok(None); // another owner's live lease
        };
        let lease = lease(job, owner, term, row.get(2));
        if row.get::<_, bool>(3) {
            tracing::info!(target: "relayer::lease", namespace = %self.namespace, job, owner, term = lease.term,
                "took over an expired lease");
        }
        Ok(Some(lease))
    }

    /// The row was not lockable: either it does not exist yet, or a running pass holds it.
    async fn insert_if_absent(
        &self,
        tx: &impl Executor,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, StorageError> {
        let context = || format!("creating lease {job:?} for {owner:?}");
        let exists: bool = one_row(tx, &self.row_exists, &[(&job, Type::TEXT)], &context()).await?.get(0);
        if exists {
            return Ok(None);
        }
        let gate =
            advisory_lock_key(&format!("lease:{}.{}{job}", self.namespace.schema(), self.namespace.prefix()));
        let inserted = crate::exec::rows(
            tx,
            &self.insert_first,
            &[
                (&job, Type::TEXT),
                (&owner, Type::TEXT),
                (&database_micros(lease_duration), Type::INT8),
                (&gate, Type::INT8),
            ],
            context(),
        )
        .await?;
        Ok(inserted.first().map(|row| lease(job, owner, row.get(0), row.get(1))))
    }

    /// Restarts the expiry of `lease` at `clock_timestamp() + lease_duration` — from this
    /// instant, not from the start of the transaction — as the end of a pass. `None` means the lease is no longer this holder's (another
    /// owner took over, or a contender held the row at this instant): leadership is lost.
    pub async fn renew(
        &self,
        client: &impl Executor,
        lease: &Lease,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, StorageError> {
        let row = client
            .rows(
                &self.renew,
                &[
                    (&lease.job, Type::TEXT),
                    (&lease.owner, Type::TEXT),
                    (&lease.term, Type::INT8),
                    (&database_micros(lease_duration), Type::INT8),
                ],
            )
            .await
            .map_err(|e| {
                StorageError::database(format!("renewing lease {:?} for {:?}", lease.job, lease.owner), e)
            })?;
        Ok(row.first().map(|row| Lease { expires_at: timestamp(row.get(0)), ..lease.clone() }))
    }

    /// Takes or renews `job`'s lease for `owner` in a short transaction of its own on
    /// `client`, committed before it returns, for a pass whose statements are each their own
    /// transaction (made safe by fences or by being one-statement moves rather than by this
    /// row lock). `None`: another owner leads; skip this turn.
    pub async fn acquire_committed(
        &self,
        client: &mut PgClient,
        job: &str,
        owner: &str,
        lease_duration: Duration,
    ) -> Result<Option<Lease>, StorageError> {
        let context = |what: &str| format!("{what} the transaction of lease {job:?} for {owner:?}");
        let (connection, statements) = client.split();
        let tx =
            connection.transaction().await.map_err(|e| StorageError::database(context("beginning"), e))?;
        let lease = self.acquire(&Prepared::new(&tx, statements), job, owner, lease_duration).await?;
        tx.commit().await.map_err(|e| StorageError::database(context("committing"), e))?;
        Ok(lease)
    }

    /// Releases `owner`'s lease on `job` when a worker stops (LIF-1), on a connection of
    /// `pool`, and logs the outcome: a failure is logged, not returned, since shutdown goes
    /// on and the lease then simply expires.
    pub async fn release_at_shutdown(&self, pool: &PgPool, job: &str, owner: &str) {
        let released = match pool.get().await {
            Ok(connection) => self.release(&*connection, job, owner).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let namespace = &self.namespace;
        match released {
            Ok(true) => {
                tracing::info!(target: "relayer::lease", %namespace, job, owner, "released the lease");
            }
            Ok(false) => {}
            // It expires by itself; another instance waits out the rest of it.
            Err(cause) => tracing::warn!(target: "relayer::lease", %namespace, job, owner, %cause,
                "could not release the lease; it will expire"),
        }
    }

    /// Ends `owner`'s lease on `job` now, for graceful shutdown: another instance can lead on
    /// its next turn instead of after expiry. Returns whether a live lease was released.
    /// Best effort: a contender probing the row at this instant makes it a no-op, and the
    /// lease then simply expires.
    pub async fn release(
        &self,
        client: &impl Executor,
        job: &str,
        owner: &str,
    ) -> Result<bool, StorageError> {
        let released = crate::exec::affected(
            client,
            &self.release,
            &[(&job, Type::TEXT), (&owner, Type::TEXT)],
            format!("releasing lease {job:?} for {owner:?}"),
        )
        .await?;
        Ok(released > 0)
    }

    /// Whether `lease` is still its owner's, at its term, and unexpired on the database
    /// clock. A plain read: it never waits, and tells a lease another session's statement
    /// holds locked at this instant (still ours) from one that was lost.
    pub async fn holds(&self, client: &impl Executor, lease: &Lease) -> Result<bool, StorageError> {
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 3] =
            [(&lease.job, Type::TEXT), (&lease.owner, Type::TEXT), (&lease.term, Type::INT8)];
        let context = || format!("checking lease {:?} of {:?} (term {})", lease.job, lease.owner, lease.term);
        Ok(one_row(client, &self.holds, &params, &context()).await?.get(0))
    }

    /// The current lease of `job`, if any row exists (for status and tests). A plain read:
    /// it never waits.
    pub async fn current(&self, client: &impl Executor, job: &str) -> Result<Option<Lease>, StorageError> {
        let sql =
            format!("SELECT owner, term, expires_at FROM {} WHERE job = $1", self.namespace.table("leases"));
        let rows =
            crate::exec::rows(client, &sql, &[(&job, Type::TEXT)], format!("reading lease {job:?}")).await?;
        Ok(rows.first().map(|row| Lease { owner: row.get(0), ..lease(job, "", row.get(1), row.get(2)) }))
    }
}

/// The fence for statements a leader runs outside its lease-holding transaction (LDR-6):
/// `EXISTS (…)` true only while the lease of job `$first`, owner `$first+1`, term
/// `$first+2` (`text`, `text`, `bigint`) is still that holder's and unexpired. Bind the
/// values with [`fence_params`].
///
/// ```
/// let clause = relayer_postgres::leases::fence_clause(&relayer_core::Namespace::default(), 3);
/// assert!(clause.contains("job = $3 AND owner = $4 AND term = $5"));
/// ```
pub fn fence_clause(namespace: &Namespace, first: usize) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {} WHERE job = ${first} AND owner = ${} AND term = ${} AND expires_at > now())",
        namespace.table("leases"),
        first + 1,
        first + 2
    )
}

/// The values [`fence_clause`] binds for `lease`, in order: job, owner, term.
pub fn fence_params(lease: &Lease) -> [&(dyn tokio_postgres::types::ToSql + Sync); 3] {
    [&lease.job, &lease.owner, &lease.term]
}

fn lease(job: &str, owner: &str, term: i64, expires_at: SystemTime) -> Lease {
    Lease { job: job.to_owned(), owner: owner.to_owned(), term, expires_at: timestamp(expires_at) }
}

fn timestamp(time: SystemTime) -> Timestamp {
    Timestamp::from_system_time(time)
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use relayer_test_support::TestDb;
    use tokio_postgres::Client;

    use super::*;
    use crate::migrate;
    use relayer_core::RetentionTable;
    use relayer_core::store::UnderLease;

    use crate::retention::RetentionStatements;

    const LONG: Duration = Duration::from_secs(30);
    const SHORT: Duration = Duration::from_secs(1);
    /// A safety net so a regression that blocks fails the test instead of hanging it; no
    /// test asserts how long anything takes.
    const HANG: Duration = Duration::from_secs(60);

    async fn setup() -> (TestDb, Client, LeaseStatements) {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        migrate(&mut client, db.namespace()).await.unwrap();
        let statements = LeaseStatements::new(db.namespace());
        (db, client, statements)
    }

    /// One pass's leadership step: acquire in a transaction and commit.
    async fn acquire(
        client: &mut Client,
        leases: &LeaseStatements,
        owner: &str,
        duration: Duration,
    ) -> Option<Lease> {
        let tx = client.transaction().await.unwrap();
        let lease = leases.acquire(&tx, "cleanup", owner, duration).await.unwrap();
        tx.commit().await.unwrap();
        lease
    }

    async fn within<T>(future: impl Future<Output = T>) -> T {
        tokio::time::timeout(HANG, future).await.expect("blocked: a lease call waited for another pass")
    }

    /// Polls (bounded) until `owner` can take the lease: it is expired on the DB clock.
    async fn acquire_after_expiry(client: &mut Client, leases: &LeaseStatements, owner: &str) -> Lease {
        for _ in 0..600 {
            if let Some(lease) = acquire(client, leases, owner, LONG).await {
                return lease;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the lease never expired");
    }

    #[tokio::test]
    async fn first_owner_gets_term_one_and_renewing_keeps_it_ldr_6() {
        let (_db, mut client, leases) = setup().await;
        let first = acquire(&mut client, &leases, "a", LONG).await.unwrap();
        assert_eq!((first.job.as_str(), first.owner.as_str(), first.term), ("cleanup", "a", 1));
        let again = acquire(&mut client, &leases, "a", LONG).await.unwrap();
        assert_eq!(again.term, 1, "the same owner keeps its term");
        assert!(again.expires_at >= first.expires_at);
        let renewed = leases.renew(&client, &again, LONG).await.unwrap().unwrap();
        assert_eq!(renewed.term, 1);
        assert_eq!(leases.current(&client, "cleanup").await.unwrap().unwrap().owner, "a");
    }

    #[tokio::test]
    async fn another_owner_cannot_take_a_live_lease_ldr_2() {
        let (_db, mut client, leases) = setup().await;
        acquire(&mut client, &leases, "a", LONG).await.unwrap();
        assert_eq!(acquire(&mut client, &leases, "b", LONG).await, None);
        let stale = Lease { owner: "b".into(), ..acquire(&mut client, &leases, "a", LONG).await.unwrap() };
        assert_eq!(leases.renew(&client, &stale, LONG).await.unwrap(), None, "renew is fenced by owner");
        assert!(!leases.release(&client, "cleanup", "b").await.unwrap(), "so is release");
    }

    #[tokio::test]
    async fn another_owner_takes_over_after_expiry_with_the_next_term_ldr_2() {
        let (_db, mut client, leases) = setup().await;
        acquire(&mut client, &leases, "a", SHORT).await.unwrap();
        let taken = acquire_after_expiry(&mut client, &leases, "b").await;
        assert_eq!((taken.owner.as_str(), taken.term), ("b", 2));
        assert_eq!(acquire(&mut client, &leases, "a", LONG).await, None);
        let old = Lease { owner: "a".into(), term: 1, ..taken.clone() };
        assert_eq!(leases.renew(&client, &old, LONG).await.unwrap(), None, "the deposed owner cannot renew");
    }

    #[tokio::test]
    async fn release_lets_another_owner_take_over_at_once_lif_1() {
        let (_db, mut client, leases) = setup().await;
        acquire(&mut client, &leases, "a", LONG).await.unwrap();
        assert!(leases.release(&client, "cleanup", "a").await.unwrap());
        assert!(!leases.release(&client, "cleanup", "a").await.unwrap(), "releasing twice is harmless");
        let taken = acquire(&mut client, &leases, "b", LONG).await.unwrap();
        assert_eq!((taken.owner.as_str(), taken.term), ("b", 2));
    }

    /// LDR-2: a contender asks while another pass's transaction holds the lease row. It must
    /// answer "not leader" while that transaction is still open, whether the row is being
    /// created, is live, or has expired under the running pass.
    #[tokio::test]
    async fn a_contender_does_not_wait_for_a_running_pass_ldr_2() {
        let (db, mut holder, leases) = setup().await;
        let mut contender = db.connect().await;

        // The row does not exist yet: the holder's pass creates it and is still running.
        let pass = holder.transaction().await.unwrap();
        let lease = leases.acquire(&pass, "cleanup", "holder", SHORT).await.unwrap().unwrap();
        assert_eq!(lease.term, 1);
        assert_eq!(within(acquire(&mut contender, &leases, "contender", LONG)).await, None);
        pass.commit().await.unwrap();

        // The row exists and the holder's lease expires while its next pass still runs.
        let pass = holder.transaction().await.unwrap();
        leases.acquire(&pass, "cleanup", "holder", SHORT).await.unwrap().unwrap();
        let observer = db.connect().await;
        let expired =
            format!("SELECT expires_at < clock_timestamp() FROM {}", db.namespace().table("leases"));
        for _ in 0..600 {
            if observer.query_one(&expired, &[]).await.unwrap().get::<_, bool>(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(within(acquire(&mut contender, &leases, "contender", LONG)).await, None);
        // The holder's pass is still open and working: it commits only now.
        pass.execute("SELECT 1", &[]).await.unwrap();
        pass.commit().await.unwrap();
        // The holder's expiry started at its pass's start, so it has lapsed by now.
        let taken = acquire_after_expiry(&mut contender, &leases, "contender").await;
        assert_eq!(taken.term, 2);
    }

    /// LDR-6: a batch run under an old lease (another owner, or an old term) deletes nothing
    /// and renews nothing; the holder's batches delete and renew.
    #[tokio::test]
    async fn a_deposed_leaders_leased_batch_deletes_nothing_ldr_6() {
        let (db, mut client, leases) = setup().await;
        let retention = RetentionStatements::new(db.namespace());
        insert_expired_dead(&client, &db, 10).await;
        let deposed = acquire(&mut client, &leases, "a", SHORT).await.unwrap();
        let leader = acquire_after_expiry(&mut client, &leases, "b").await;
        assert_eq!(leader.term, 2);

        let month = Duration::from_secs(30 * 86_400);
        let batch = |lease: &Lease, limit| {
            let (retention, client, lease) = (&retention, &client, lease.clone());
            async move {
                retention
                    .delete_expired(
                        client,
                        RetentionTable::Dead,
                        month,
                        limit,
                        Some(UnderLease { lease: &lease, lease_duration: LONG }),
                    )
                    .await
                    .unwrap()
            }
        };
        assert_eq!(batch(&deposed, 100).await, None);
        let stale_term = Lease { term: 1, ..leader.clone() };
        assert_eq!(batch(&stale_term, 100).await, None);
        assert!(
            !leases.holds(&client, &deposed).await.unwrap()
                && !leases.holds(&client, &stale_term).await.unwrap()
        );
        assert_eq!(count_dead(&client, &db).await, 10);
        let before = leases.current(&client, "cleanup").await.unwrap().unwrap();
        assert_eq!(batch(&leader, 4).await, Some(4));
        assert_eq!(batch(&leader, 100).await, Some(6));
        assert_eq!(batch(&leader, 100).await, Some(0), "an empty batch still renews");
        let after = leases.current(&client, "cleanup").await.unwrap().unwrap();
        assert!(after.expires_at > before.expires_at, "the batches renewed the lease");
        assert_eq!((after.owner.as_str(), after.term), ("b", 2));
        assert!(leases.holds(&client, &leader).await.unwrap());
    }

    /// LDR-2: a batch whose lease row another session holds locked at that instant (a
    /// contender probing it) neither waits nor deletes; `holds` says the lease is still ours.
    #[tokio::test]
    async fn a_leased_batch_never_waits_for_a_locked_lease_row_ldr_2() {
        let (db, mut client, leases) = setup().await;
        let retention = RetentionStatements::new(db.namespace());
        insert_expired_dead(&client, &db, 3).await;
        let lease = acquire(&mut client, &leases, "a", LONG).await.unwrap();
        let mut prober = db.connect().await;
        let probe = prober.transaction().await.unwrap();
        assert_eq!(leases.acquire(&probe, "cleanup", "b", LONG).await.unwrap(), None);
        let month = Duration::from_secs(30 * 86_400);
        let busy = within(retention.delete_expired(
            &client,
            RetentionTable::Dead,
            month,
            100,
            Some(UnderLease { lease: &lease, lease_duration: LONG }),
        ))
        .await;
        assert_eq!(busy.unwrap(), None);
        assert!(leases.holds(&client, &lease).await.unwrap(), "still ours: the row was only busy");
        probe.rollback().await.unwrap();
        let done = retention
            .delete_expired(
                &client,
                RetentionTable::Dead,
                month,
                100,
                Some(UnderLease { lease: &lease, lease_duration: LONG }),
            )
            .await
            .unwrap();
        assert_eq!(done, Some(3));
        assert_eq!(count_dead(&client, &db).await, 0);
    }

    async fn insert_expired_dead(client: &Client, db: &TestDb, rows: i64) {
        let dead = db.namespace().table("dead");
        client
            .execute(
                &format!(
                    "INSERT INTO {dead} (seq, message_id, transport, destination, body, created_at, failed_at, attempts) \
                     SELECT n, gen_random_uuid(), 'queue', 'orders', '\\x00', now() - interval '60 days', \
                            now() - interval '40 days', 1 FROM generate_series(1, $1::int8) AS n"
                ),
                &[&rows],
            )
            .await
            .unwrap();
    }

    async fn count_dead(client: &Client, db: &TestDb) -> i64 {
        let dead = db.namespace().table("dead");
        client.query_one(&format!("SELECT count(*) FROM {dead}"), &[]).await.unwrap().get(0)
    }
}
