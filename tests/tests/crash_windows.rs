//! Crash windows hit on purpose (DSP-3, DSP-7, SWP-4, TRN-5, LDR-2, LDR-6): workers run on
//! relayer's PostgreSQL source wrapped in test-support's `FaultyStore`, which strikes the
//! exact call a window needs — a completion lost after a successful send, a connection
//! killed between the lock and the send, a renewal or a batch held past its lease. Every
//! test then checks, on the real tables and on relayer's PostgreSQL queue (the transport),
//! that nothing was lost, that the window cost at most a second delivery (at least once),
//! and that the late writer was fenced.
//!
//! Messages enter through relayer's writer and leave through its queue transport; only
//! the dead rows of the cleanup test are written by hand (no component writes a row that
//! is already weeks old).
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer::cleanup::{Cleanup, LEASE_JOB as CLEANUP_JOB};
use relayer::core::store::{ClaimOutbox, CompleteOutbox, Completion};
use relayer::core::{StoreError, StoreSource};
use relayer::delivery::SendPath;
use relayer::dispatcher::{DispatchSession, Dispatcher};
use relayer::postgres::{LeaseStatements, OutboxWriter, PgSource, connect_pool};
use relayer::sweeper::{LEASE_JOB as SWEEPER_JOB, Sweeper};
use relayer::{
    CleanupOptions, DispatcherOptions, Leadership, NewMessage, Retention, SweeperOptions, Transport,
    TransportRegistry, error_chain,
};
use relayer_scenarios::{Audit, QueueProbe, Written, audit, outbox_rows, read_deliveries};
use relayer_test_support::{Fault, FaultyStore, StoreCall, TestDb, Transience, eventually, within};
use tokio_postgres::Client;
use uuid::Uuid;

/// A migrated namespace, a connection to observe it, and relayer's queue transport.
struct Scene {
    db: TestDb,
    client: Client,
    queue: Arc<QueueProbe>,
}

impl Scene {
    async fn new() -> Scene {
        let db = TestDb::new().await;
        let mut client = db.connect().await;
        relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
        let queue = Arc::new(QueueProbe::new(connect_pool(db.config(), 2).await.unwrap(), db.namespace()));
        Scene { db, client, queue }
    }

    /// Commits `n` messages to the queue destination `orders`, through relayer's writer.
    async fn write(&self, n: usize) -> Vec<Written> {
        let messages: Vec<NewMessage> =
            (0..n).map(|i| NewMessage::new("queue", "orders", format!("order {i}").into_bytes())).collect();
        let rows =
            OutboxWriter::new(self.db.namespace(), ["queue"]).enqueue(&self.client, &messages).await.unwrap();
        Written::from_enqueued(&messages, &rows)
    }

    /// relayer's PostgreSQL source on a pool of one connection of its own.
    async fn source(&self) -> PgSource {
        let pool = connect_pool(self.db.config(), 1).await.unwrap();
        PgSource::new(pool, self.db.namespace()).with_transports(["queue"])
    }

    /// [`source`](Self::source), wrapped for faults.
    async fn faulty_source(&self) -> FaultyStore<PgSource> {
        FaultyStore::new(self.source().await)
    }

    /// Commits `n` messages of one lane, `lane`, to the queue destination `orders`.
    async fn write_lane(&self, lane: &str, n: usize) -> Vec<Written> {
        let messages: Vec<NewMessage> = (0..n)
            .map(|i| NewMessage::new("queue", "orders", format!("{lane} {i}").into_bytes()).lane(lane))
            .collect();
        let rows =
            OutboxWriter::new(self.db.namespace(), ["queue"]).enqueue(&self.client, &messages).await.unwrap();
        Written::from_enqueued(&messages, &rows)
    }

    /// A dispatcher on `store` whose claims last `claim`, sending to the queue.
    fn dispatcher<S>(&self, store: S, claim: Duration) -> Dispatcher<S>
    where
        S: StoreSource,
        S::Session: DispatchSession,
    {
        let transports: Arc<TransportRegistry> =
            Arc::new(TransportRegistry::new().with(Arc::clone(&self.queue) as Arc<dyn Transport>).unwrap());
        let options = DispatcherOptions::builder().claim_duration(claim).build().unwrap();
        Dispatcher::new(store, self.db.namespace().clone(), options, transports).unwrap()
    }

