//! The unordered path of the dispatcher (DSP-1..6): claim a batch of due rows, send it
//! through the [`SendPath`](relayer_delivery::SendPath), complete it in one statement
//! fenced by the claim's token, and hold back the due rows of destinations that tripped.

use relayer_core::session::StoreSource;
use relayer_core::store::{ClaimOutbox, Claimed, CompleteOutbox, HoldBackDestination};
use relayer_worker::WorkerError;
use uuid::Uuid;

use crate::error::store;
use crate::report::PassReport;
use crate::session::DispatchSession;
use crate::shared::{Shared, TARGET};

impl<S> Shared<S>
where
    S: StoreSource,
    S::Session: DispatchSession,
{
    /// Claims up to a batch of due unordered rows — leaving out tripped destinations
    /// (DSP-6) — sends them and completes them.
    pub(crate) async fn unordered_pass(&self, session: &S::Session) -> Result<PassReport, WorkerError> {
        let token = Uuid::new_v4();
        let tripped = self.send.breakers().tripped();
        let claimed = session
            .claim_due(token, self.options.claim_duration(), self.options.batch_size(), &tripped)
            .await
            .map_err(store("claiming due outbox rows"))?;
        self.send_and_complete(session, token, claimed).await
    }

    /// Sends rows claimed under `token`, completes them, and holds back the due rows of
    /// destinations that tripped while sending. Rows that could not be decoded go to the
    /// dead table in the same completion (SPEC §15).
    pub(crate) async fn send_and_complete(
        &self,
        session: &S::Session,
        token: Uuid,
        claimed: Claimed,
    ) -> Result<PassReport, WorkerError> {
        let undecodable = claimed.undecodable.len() as u64;
        let mut report = PassReport {
            claimed: claimed.messages.len() as u64 + undecodable,
            undecodable,
            ..PassReport::default()
        };
        if report.claimed == 0 {
            return Ok(report);
        }
        for row in &claimed.undecodable {
            tracing::error!(target: TARGET, seq = row.seq, error = %row, "moving an undecodable row to the dead table");
        }
        // The sends end by half the claim (TRN-5), leaving the other half to complete
        // before another dispatcher may take the rows over.
        let deadline = tokio::time::Instant::now() + self.options.claim_duration() / 2;
        let mut tally = self.send.send(claimed.messages, deadline).await;
        tally.completion.bury_undecodable(&claimed.undecodable);
        let written =
            session.complete(token, &tally.completion).await.map_err(store("completing sent outbox rows"))?;
        report.sent = tally.accepted;
        report.failed = tally.failed;
        report.panics = tally.panics;
        report.timed_out = tally.timed_out;
        report.dead = written.dead;
        report.deferred = written.deferred;
        report.fenced_out = written.fenced_out;
        if written.fenced_out > 0 {
            tracing::warn!(target: TARGET, fenced_out = written.fenced_out,
                "claims expired before completion and were taken over; those rows are left to their new owner");
        }
        for (transport, destination) in &tally.tripped {
            let cool_down = self.send.breakers().cool_down();
            let held = session
                .hold_back(transport, destination, cool_down)
                .await
                .map_err(store("holding back a tripped destination's rows"))?;
            report.held_back += held;
            tracing::warn!(target: TARGET, transport, destination, held_back = held, ?cool_down,
                "circuit breaker tripped; the destination's due rows wait out its cool-down");
        }
        Ok(report)
    }
}
