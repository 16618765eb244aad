//! SIGKILL at scale (§15, §16, DSP-7, SWP-4, LAN-1, LAN-3, LIF-3): relayer hosts — a
//! dispatcher and the recovery sweeper, started through the facade's builder in child
//! processes (`relayer-chaos-host`) — are killed with SIGKILL at random points, two at a
//! time, while the test keeps committing unordered and lane messages through the writer.
//! Every fifth child is killed as a lane owner in the middle of a send: after relayer's
//! PostgreSQL queue accepted the lane head, before the head was deleted. A last child
//! drains the outbox. Then every committed message is in the queue at least once, each
//! lane's first deliveries are in seq order, and the held heads were delivered again.
//!
//! `RELAYER_CHAOS_KILLS` sets the number of kills (default [`DEFAULT_KILLS`], small enough for
//! CI); `cargo xtask chaos --kills N` runs the full count. `RELAYER_CHAOS_SEED` replays the
//! kill points of a printed seed.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use relayer::postgres::OutboxWriter;
use relayer::{Namespace, NewMessage};
use relayer_scenarios::host_process::{self, HOLD, PREFIX, SCHEMA, URL};
use relayer_scenarios::scale::{KILLS_VARIABLE, count_from_env};
use relayer_scenarios::{Rng, Written, audit, outbox_rows, read_deliveries};
use relayer_test_support::{TestDb, eventually};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Kills when `RELAYER_CHAOS_KILLS` is not set: a CI run of a few seconds.
const DEFAULT_KILLS: u32 = 24;
/// Children alive at once: replicas of one namespace, each killed on its own schedule.
const SLOTS: usize = 2;
/// Every this many kills, the child holds its first accepted lane send and is killed there.
const HOLD_EVERY: u32 = 5;
/// Lane keys the writers spread their ordered messages over.
const LANES: u64 = 8;
/// How long a holding child may take to report a held send before it is killed anyway.
const HOLD_PATIENCE: Duration = Duration::from_secs(20);

/// What a child needs to find the test's namespace.
#[derive(Clone)]
struct ChildEnv {
    url: String,
    namespace: Namespace,
}

impl ChildEnv {
    fn spawn(&self, hold: bool) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_relayer-chaos-host"));
        command
            .env(URL, &self.url)
            .env(SCHEMA, self.namespace.schema())
            .env(PREFIX, self.namespace.prefix())
            .stdin(Stdio::null())
            .stdout(if hold { Stdio::piped() } else { Stdio::null() })
            .kill_on_drop(true);
        if hold {
            command.env(HOLD, "1");
        }
        command.spawn().unwrap()
    }
}

/// What the kill slots did.
#[derive(Default)]
struct Kills {
    done: AtomicU32,
    /// Lane heads whose owner was killed after the queue accepted them, before their delete.
    held: Mutex<Vec<Uuid>>,
    lane_owners_killed: AtomicU32,
}

/// One slot: spawn a child, kill it at a random point (or, on a hold turn, right after its
/// held lane send), again and again until `wanted` kills are done across the slots.
async fn kill_slot(
    env: ChildEnv,
    wanted: u32,
    next: Arc<AtomicU32>,
    kills: Arc<Kills>,
    rng: Arc<Mutex<Rng>>,
) {
    loop {
        let turn = next.fetch_add(1, Ordering::SeqCst);
        if turn >= wanted {
            return;
        }
        let hold = turn % HOLD_EVERY == HOLD_EVERY - 1;
        let mut child = env.spawn(hold);
        if hold {
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let held = tokio::time::timeout(HOLD_PATIENCE, async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(ids) = host_process::parse_held(&line) {
                        return Some(ids);
                    }
                }
                None
            })
            .await
            .ok()
            .flatten();
            if let Some(ids) = held {
                kills.held.lock().unwrap().extend(ids);
                kills.lane_owners_killed.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            let delay = rng.lock().unwrap().millis(50, 800);
            tokio::time::sleep(delay).await;
        }
        child.kill().await.unwrap(); // SIGKILL, then reaped
        kills.done.fetch_add(1, Ordering::SeqCst);
    }
}