    /// The message ids the queue received, in the order it received them.
    async fn delivered_in_order(&self) -> Vec<Uuid> {
        let sql = format!("SELECT message_id FROM {} ORDER BY seq", self.db.namespace().table("queue"));
        self.client.query(&sql, &[]).await.unwrap().iter().map(|row| row.get(0)).collect()
    }

    /// A sweeper on `store` leading as `owner` under a lease of `lease`, sending to the queue.
    fn sweeper<S>(&self, store: S, owner: &str, lease: Duration) -> Sweeper<S>
    where
        S: StoreSource,
        S::Session: relayer::core::VerifySchema
            + relayer::core::ScanRecovery
            + relayer::core::LockOutbox
            + relayer::core::HoldLease
            + relayer::core::HoldBackDestination,
    {
        let transports: Arc<TransportRegistry> =
            Arc::new(TransportRegistry::new().with(Arc::clone(&self.queue) as Arc<dyn Transport>).unwrap());
        let options = SweeperOptions::builder()
            .batch_size(10)
            .recovery_delay(Duration::ZERO)
            .sweep_interval(Duration::from_millis(100))
            .lease_duration(lease)
            .build()
            .unwrap();
        let send = SendPath::new(transports, DispatcherOptions::default());
        Sweeper::new(
            store,
            self.db.namespace().clone(),
            options,
            send,
            Leadership::lease(SWEEPER_JOB, owner, lease),
        )
    }

    /// What the queue received, against what was written.
    async fn audit(&self, written: &[Written]) -> Audit {
        audit(written, &read_deliveries(&self.client, self.db.namespace()).await.unwrap())
    }

    async fn outbox_rows(&self) -> i64 {
        outbox_rows(&self.client, self.db.namespace()).await.unwrap()
    }

    /// The holder and term of `job`'s lease.
    async fn lease(&self, job: &str) -> (String, i64) {
        let lease =
            LeaseStatements::new(self.db.namespace()).current(&self.client, job).await.unwrap().unwrap();
        (lease.owner, lease.term)
    }
}

/// DSP-3, DSP-7: a claimant's completion fails after the transport accepted its batch. The
/// rows stay claimed, so nothing is lost; once the claim expires another claimant takes
/// them and sends them again (at least once). When the first claimant's completion finally
/// arrives, it is fenced by its stale claim token: it touches none of the rows another
/// claim now holds, and that claim completes them.
#[tokio::test]
async fn a_completion_lost_after_the_send_is_sent_again_and_the_stale_claims_completion_is_fenced_dsp_3() {
    let scene = Scene::new().await;
    let written = scene.write(3).await;
    let store = scene.faulty_source().await;
    let first = store.open().await.unwrap();
    let (stale_token, claim) = (Uuid::new_v4(), Duration::from_secs(1));
    let claimed = first.claim_due(stale_token, claim, 10, &[]).await.unwrap();
    assert_eq!(claimed.messages.len(), 3);
    let envelopes: Vec<_> = claimed.messages.iter().map(|message| message.envelope.clone()).collect();
    scene.queue.send("orders", &envelopes).await.unwrap();
    let mut accepted = Completion::new();
    claimed.messages.iter().for_each(|message| accepted.accept(message.seq));

    let lost = store.inject(Fault::fail_before(StoreCall::Complete, Transience::Transient));
    let error = first.complete(stale_token, &accepted).await.unwrap_err();
    assert!(error.is_transient() && error.is_injected(), "{}", error_chain(&error));
    assert_eq!(lost.strikes(), 1);
    assert_eq!(scene.outbox_rows().await, 3, "a failed completion deletes nothing: the rows are still owed");

    // Another claimant (no faults) takes the rows once the claim expired.
    let second = scene.source().await.open().await.unwrap();
    let token = Uuid::new_v4();
    let retaken = Mutex::new(Vec::new());
    eventually("the expired claim is taken over", || async {
        let claimed = second.claim_due(token, Duration::from_secs(60), 10, &[]).await.unwrap();
        let mut retaken = retaken.lock().unwrap();
        retaken.extend(claimed.messages);
        retaken.len() == 3
    })
    .await;
    let retaken = retaken.into_inner().unwrap();
    let envelopes: Vec<_> = retaken.iter().map(|message| message.envelope.clone()).collect();
    scene.queue.send("orders", &envelopes).await.unwrap();

    // The first claimant's completion arrives late: its claim is stale, so nothing moves.
    let late = first.complete(stale_token, &accepted).await.unwrap();
    assert_eq!((late.deleted, late.fenced_out), (0, 3), "{late:?}");
    let held_by_second: i64 = scene
        .client
        .query_one(
            &format!("SELECT count(*) FROM {} WHERE claim_token = $1", scene.db.namespace().table("outbox")),
            &[&token],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held_by_second, 3, "the live claim still holds every row");

    let mut completion = Completion::new();
    retaken.iter().for_each(|message| completion.accept(message.seq));
    assert_eq!(second.complete(token, &completion).await.unwrap().deleted, 3);
    assert_eq!(scene.outbox_rows().await, 0);
    let verdict = scene.audit(&written).await;
    assert!(verdict.is_clean(), "{verdict:?}");
    assert_eq!((verdict.delivered, verdict.duplicates), (3, 3), "each message delivered again, never lost");
}

