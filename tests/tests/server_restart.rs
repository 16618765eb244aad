//! Server restart (§15, §16, RES-1, RES-2, LDR-4, LAN-1b, DSP-7a): PostgreSQL — a cluster
//! this test owns, never the shared server — is stopped in immediate mode (as in a crash)
//! and started again while writers commit unordered and lane messages, one host runs a
//! dispatcher, another runs the recovery sweeper (lease) and cleanup (advisory lock), and a
//! task holds an advisory lock of its own through `relayer-advisory-lock`.
//!
//! After each restart every worker must work again, with no process restart: the
//! dispatcher delivers a lane message written after the restart (only a dispatcher sends
//! lane rows, LAN-4), the sweeper renews its lease, cleanup re-takes its advisory lock and
//! deletes an expired inbox row, and the lock holder sees its lock lost and takes it again.
//! At the end nothing committed is lost and every lane kept its order.
//!
//! A commit whose reply was lost in the crash is ambiguous: it may or may not have happened.
//! Such ids may be delivered or not; every id whose commit was acknowledged must be.
//!
//! `RELAYER_CHAOS_RESTARTS` sets the number of restarts (default [`DEFAULT_RESTARTS`]);
//! `cargo xtask chaos --restarts N` runs more.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::join_all;
use relayer::advisory_lock::PgAdvisoryLock;
use relayer::postgres::{OutboxWriter, connect_pool};
use relayer::{
    CleanupOptions, DispatcherOptions, DistributedLock, LeaderElection, Led, LockGuard, Namespace,
    NewMessage, Relayer, RelayerHost, Retention, SweeperOptions,
};
use relayer_scenarios::scale::{RESTARTS_VARIABLE, count_from_env};
use relayer_scenarios::{QueueProbe, Rng, Written, audit, outbox_rows, read_deliveries};
use relayer_test_support::{OwnedCluster, TestDb, eventually, within};
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Restarts when `RELAYER_CHAOS_RESTARTS` is not set.
const DEFAULT_RESTARTS: u32 = 1;
/// How often the lock holder checks or tries its lock.
const HOLDER_TICK: Duration = Duration::from_millis(100);