/// Commits batches of two unordered and two lane messages until cancelled, recording what
/// each commit wrote.
async fn write_until(
    db: &TestDb,
    writer_index: u64,
    written: Arc<Mutex<Vec<Written>>>,
    stop: CancellationToken,
) {
    let writer = OutboxWriter::new(db.namespace(), ["queue"]);
    let mut client = db.connect().await;
    let mut n = writer_index;
    while !stop.is_cancelled() {
        let lanes = [format!("lane-{}", n % LANES), format!("lane-{}", (n + 3) % LANES)];
        let batch = vec![
            NewMessage::new("queue", format!("d{}", n % 4), format!("w{writer_index} u{n}").into_bytes()),
            NewMessage::new("queue", lanes[0].clone(), format!("w{writer_index} l{n}").into_bytes())
                .lane(lanes[0].clone()),
            NewMessage::new(
                "queue",
                format!("d{}", (n + 1) % 4),
                format!("w{writer_index} v{n}").into_bytes(),
            ),
            NewMessage::new("queue", lanes[1].clone(), format!("w{writer_index} m{n}").into_bytes())
                .lane(lanes[1].clone()),
        ];
        let tx = client.transaction().await.unwrap();
        let rows = writer.enqueue(&tx, &batch).await.unwrap();
        tx.commit().await.unwrap();
        written.lock().unwrap().extend(Written::from_enqueued(&batch, &rows));
        n += 2;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// §15, DSP-7, SWP-4, LAN-1, LAN-3, LIF-3: hosts killed with SIGKILL at random points, lane
/// owners among them mid-send, lose no committed message and keep every lane in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // The figures are this scenario's report.
async fn sigkilled_hosts_lose_no_message_and_keep_lanes_in_order_swp_4_lan_1() {
    let started = Instant::now();
    let wanted = count_from_env(KILLS_VARIABLE, DEFAULT_KILLS);
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer::postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let env = ChildEnv { url: db.url(), namespace: db.namespace().clone() };
    let rng = Rng::from_env_or_clock();
    let seed = rng.seed();
    let rng = Arc::new(Mutex::new(rng));

    let written = Arc::new(Mutex::new(Vec::new()));
    let writing = CancellationToken::new();
    let writers =
        join_all((0..2).map(|index| write_until(&db, index, Arc::clone(&written), writing.clone())));
    let kills = Arc::new(Kills::default());
    let next = Arc::new(AtomicU32::new(0));
    let slots =
        join_all((0..SLOTS).map(|_| {
            kill_slot(env.clone(), wanted, Arc::clone(&next), Arc::clone(&kills), Arc::clone(&rng))
        }));
    let killing = async {
        slots.await;
        writing.cancel();
    };
    tokio::join!(writers, killing);
    let killed_at = started.elapsed();

    // A last host, never killed while it works, drains what the killed ones left.
    let mut last = env.spawn(false);
    eventually("the last host drained the outbox", || async {
        outbox_rows(&client, db.namespace()).await.unwrap() == 0
    })
    .await;
    last.kill().await.unwrap();

    let written = written.lock().unwrap().clone();
    let deliveries = read_deliveries(&client, db.namespace()).await.unwrap();
    let verdict = audit(&written, &deliveries);
    let held = kills.held.lock().unwrap().clone();
    let redelivered_held =
        held.iter().filter(|id| deliveries.iter().any(|d| d.id == **id && d.count >= 2)).count();
    // Each child is a new lease owner: the term counts sweepers that took over from a killed
    // one after its lease expired (LIF-3).
    let leases = db.namespace().table("leases");
    let sweeper_term: i64 = client
        .query_opt(&format!("SELECT term FROM {leases} WHERE job = 'sweeper'"), &[])
        .await
        .unwrap()
        .map_or(0, |row| row.get(0));
    println!(
        "chaos sigkill (seed {seed}): kills={} lane_owner_kills={} written={} lane_written={} delivered={} \
         lost={} duplicates={} duplicated_messages={} out_of_order={} sweeper_lease_term={sweeper_term} \
         killing={:.1}s total={:.1}s",
        kills.done.load(Ordering::SeqCst),
        kills.lane_owners_killed.load(Ordering::SeqCst),
        verdict.written,
        verdict.lane_written,
        verdict.delivered,
        verdict.lost.len(),
        verdict.duplicates,
        verdict.duplicated_messages,
        verdict.out_of_order.len(),
        killed_at.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );

    assert_eq!(kills.done.load(Ordering::SeqCst), wanted);
    assert!(verdict.written > 0 && verdict.lane_written > 0, "{verdict:?}");
    assert!(verdict.lost.is_empty(), "committed messages never delivered: {:?}", verdict.lost);
    assert!(
        verdict.unexpected.is_empty(),
        "deliveries of messages never committed: {:?}",
        verdict.unexpected
    );
    assert!(verdict.out_of_order.is_empty(), "lanes delivered out of order: {:?}", verdict.out_of_order);
    if wanted >= HOLD_EVERY {
        assert!(kills.lane_owners_killed.load(Ordering::SeqCst) >= 1, "no lane owner was killed mid-send");
    }
    // A head whose owner died after the send and before the delete is sent again: never
    // skipped, and its lane waited for it (checked above).
    assert_eq!(redelivered_held, held.len(), "held heads {held:?} were not all delivered again");
    if wanted >= 2 {
        assert!(sweeper_term >= 2, "no sweeper took the lease over from a killed one");
    }
}