/// DSP-3, DSP-7, through the dispatcher itself on a wrapped store: a pass sends its batch,
/// then its completion never reaches the database. The pass fails (transient) and nothing
/// is lost: the rows stay claimed until the claim lapses, and a later pass of the same
/// dispatcher takes them and sends them again — each message delivered twice, never lost.
#[tokio::test]
async fn a_dispatch_pass_whose_completion_is_lost_fails_and_a_later_pass_sends_the_rows_again_dsp_3() {
    let scene = Scene::new().await;
    let written = scene.write(3).await;
    let store = scene.faulty_source().await;
    let dispatcher = scene.dispatcher(store.clone(), Duration::from_secs(1));
    let lost = store.inject(Fault::fail_before(StoreCall::Complete, Transience::Transient));

    let error = dispatcher.run_once().await.unwrap_err();
    assert!(error.is_transient(), "{}", error_chain(&error));
    assert_eq!(lost.strikes(), 1);
    assert_eq!(scene.audit(&written).await.delivered, 3, "the batch was sent before the completion was lost");
    assert_eq!(scene.outbox_rows().await, 3, "a lost completion deletes nothing: the rows are still owed");

    eventually("a later pass sends the rows again once their claim lapsed", || async {
        dispatcher.run_once().await.unwrap();
        scene.outbox_rows().await == 0
    })
    .await;
    let verdict = scene.audit(&written).await;
    assert!(verdict.is_clean(), "{verdict:?}");
    assert_eq!((verdict.delivered, verdict.duplicates), (3, 3), "each message delivered again, never lost");
}

/// LAN-1, DSP-7: a lane head is sent, then its delete never reaches the database. The pass
/// fails; the lane stays claimed until its claim lapses, and the next owner sends the same
/// head again — before any later head of the lane, so the lane's order holds even where a
/// message is delivered twice.
#[tokio::test]
async fn a_lost_lane_head_delete_replays_the_head_before_any_later_head_lan_1() {
    let scene = Scene::new().await;
    let written = scene.write_lane("customer-7", 3).await;
    let store = scene.faulty_source().await;
    let dispatcher = scene.dispatcher(store.clone(), Duration::from_secs(1));
    let lost = store.inject(Fault::fail_before(StoreCall::AcceptHead, Transience::Transient));

    let error = dispatcher.run_once().await.unwrap_err();
    assert!(error.is_transient(), "{}", error_chain(&error));
    assert_eq!(lost.strikes(), 1);
    assert_eq!(scene.outbox_rows().await, 3, "the head's delete was lost: every row is still owed");

    eventually("the lane drains once its claim lapsed", || async {
        dispatcher.run_once().await.unwrap();
        scene.outbox_rows().await == 0
    })
    .await;
    let ids: Vec<Uuid> = written.iter().map(|message| message.id).collect();
    assert_eq!(
        scene.delivered_in_order().await,
        vec![ids[0], ids[0], ids[1], ids[2]],
        "the head is replayed, and nothing behind it overtakes it"
    );
    let verdict = scene.audit(&written).await;
    assert!(verdict.is_clean(), "{verdict:?}");
}

