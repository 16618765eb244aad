//! One sweep pass: lease, page, lock, send, complete, renew — one transaction (SWP-4).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use relayer_core::session::{Session, StoreSource};
use relayer_core::store::{
    HoldBackDestination, HoldLease, LeaderCheck, Lease, LockOutbox, PageRequest, ScanRecovery, VerifySchema,
};
use relayer_core::{KeysetCursor, Namespace, PageEnd, PassPlan, SweeperOptions};
use relayer_delivery::SendPath;
use relayer_worker::{
    Leadership, Pass, PassOutcome, WorkerError, release_lease_at_shutdown, roll_back_failed_pass,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::PassAbandoned;
use crate::report::SweepReport;

pub(crate) const TARGET: &str = "relayer::sweeper";

/// The longest a failed pass waits for its rollback (a round trip) before it leaves the
/// transaction to its session: a session dropped inside a transaction discards its
/// connection, and the server rolls back when the connection closes.
const ROLLBACK_PATIENCE: Duration = Duration::from_secs(5);

/// Everything a sweep pass does to the store, in one transaction of one session (SWP-4):
/// the worker's bounds, named once for the crate's own items.
pub(crate) trait SweepSession:
    Session + VerifySchema + ScanRecovery + LockOutbox + HoldLease + HoldBackDestination
{
}

impl<T> SweepSession for T where
    T: Session + VerifySchema + ScanRecovery + LockOutbox + HoldLease + HoldBackDestination
{
}

/// Everything a pass needs, shared by the loop and [`Sweeper::run_once`](crate::Sweeper::run_once).
pub(crate) struct SweepPass<S> {
    pub(crate) source: S,
    pub(crate) namespace: Namespace,
    pub(crate) options: SweeperOptions,
    pub(crate) leadership: Leadership,
    pub(crate) send: SendPath,
    /// Where the next pass reads (SWP-3). A pass works on a copy and stores it back only
    /// once its transaction committed, so a failed pass never moves the cursor.
    pub(crate) cursor: Mutex<KeysetCursor>,
}

impl<S> SweepPass<S>
where
    S: StoreSource,
    S::Session: SweepSession,
{
    fn cursor(&self) -> KeysetCursor {
        *self.cursor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn store_cursor(&self, cursor: KeysetCursor) {
        *self.cursor.lock().unwrap_or_else(PoisonError::into_inner) = cursor;
    }

    /// One pass on `session`, in its own span. A failed pass rolls its transaction back
    /// (or, when that cannot be done in time, leaves it to the session's drop).
    pub(crate) async fn sweep(
        &self,
        session: &mut S::Session,
        shutdown: &CancellationToken,
    ) -> Result<SweepReport, WorkerError> {
        let empty = tracing::field::Empty;
        let span = tracing::info_span!(target: TARGET, "sweep", namespace = %self.namespace, led = empty,
            term = empty, scanned = empty, claimed = empty, sent = empty, failed = empty, dead = empty,
            skipped = empty, wrapped = empty, duration_ms = empty);
        let started = Instant::now();
        // A pass never outlives its lease (TRN-5): the lease expires `lease_duration` after
        // this pass's transaction began, and a pass still running then is dropped, which
        // rolls its transaction back and frees the lease row and the page's row locks.
        let limit = self.pass_limit();
        let bounded = tokio::time::timeout(limit, self.sweep_in_transaction(session, shutdown));
        let result = match bounded.instrument(span.clone()).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(target: TARGET, namespace = %self.namespace, ?limit,
                    "sweep pass outlived its lease; rolled back, its rows are retried by a later pass");
                Err(WorkerError::transient("sweeping a recovery page", PassAbandoned::TimedOut { limit }))
            }
        };
        if result.is_err() {
            // Frees the lease row and the page's row locks at once, whatever failed.
            roll_back_failed_pass(session, ROLLBACK_PATIENCE.min(limit)).await;
        }
        span.record("duration_ms", u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        match &result {
            Ok(report) => {
                span.record("led", report.led);
                if let Some(term) = report.term {
                    span.record("term", term);
                }
                span.record("scanned", report.scanned);
                span.record("claimed", report.claimed);
                span.record("sent", report.sent);
                span.record("failed", report.failed);
                span.record("dead", report.dead);
                span.record("skipped", report.skipped);
                span.record("wrapped", report.wrapped);
                if report.claimed > 0 {
                    span.in_scope(|| tracing::info!(target: TARGET, %report, "recovered outbox rows"));
                }
            }
            // Starting a traversal over is always safe; it only costs a rescan.
            Err(_) => self.store_cursor(KeysetCursor::new()),
        }
        result
    }

    async fn sweep_in_transaction(
        &self,
        session: &mut S::Session,
        shutdown: &CancellationToken,
    ) -> Result<SweepReport, WorkerError> {
        let mut report = SweepReport::default();
        session.begin().await.map_err(|e| WorkerError::store("beginning the pass transaction", e))?;
        // Every capability on the pass's one transaction: claims, completions and the lease
        // renewal commit together.
        let store: &S::Session = session;

        // The lease acquisition and the page's read-and-lock go out together: one round trip
        // once both are prepared on this connection, the acquisition first. Correctness does
        // not rest on that order: the page statement reads and locks nothing unless the lease
        // is ours when it runs, nothing is sent before the acquisition answered, and a page
        // read before this pass took the lease (a new or taken-over lease, or a first pass on
        // a connection) came back empty and is read again below.
        let mut cursor = self.cursor();
        let batch_size = self.options.batch_size();
        let mut request = PageRequest {
            plan: cursor.plan(),
            recovery_delay: self.options.recovery_delay(),
            limit: batch_size,
            leader: None,
        };
        let (lease, found) = match &self.leadership {
            Leadership::Lease { job, owner, lease_duration } => {
                request.leader = Some(LeaderCheck { job, owner });
                let (lease, found) = tokio::join!(
                    store.acquire(job, owner, *lease_duration),
                    store.lock_recovery_page(&request)
                );
                let Some(lease) = lease.map_err(|e| WorkerError::store("taking the sweeper lease", e))?
                else {
                    session
                        .rollback()
                        .await
                        .map_err(|e| WorkerError::store("ending a turn without the lease", e))?;
                    // Whoever leads now has its own cursor; ours is stale by the time we lead again.
                    self.store_cursor(KeysetCursor::new());
                    return Ok(report);
                };
                // A lease created by this very pass did not exist yet when the page was read.
                let found = match found.map_err(read_error)? {
                    Some(found) => found,
                    None => store.lock_recovery_page(&request).await.map_err(read_error)?.unwrap_or_default(),
                };
                (Some(lease), found)
            }
            // The loop holds the advisory lock across passes; with every instance sweeping,
            // claims and SKIP LOCKED keep their rows apart.
            Leadership::Advisory(..) | Leadership::EveryInstance => {
                (None, store.lock_recovery_page(&request).await.map_err(read_error)?.unwrap_or_default())
            }
        };
        report.led = true;
        report.term = lease.as_ref().map(|lease| lease.term);

        let mut sent = None;
        if let PassPlan::CaptureBoundary = request.plan {
            cursor.begin_traversal(found.window.map(|window| window.up_to));
        }
        if cursor.window().is_some() {
            let page = &found.page.eligible;
            if shutdown.is_cancelled() && !page.is_empty() {
                // Nothing sent: roll back (releasing the row locks) and leave the cursor where it was.
                report.stopped_early = true;
                session
                    .rollback()
                    .await
                    .map_err(|e| WorkerError::store("ending a pass stopped by shutdown", e))?;
                return Ok(report);
            }
            report.scanned = page.len() as u64;
            report.undecodable = found.undecodable.len() as u64;
            report.claimed = found.locked.len() as u64 + report.undecodable;
            report.skipped = report.scanned.saturating_sub(report.claimed);
            report.wrapped = cursor
                .record_scan(&found.page, usize::try_from(batch_size).unwrap_or(usize::MAX))
                == PageEnd::Wrapped;
            if !found.locked.is_empty() {
                // The row locks are the claim (SWP-4): they last until the pass commits with the
                // lease renewal, so a claim nobody outside the transaction could see is not written.
                // Sends end by half the pass's limit (TRN-5): a hung transport's batch fails
                // transiently, batches not started are released, and the other half is left
                // to complete, renew and commit.
                let deadline = tokio::time::Instant::now() + self.pass_limit() / 2;
                sent = Some(self.send.send(found.locked, deadline).await);
            }
        }

        // Undecodable rows go to the dead table in the same statement, and so the same
        // transaction, as the page's other outcomes (SPEC §15): they never stall the pass.
        let mut completion =
            sent.as_mut().map(|tally| std::mem::take(&mut tally.completion)).unwrap_or_default();
        for row in &found.undecodable {
            tracing::error!(target: TARGET, namespace = %self.namespace, seq = row.seq, error = %row,
                "moving an undecodable row to the dead table");
        }
        completion.bury_undecodable(&found.undecodable);
        // The completion and the renewal are sent together: one round trip once both are
        // prepared, the renewal last. Both commit or neither, in whichever order they ran.
        let complete = async {
            store.complete_locked(&completion).await.map_err(|e| WorkerError::store("completing the page", e))
        };
        let (completed, renewed) = tokio::join!(complete, self.renew(store, lease.as_ref()));
        let written = completed?;
        renewed?;
        if let Some(tally) = &sent {
            report.sent = tally.accepted;
            report.failed = tally.failed;
            report.panics = tally.panics;
            report.timed_out = tally.timed_out;
        }
        report.dead = written.dead;
        report.deferred = written.deferred;
        if written.fenced_out > 0 {
            // Cannot happen while our transaction holds the rows' locks; say so if it does.
            tracing::warn!(target: TARGET, namespace = %self.namespace, fenced_out = written.fenced_out,
                "locked rows were gone at completion");
        }
        session.commit().await.map_err(|e| WorkerError::store("committing the pass", e))?;
        self.store_cursor(cursor);
        // Destinations that tripped in this pass: their rows due within the cool-down wait it
        // out, so no page or claim reads them meanwhile (DSP-6). After the commit, outside the
        // pass transaction, in bounded statements that each commit on their own: however
        // large the backlog, holding it back can neither outlast the lease nor roll back the
        // page's completions. A failure costs only later claims' time: logged, not fatal.
        let cool_down = self.send.breakers().cool_down();
        // A breaker that closed frees what its hold parked (DSP-6d), before any new hold.
        for (transport, destination) in sent.iter().flat_map(|tally| &tally.recovered) {
            if let Err(error) = session.release_held(transport, destination, cool_down).await {
                tracing::warn!(target: TARGET, namespace = %self.namespace, transport, destination,
                    error = %relayer_core::error_chain(&error),
                    "could not release a recovered destination's held rows; they come back when their hold ends");
            }
        }
        for (transport, destination) in sent.iter().flat_map(|tally| &tally.tripped) {
            match session.hold_back(transport, destination, cool_down).await {
                Ok(held) => report.held_back += held,
                Err(error) => tracing::warn!(target: TARGET, namespace = %self.namespace, transport,
                    destination, error = %relayer_core::error_chain(&error),
                    "could not hold back a tripped destination's rows; claims filter them meanwhile"),
            }
        }
        Ok(report)
    }

    /// The longest a pass may run: its lease (lease leadership), else the options'
    /// `lease_duration` — the row locks are the claim, and they must not be held longer
    /// than a leased pass would hold them.
    fn pass_limit(&self) -> Duration {
        match &self.leadership {
            Leadership::Lease { lease_duration, .. } => *lease_duration,
            Leadership::Advisory(..) | Leadership::EveryInstance => self.options.lease_duration(),
        }
    }

    /// Restarts the lease's expiry as the transaction's last statement (LDR-2). A lease that
    /// is no longer ours must not commit the pass's work: roll it back.
    async fn renew(&self, store: &S::Session, lease: Option<&Lease>) -> Result<(), WorkerError> {
        let (Some(lease), Leadership::Lease { lease_duration, .. }) = (lease, &self.leadership) else {
            return Ok(());
        };
        let renewed = store
            .renew(lease, *lease_duration)
            .await
            .map_err(|e| WorkerError::store("renewing the sweeper lease", e))?;
        if renewed.is_some() {
            return Ok(());
        }
        tracing::warn!(target: TARGET, namespace = %self.namespace, job = %lease.job, term = lease.term,
            "the sweeper lease was lost during the pass; rolling its work back");
        let lost = PassAbandoned::LeaseLost { job: lease.job.clone(), term: lease.term };
        Err(WorkerError::transient("renewing the sweeper lease", lost))
    }
}

/// A failed read of the recovery page.
fn read_error(error: impl relayer_core::StoreError) -> WorkerError {
    WorkerError::store("reading and locking a recovery page", error)
}

#[async_trait]
impl<S> Pass for SweepPass<S>
where
    S: StoreSource,
    S::Session: SweepSession,
{
    type Report = SweepReport;
    type Error = WorkerError;

    async fn run_pass(&self, shutdown: &CancellationToken) -> Result<PassOutcome<SweepReport>, WorkerError> {
        // One session for the whole pass, and no second one while holding it (LIF-2).
        let mut session = self
            .source
            .open()
            .await
            .map_err(|e| WorkerError::store("opening the pass's store session", e))?;
        let report = self.sweep(&mut session, shutdown).await?;
        Ok(if report.led { PassOutcome::Led(report) } else { PassOutcome::NotLeader })
    }

    async fn stopped(&self) {
        self.store_cursor(KeysetCursor::new());
        let Leadership::Lease { job, owner, .. } = &self.leadership else { return };
        release_lease_at_shutdown(&self.source, &self.namespace, job, owner).await;
    }
}