/// A connection that may fail (the server may be down), its driver on a spawned task.
async fn connect(db: &TestDb) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = db.config().connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A connection once the server answers again.
async fn reconnect(db: &TestDb) -> Client {
    within(async {
        loop {
            if let Ok(client) = connect(db).await {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// What the writers know about their commits.
#[derive(Default)]
struct Commits {
    /// Acknowledged commits: each of these must be delivered.
    committed: Mutex<Vec<Written>>,
    /// Messages whose commit got no answer: they may exist or not.
    ambiguous: Mutex<HashSet<Uuid>>,
}

/// Commits batches of unordered and lane messages until cancelled, through connections
/// that it opens again whenever the server drops them.
async fn write_until(
    db: &TestDb,
    writer: OutboxWriter,
    index: u64,
    commits: Arc<Commits>,
    stop: CancellationToken,
) {
    let mut n = index;
    'connection: while !stop.is_cancelled() {
        let Ok(mut client) = connect(db).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !stop.is_cancelled() {
            let lane = format!("lane-{}", n % 6);
            let batch = vec![
                NewMessage::new("queue", format!("d{}", n % 3), format!("w{index} u{n}").into_bytes()),
                NewMessage::new("queue", lane.clone(), format!("w{index} l{n}").into_bytes()).lane(lane),
            ];
            n += 2;
            let Ok(tx) = client.transaction().await else { continue 'connection };
            let Ok(rows) = writer.enqueue(&tx, &batch).await else { continue 'connection };
            let written = Written::from_enqueued(&batch, &rows);
            match tx.commit().await {
                Ok(()) => commits.committed.lock().unwrap().extend(written),
                Err(_) => {
                    commits.ambiguous.lock().unwrap().extend(written.iter().map(|w| w.id));
                    continue 'connection;
                }
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
}

/// Holds `resource` whenever it can: checks the held lock every tick and drops it when the
/// check fails, tries again when not holding it. Counts takes and losses.
async fn hold_lock(
    lock: PgAdvisoryLock,
    resource: String,
    counts: Arc<HolderCounts>,
    stop: CancellationToken,
) {
    let mut guard: Option<Box<dyn LockGuard>> = None;
    while !stop.is_cancelled() {
        match guard.as_mut() {
            Some(held) => {
                if held.ensure_held().await.is_err() {
                    guard = None;
                    counts.lost.fetch_add(1, Ordering::SeqCst);
                }
            }
            None => {
                if let Ok(Some(taken)) = lock.try_lock(&resource).await {
                    guard = Some(taken);
                    counts.taken.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        tokio::time::sleep(HOLDER_TICK).await;
    }
    if let Some(guard) = guard {
        let _ = guard.release().await;
    }
}

#[derive(Default)]
struct HolderCounts {
    taken: AtomicU32,
    lost: AtomicU32,
}

/// Whether a session holds the advisory lock of `resource` (LDR-3's key, as `pg_locks`
/// shows it).
async fn lock_is_held(client: &Client, resource: &str) -> bool {
    let key = relayer::core::advisory_lock_key(resource);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
             AND ((classid::int8 << 32) | objid::int8) = $1",
            &[&key],
        )
        .await
        .unwrap();
    row.get::<_, i64>(0) == 1
}

/// The hosts and what the test watches them by.
struct Workers {
    dispatching: RelayerHost,
    maintaining: RelayerHost,
    dispatched: Arc<AtomicU64>,
    cleanup_lock: String,
}

async fn start_hosts(db: &TestDb) -> Workers {
    let ms = Duration::from_millis;
    let namespace: &Namespace = db.namespace();
    let dispatching_queue = QueueProbe::new(connect_pool(db.config(), 2).await.unwrap(), namespace);
    let dispatched = dispatching_queue.accepted();
    let dispatching = Relayer::builder(db.config(), namespace.clone())
        .instance_id("restart/dispatching")
        .transport(Arc::new(dispatching_queue))
        .dispatcher(
            DispatcherOptions::builder()
                .batch_size(50)
                .claim_duration(Duration::from_secs(2))
                .retry_base(ms(50))
                .retry_max(ms(500))
                .poll_interval(ms(100))
                .max_backoff(Duration::from_secs(1))
                .build()
                .unwrap(),
        )
        .start()
        .await
        .unwrap();
    // The sweeper and cleanup on another host: what the sweeper sends is its own, so the
    // dispatcher's deliveries are told apart from recovery.
    let maintaining_queue = QueueProbe::new(connect_pool(db.config(), 2).await.unwrap(), namespace);
    let maintaining = Relayer::builder(db.config(), namespace.clone())
        .instance_id("restart/maintaining")
        .transport(Arc::new(maintaining_queue))
        .sweeper(
            SweeperOptions::builder()
                .batch_size(50)
                .recovery_delay(Duration::from_secs(1))
                .sweep_interval(ms(200))
                .lease_duration(Duration::from_secs(2))
                .max_backoff(Duration::from_secs(1))
                .build()
                .unwrap(),
        )
        .cleanup(Led::new(
            CleanupOptions::builder()
                .cleanup_interval(ms(200))
                .inbox_retention(Retention::After(Duration::from_secs(3600)))
                .dead_retention(Retention::After(Duration::from_secs(3600)))
                .lease_duration(Duration::from_secs(5))
                .pass_budget(Duration::from_secs(1))
                .max_backoff(Duration::from_secs(1))
                .build()
                .unwrap(),
            LeaderElection::AdvisoryLock,
        ))
        .start()
        .await
        .unwrap();
    // The facade's advisory-lock leadership locks `{job}:{schema}.{prefix}`.
    let cleanup_lock =
        format!("{}:{}.{}", relayer::cleanup::LEASE_JOB, namespace.schema(), namespace.prefix());
    Workers { dispatching, maintaining, dispatched, cleanup_lock }
}

/// A cluster of the test's own with a migrated schema, both hosts and the lock holder
/// running. Fields drop in order: hosts before the schema, the schema before the cluster.
struct Scene {
    workers: Workers,
    holder_resource: String,
    holder_counts: Arc<HolderCounts>,
    holder: tokio::task::JoinHandle<()>,
    /// Stops the lock holder (and the writers of a test that runs some).
    stop: CancellationToken,
    db: TestDb,
    cluster: OwnedCluster,
}

impl Scene {
    async fn set_up() -> Scene {
        let cluster = OwnedCluster::start().await;
        let db = cluster.test_db().await;
        relayer::postgres::migrate(&mut db.connect().await, db.namespace()).await.unwrap();
        let workers = start_hosts(&db).await;
        let holder_resource = format!("restart-holder:{}", db.schema());
        let holder_counts = Arc::new(HolderCounts::default());
        let stop = CancellationToken::new();
        let holder = tokio::spawn(hold_lock(
            PgAdvisoryLock::new(db.config()),
            holder_resource.clone(),
            Arc::clone(&holder_counts),
            stop.clone(),
        ));
        Scene { workers, holder_resource, holder_counts, holder, stop, db, cluster }
    }

    /// Brings the server back and returns a connection, the server's clock and the moment
    /// it answered.
    async fn start_again(&self) -> (Client, SystemTime, Instant) {
        self.cluster.start_again().await;
        let back = Instant::now();
        let client = reconnect(&self.db).await;
        let since: SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
        (client, since, back)
    }

    /// Stops the lock holder and shuts both hosts down (LIF-1); returns the schema and the
    /// cluster for the final checks.
    async fn tear_down(self) -> (TestDb, OwnedCluster) {
        self.stop.cancel();
        within(self.holder).await.unwrap();
        within(self.workers.dispatching.shutdown()).await;
        within(self.workers.maintaining.shutdown()).await;
        (self.db, self.cluster)
    }
}

/// How long each worker took to be seen working again after the server came back.
#[derive(Debug, Default)]
struct Resumed {
    dispatcher: Duration,
    sweeper: Duration,
    cleanup: Duration,
    lock_holder: Duration,
}

/// Waits until every worker has been seen working since the server answered at `since`
/// (its clock), and says how long each took from `back`.
async fn every_worker_works(
    scene: &Scene,
    client: &mut Client,
    taken_before: u32,
    commits: &Commits,
    since: SystemTime,
    back: Instant,
) -> Resumed {
    let (namespace, workers) = (scene.db.namespace(), &scene.workers);
    let mut resumed = Resumed::default();

    // The dispatcher: a lane message written now is delivered (LAN-4: the sweeper never
    // sends lane rows), and the dispatching host's transport counted it.
    let before = workers.dispatched.load(Ordering::SeqCst);
    let probe = NewMessage::new("queue", "probe", b"after restart".to_vec()).lane("probe");
    let probe_id = *probe.message_id().as_uuid();
    let tx = client.transaction().await.unwrap();
    let rows = workers.dispatching.writer().enqueue(&tx, &[probe]).await.unwrap();
    tx.commit().await.unwrap();
    let seq = rows[0].seq;
    commits.committed.lock().unwrap().push(Written { id: probe_id, seq, lane: Some("probe".to_owned()) });
    let queue = namespace.table("queue");
    eventually("the dispatcher delivers a lane message written after the restart", || async {
        let found: i64 = client
            .query_one(&format!("SELECT count(*) FROM {queue} WHERE message_id = $1"), &[&probe_id])
            .await
            .unwrap()
            .get(0);
        found > 0 && workers.dispatched.load(Ordering::SeqCst) > before
    })
    .await;
    resumed.dispatcher = back.elapsed();

    // The sweeper: a pass committed its lease renewal after the restart.
    let leases = namespace.table("leases");
    eventually("the sweeper renews its lease after the restart", || async {
        client
            .query_opt(
                &format!("SELECT 1 FROM {leases} WHERE job = 'sweeper' AND renewed_at > $1"),
                &[&since],
            )
            .await
            .unwrap()
            .is_some()
    })
    .await;
    resumed.sweeper = back.elapsed();

    // Cleanup: it holds its advisory lock again and deletes an inbox row past retention
    // (written by hand: only its old timestamp cannot come from relayer's own components).
    let inbox = namespace.table("inbox");
    let expired = Uuid::new_v4();
    client
        .execute(
            &format!(
                "INSERT INTO {inbox} (consumer, message_id, processed_at) VALUES ('restart', $1, now() - interval '1 day')"
            ),
            &[&expired],
        )
        .await
        .unwrap();
    eventually("cleanup re-takes its advisory lock and deletes an expired inbox row", || async {
        let left: i64 = client
            .query_one(&format!("SELECT count(*) FROM {inbox} WHERE message_id = $1"), &[&expired])
            .await
            .unwrap()
            .get(0);
        left == 0 && lock_is_held(client, &workers.cleanup_lock).await
    })
    .await;
    resumed.cleanup = back.elapsed();

    // The lock holder: it saw its lock lost with its session, and took it again (LDR-4).
    let (resource, counts) = (&scene.holder_resource, &scene.holder_counts);
    eventually("the lock holder takes its lock again", || async {
        counts.taken.load(Ordering::SeqCst) > taken_before && lock_is_held(client, resource).await
    })
    .await;
    resumed.lock_holder = back.elapsed();
    resumed
}

/// §15, RES-1, RES-2, LDR-4, LAN-1b: PostgreSQL stopped in immediate mode and started again
/// under load loses nothing committed, and every worker and lock holder resumes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // The figures are this scenario's report.
async fn an_immediate_server_restart_loses_nothing_committed_and_every_worker_resumes_res_1_ldr_4() {
    let started = Instant::now();
    let restarts = count_from_env(RESTARTS_VARIABLE, DEFAULT_RESTARTS);
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.seed();
    let scene = Scene::set_up().await;
    let mut client = scene.db.connect().await;
    let commits = Arc::new(Commits::default());
    let writers = join_all((0..2).map(|index| {
        let writer = scene.workers.dispatching.writer();
        write_until(&scene.db, writer, index, Arc::clone(&commits), scene.stop.clone())
    }));

    let restarting = async {
        // Everything works before the first restart.
        let since: SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
        every_worker_works(&scene, &mut client, 0, &commits, since, Instant::now()).await;
        let mut resumed = Vec::new();
        for _ in 0..restarts {
            // Let passes, sends and commits be in flight at a random point.
            tokio::time::sleep(rng.millis(100, 600)).await;
            let counts = &scene.holder_counts;
            let (taken, lost) = (counts.taken.load(Ordering::SeqCst), counts.lost.load(Ordering::SeqCst));
            scene.cluster.stop_immediately().await;
            // Down long enough for every worker to fail passes and back off (RES-2).
            tokio::time::sleep(rng.millis(300, 1500)).await;
            let (restarted, since, back) = scene.start_again().await;
            client = restarted;
            resumed.push(every_worker_works(&scene, &mut client, taken, &commits, since, back).await);
            assert!(counts.lost.load(Ordering::SeqCst) > lost, "the holder never saw its lock lost");
        }
        // The writers and the lock holder stop.
        scene.stop.cancel();
        resumed
    };
    let (_, resumed) = tokio::join!(writers, restarting);
    eventually("the workers drain the outbox", || async {
        outbox_rows(&client, scene.db.namespace()).await.unwrap() == 0
    })
    .await;
    let (taken, lost) =
        (scene.holder_counts.taken.load(Ordering::SeqCst), scene.holder_counts.lost.load(Ordering::SeqCst));
    let (db, _cluster) = scene.tear_down().await;

    let committed = commits.committed.lock().unwrap().clone();
    let ambiguous = commits.ambiguous.lock().unwrap().clone();
    let deliveries = read_deliveries(&client, db.namespace()).await.unwrap();
    let verdict = audit(&committed, &deliveries);
    let ambiguous_delivered = deliveries.iter().filter(|d| ambiguous.contains(&d.id)).count();
    let unexplained: Vec<&Uuid> = verdict.unexpected.iter().filter(|id| !ambiguous.contains(id)).collect();
    println!(
        "chaos restart (seed {seed}): restarts={restarts} committed={} lane_committed={} ambiguous={} \
         (delivered {ambiguous_delivered}) delivered={} lost={} duplicates={} out_of_order={} \
         holder_taken={} holder_lost={} total={:.1}s",
        verdict.written,
        verdict.lane_written,
        ambiguous.len(),
        verdict.delivered,
        verdict.lost.len(),
        verdict.duplicates,
        verdict.out_of_order.len(),
        taken,
        lost,
        started.elapsed().as_secs_f64(),
    );
    for (restart, times) in resumed.iter().enumerate() {
        println!("  restart {}: working again after {times:?}", restart + 1);
    }

    assert!(verdict.written > 0 && verdict.lane_written > 0, "{verdict:?}");
    assert!(verdict.lost.is_empty(), "acknowledged commits never delivered: {:?}", verdict.lost);
    // A delivery of an id without an acknowledged commit: only one whose reply the crash
    // swallowed.
    assert!(unexplained.is_empty(), "deliveries of messages never committed: {unexplained:?}");
    assert!(verdict.out_of_order.is_empty(), "lanes delivered out of order: {:?}", verdict.out_of_order);
}

/// Stops the server without yielding to the runtime: on a current-thread runtime, no task
/// spawned before this call runs until it has returned.
fn stop_without_yielding(cluster: &OwnedCluster) {
    std::thread::scope(|scope| {
        let stopping = scope.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(cluster.stop_immediately());
        });
        stopping.join().unwrap();
    });
}

/// RES-1 (issue 9, item 5): the server stops after the hosts started but before their
/// sweeper, cleanup and lock holder took a first step, so each meets it stopped — the
/// schema check at the start of their loop fails — and each must still work once the
/// server returns, with no process restart.
///
/// One thread: the hosts spawn their workers at the end of `start`, and nothing runs them
/// until this test yields, after the server is down.
#[tokio::test(flavor = "current_thread")]
async fn workers_whose_first_step_meets_a_stopped_server_resume_when_it_returns_res_1() {
    let mut rng = Rng::from_env_or_clock();
    let scene = Scene::set_up().await;
    stop_without_yielding(&scene.cluster);
    // The workers now take their first steps against the stopped server.
    tokio::time::sleep(rng.millis(300, 1500)).await;
    let (mut client, since, back) = scene.start_again().await;
    every_worker_works(&scene, &mut client, 0, &Commits::default(), since, back).await;
    scene.tear_down().await;
}