/// SWP-4, DSP-7: the recovery sweeper's completion reaches the database, then its answer is
/// lost (the connection breaks on the reply). The pass fails; its transaction — the
/// completion's deletes included — is rolled back, so every row is still in the outbox, and
/// the next pass sends the page again and completes it.
#[tokio::test]
async fn a_sweep_whose_completion_is_lost_after_the_send_rolls_back_and_sends_the_page_again_swp_4() {
    let scene = Scene::new().await;
    let store = scene.faulty_source().await;
    let sweeper = scene.sweeper(store.clone(), "a", Duration::from_secs(30));
    // The lease exists and is ours before the window.
    assert!(sweeper.run_once(&mut store.open().await.unwrap()).await.unwrap().led);
    let written = scene.write(4).await;

    let lost = store.inject(Fault::fail_after(StoreCall::CompleteLocked, Transience::Transient));
    let mut session = store.open().await.unwrap();
    let error = sweeper.run_once(&mut session).await.unwrap_err();
    drop(session);
    assert!(error.is_transient(), "{}", error_chain(&error));
    assert_eq!(lost.strikes(), 1);
    assert_eq!(scene.audit(&written).await.delivered, 4, "the page was sent before its completion was lost");
    assert_eq!(scene.outbox_rows().await, 4, "the completion was rolled back with its pass");

    let report = sweeper.run_once(&mut store.open().await.unwrap()).await.unwrap();
    assert_eq!((report.led, report.sent), (true, 4), "{report}");
    assert_eq!(scene.outbox_rows().await, 0);
    let verdict = scene.audit(&written).await;
    assert!(verdict.is_clean(), "{verdict:?}");
    assert_eq!(verdict.duplicates, 4, "the lost completion cost one more delivery each, nothing else");
}

/// SWP-4, RES-1: the sweeper's connection dies right after its page was read and locked,
/// before the send. The pass does not know yet: it sends the page, then its completion
/// finds the connection gone and the pass fails. The server rolled the transaction back
/// when the connection closed, releasing the row locks and the lease row: the rows are
/// pending again, untouched, and a later pass recovers them.
#[tokio::test]
async fn a_connection_killed_between_the_lock_and_the_send_rolls_the_page_back_for_a_later_pass_swp_4() {
    let scene = Scene::new().await;
    let store = scene.faulty_source().await;
    let sweeper = scene.sweeper(store.clone(), "a", Duration::from_secs(30));
    assert!(sweeper.run_once(&mut store.open().await.unwrap()).await.unwrap().led);
    let written = scene.write(5).await;

    let kill = store.inject(Fault::kill_after(StoreCall::LockRecoveryPage));
    let mut session = store.open().await.unwrap();
    let error = sweeper.run_once(&mut session).await.unwrap_err();
    assert!(session.is_killed());
    drop(session);
    assert!(error.is_transient(), "{}", error_chain(&error));
    assert_eq!(kill.strikes(), 1);
    assert_eq!(scene.audit(&written).await.delivered, 5, "the page was sent on a dead connection");

    eventually("a later pass recovers the rolled-back page", || async {
        sweeper.run_once(&mut store.open().await.unwrap()).await.unwrap();
        scene.outbox_rows().await == 0
    })
    .await;
    let verdict = scene.audit(&written).await;
    assert!(verdict.is_clean(), "{verdict:?}");
    assert_eq!(verdict.duplicates, 5, "each row sent again once");
    let attempts: i64 = scene
        .client
        .query_one(&format!("SELECT count(*) FROM {}", scene.db.namespace().table("dead")), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 0, "nothing was buried on the way");
}

/// TRN-5, LDR-2, LDR-6: the sweeper's lease renewal — the last statement of its pass — is
/// held past the lease. The pass never outlives its lease: it is rolled back at the limit,
/// so the completion it already wrote commits nothing and the lease row is free. Another
/// sweeper then leads with the next term and sends every row again; the old leader's next
/// pass is not leader.
#[tokio::test]
async fn a_renewal_held_past_the_lease_commits_nothing_and_another_sweeper_leads_ldr_6() {
    let scene = Scene::new().await;
    let lease = Duration::from_secs(1);
    let store = scene.faulty_source().await;
    let a = scene.sweeper(store.clone(), "a", lease);
    assert_eq!(a.run_once(&mut store.open().await.unwrap()).await.unwrap().term, Some(1));
    let written = scene.write(3).await;

    let held = store.inject(Fault::hold(StoreCall::Renew));
    let error = within(a.run_once(&mut store.open().await.unwrap())).await.unwrap_err();
    assert!(error.is_transient(), "{}", error_chain(&error));
    assert!(error_chain(&error).contains("outlived its lease"), "{}", error_chain(&error));
    assert_eq!(held.strikes(), 1, "the renewal was held");
    assert_eq!(scene.audit(&written).await.delivered, 3, "the page was sent");
    assert_eq!(scene.outbox_rows().await, 3, "the pass completed nothing under a lease it could not renew");

    let b_store = scene.faulty_source().await;
    let b = scene.sweeper(b_store.clone(), "b", Duration::from_secs(30));
    let takeover = Mutex::new(None);
    eventually("another sweeper leads once the lease lapsed", || async {
        let report = b.run_once(&mut b_store.open().await.unwrap()).await.unwrap();
        let led = report.led;
        *takeover.lock().unwrap() = Some(report);
        led
    })
    .await;
    let takeover = takeover.into_inner().unwrap().unwrap();
    assert_eq!((takeover.term, takeover.sent), (Some(2), 3), "{takeover}");
    held.release();
    assert!(!a.run_once(&mut store.open().await.unwrap()).await.unwrap().led, "the old leader is deposed");
    assert_eq!(scene.lease(SWEEPER_JOB).await, ("b".to_owned(), 2));
    assert_eq!(scene.outbox_rows().await, 0);
    let verdict = scene.audit(&written).await;
    assert!(verdict.is_clean(), "{verdict:?}");
    assert_eq!(verdict.duplicates, 3);
}

/// LDR-2, LDR-6, RET-4: cleanup's first batch is held until its one-second lease has lapsed
/// and another cleaner took the lease over (term 2). When the held batch reaches the
/// database it is fenced by its stale term: it deletes nothing, the pass ends with
/// `lease_lost`, and the new leader keeps the lease. (The new leader keeps every table, so
/// any row gone would be the deposed leader's doing.)
#[tokio::test]
async fn a_cleanup_batch_held_past_the_lease_deletes_nothing_and_the_new_leader_keeps_it_ldr_6() {
    let scene = Scene::new().await;
    let dead = scene.db.namespace().table("dead");
    scene
        .client
        .execute(
            &format!(
                "INSERT INTO {dead} (seq, message_id, transport, destination, body, created_at, failed_at, attempts) \
                 SELECT n, gen_random_uuid(), 'queue', 'orders', '\\x00', now() - interval '41 days', \
                        now() - interval '40 days', 3 FROM generate_series(1, 25) AS n"
            ),
            &[],
        )
        .await
        .unwrap();
    let cleaning = |lease: Duration, retention: Retention| {
        CleanupOptions::builder()
            .batch_size(10)
            .dead_retention(retention)
            .inbox_retention(retention)
            .cleanup_interval(Duration::from_millis(100))
            .lease_duration(lease)
            .build()
            .unwrap()
    };
    let namespace = scene.db.namespace().clone();
    let (one_second, a_day) = (Duration::from_secs(1), Retention::After(Duration::from_secs(86_400)));
    let a_store = scene.faulty_source().await;
    let a = Cleanup::new(
        a_store.clone(),
        namespace.clone(),
        cleaning(one_second, a_day),
        Leadership::lease(CLEANUP_JOB, "a", one_second),
    );
    let held = a_store.inject(Fault::hold(StoreCall::DeleteExpired));
    let mut a_session = a_store.open().await.unwrap();
    let pass_a = tokio::spawn(async move { a.run_once(&mut a_session).await });
    within(held.struck(1)).await;
    assert_eq!(scene.lease(CLEANUP_JOB).await, ("a".to_owned(), 1));

    let thirty = Duration::from_secs(30);
    let b_store = scene.faulty_source().await;
    let b = Cleanup::new(
        b_store.clone(),
        namespace,
        cleaning(thirty, Retention::Keep),
        Leadership::lease(CLEANUP_JOB, "b", thirty),
    );
    eventually("another cleaner leads once A's lease lapsed", || async {
        b.run_once(&mut b_store.open().await.unwrap()).await.unwrap().led
    })
    .await;
    assert_eq!(scene.lease(CLEANUP_JOB).await, ("b".to_owned(), 2));

    held.release();
    let report = within(pass_a).await.unwrap().unwrap();
    assert!(report.led && report.lease_lost, "{report:?}");
    assert_eq!(report.dead_deleted, 0, "{report:?}");
    let left: i64 =
        scene.client.query_one(&format!("SELECT count(*) FROM {dead}"), &[]).await.unwrap().get(0);
    assert_eq!(left, 25, "the deposed leader's late batch deleted nothing");
    assert_eq!(scene.lease(CLEANUP_JOB).await, ("b".to_owned(), 2), "the new leader keeps the lease");
}
