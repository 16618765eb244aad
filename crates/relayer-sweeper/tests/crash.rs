//! The SIGKILL crash test (§15, §16, DSP-7, SWP-4, LIF-3): no committed message is lost
//! when the process dispatching and sweeping it is killed at random points.
//!
//! This test binary re-executes itself as a child process ([`crash_child`], selected by an
//! environment variable) running a [`Dispatcher`] (with LISTEN) and a [`Sweeper`] on the
//! test's namespace. Its transport records each delivery durably — an upsert into a
//! `delivered` table of the test schema, committed before the send reports `Accepted` —
//! so deliveries survive the kill. The parent keeps committing messages through
//! [`OutboxWriter`] and kills the child with SIGKILL after a random delay, over and over,
//! then lets a last child drain the outbox. Every committed message must have been
//! delivered at least once; duplicates are allowed (at least once) and reported.
#![allow(clippy::unwrap_used)] // In test helpers too, a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use relayer_core::{
    DispatcherOptions, Envelope, Namespace, NewMessage, SendOutcome, SweeperOptions, Transport,
    TransportError, TransportRegistry, Uuid, async_trait,
};
use relayer_delivery::SendPath;
use relayer_dispatcher::{Dispatcher, asynchronous_commit};
use relayer_postgres::{OutboxWriter, PgPool, connect_pool};
use relayer_sweeper::Sweeper;
use relayer_test_support::TestDb;
use tokio_util::sync::CancellationToken;

/// Selects child mode and carries the database URL; the schema travels in [`CHILD_SCHEMA`].
const CHILD_URL: &str = "RELAYER_SWEEPER_CRASH_CHILD_URL";
const CHILD_SCHEMA: &str = "RELAYER_SWEEPER_CRASH_CHILD_SCHEMA";
const PREFIX: &str = "relayer_";
const KILLS: u32 = 24;

/// Records deliveries durably in `"{schema}".delivered`, one row per message id with the
/// number of times it was delivered.
struct DurableTransport {
    pool: PgPool,
    upsert: String,
}

#[async_trait]
impl Transport for DurableTransport {
    fn name(&self) -> &str {
        "durable"
    }

    fn batch_limit(&self) -> NonZeroUsize {
        NonZeroUsize::new(20).unwrap()
    }

    async fn send(&self, _destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let ids: Vec<Uuid> = batch.iter().map(|envelope| *envelope.id.as_uuid()).collect();
        let conn = self.pool.get().await.map_err(|e| TransportError::transient(e.to_string()))?;
        // Autocommit with synchronous commit: durable before `Accepted` is returned.
        conn.execute(&self.upsert, &[&ids]).await.map_err(|e| TransportError::transient(e.to_string()))?;
        Ok(vec![SendOutcome::Accepted; batch.len()])
    }
}

/// The child: a dispatcher and a sweeper on the parent's namespace, until it is killed.
#[test]
#[ignore = "the child process of the SIGKILL crash test; it runs only when that test starts it"]
fn crash_child() {
    let (Ok(url), Ok(schema)) = (std::env::var(CHILD_URL), std::env::var(CHILD_SCHEMA)) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let namespace = Namespace::new(schema.as_str(), PREFIX).unwrap();
        let transport = DurableTransport {
            pool: connect_pool(config.clone(), 2).await.unwrap(),
            upsert: format!(
                "INSERT INTO \"{schema}\".delivered (message_id, n) SELECT id, 1 FROM unnest($1::uuid[]) AS id \
                 ON CONFLICT (message_id) DO UPDATE SET n = delivered.n + 1"
            ),
        };
        let transports = Arc::new(TransportRegistry::new().with(Arc::new(transport)).unwrap());
        let dispatch_options = DispatcherOptions::builder()
            .batch_size(20)
            .claim_duration(Duration::from_secs(1))
            .retry_base(Duration::from_millis(50))
            .retry_max(Duration::from_millis(200))
            .poll_interval(Duration::from_millis(200))
            .max_backoff(Duration::from_millis(500))
            .build()
            .unwrap();
        let dispatch_pool = connect_pool(asynchronous_commit(config.clone()), 2).await.unwrap();
        let dispatcher =
            Dispatcher::new(dispatch_pool, namespace.clone(), dispatch_options.clone(), transports.clone())
                .unwrap()
                .listening(config.clone());
        let sweeper_options = SweeperOptions::builder()
            .batch_size(50)
            .recovery_delay(Duration::ZERO)
            .sweep_interval(Duration::from_millis(200))
            .lease_duration(Duration::from_secs(1))
            .claim_duration(Duration::from_secs(1))
            .max_backoff(Duration::from_secs(1))
            .build()
            .unwrap();
        let leadership = Sweeper::lease_leadership(&sweeper_options);
        let sweeper = Sweeper::new(
            connect_pool(config, 1).await.unwrap(),
            namespace,
            sweeper_options,
            SendPath::new(transports, dispatch_options),
            leadership,
        );
        let shutdown = CancellationToken::new();
        let (dispatched, swept) = tokio::join!(dispatcher.run(shutdown.clone()), sweeper.run(shutdown));
        dispatched.unwrap();
        swept.unwrap();
    });
}

fn spawn_child(db: &TestDb) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, db.url())
        .env(CHILD_SCHEMA, db.schema())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// SIGKILL (`Child::kill` on unix), then reap.
fn kill(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A small xorshift generator: random enough for kill points, and its seed is printed.
struct Rng(u64);

impl Rng {
    fn next_in(&mut self, low: u64, high: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        low + self.0 % (high - low)
    }
}

/// §15, DSP-7, SWP-4, LIF-3: processes dispatching and sweeping the outbox are killed with
/// SIGKILL at random points while messages keep being committed; a last process drains the
/// outbox; every committed message was delivered at least once. Duplicates are reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)] // The duplicate and kill counts are this test's report.
async fn sigkilled_dispatchers_and_sweepers_lose_no_committed_message() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    relayer_postgres::migrate(&mut client, db.namespace()).await.unwrap();
    let delivered = format!("\"{}\".delivered", db.schema());
    client
        .batch_execute(&format!("CREATE TABLE {delivered} (message_id uuid PRIMARY KEY, n int NOT NULL)"))
        .await
        .unwrap();

    // The parent keeps committing messages through the writer.
    let committed = Arc::new(Mutex::new(Vec::<Uuid>::new()));
    let enqueuing = CancellationToken::new();
    let enqueuer = tokio::spawn({
        let (committed, enqueuing) = (committed.clone(), enqueuing.clone());
        let writer = OutboxWriter::new(db.namespace(), ["durable"]);
        let mut client = db.connect().await;
        async move {
            let mut n = 0u64;
            while !enqueuing.is_cancelled() {
                let batch: Vec<NewMessage> = (0..3)
                    .map(|i| {
                        NewMessage::new(
                            "durable",
                            format!("d{}", (n + i) % 4),
                            format!("m{}", n + i).into_bytes(),
                        )
                    })
                    .collect();
                let tx = client.transaction().await.unwrap();
                let written = writer.enqueue(&tx, &batch).await.unwrap();
                tx.commit().await.unwrap();
                committed.lock().unwrap().extend(written.iter().map(|w| *w.id.as_uuid()));
                n += 3;
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        }
    });

    let since_epoch = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let seed = (since_epoch.as_secs() << 30 ^ u64::from(since_epoch.subsec_nanos())) | 1;
    let mut rng = Rng(seed);
    let mut kills = 0;
    for _ in 0..KILLS {
        let child = spawn_child(&db);
        tokio::time::sleep(Duration::from_millis(rng.next_in(50, 700))).await;
        kill(child);
        kills += 1;
    }
    enqueuing.cancel();
    enqueuer.await.unwrap();
    let committed: BTreeSet<Uuid> = committed.lock().unwrap().iter().copied().collect();

    // A last child, never killed while it works, drains what the killed ones left.
    let last = spawn_child(&db);
    let outbox = db.namespace().table("outbox");
    let mut drained = false;
    for _ in 0..1200 {
        let left: i64 =
            client.query_one(&format!("SELECT count(*) FROM {outbox}"), &[]).await.unwrap().get(0);
        if left == 0 {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill(last);
    assert!(drained, "the outbox never drained");

    // Each child is a new lease owner: the term counts how often a sweeper took over from a
    // killed one after its lease expired (LIF-3).
    let sweeper_term: i64 = client
        .query_one(&format!("SELECT term FROM {} WHERE job = 'sweeper'", db.namespace().table("leases")), &[])
        .await
        .unwrap()
        .get(0);
    let rows = client
        .query(&format!("SELECT message_id, n FROM {delivered} ORDER BY message_id"), &[])
        .await
        .unwrap();
    let delivered: BTreeSet<Uuid> = rows.iter().map(|row| row.get(0)).collect();
    let lost: Vec<&Uuid> = committed.difference(&delivered).collect();
    let duplicates: Vec<(Uuid, i32)> =
        rows.iter().map(|row| (row.get(0), row.get(1))).filter(|(_, n): &(Uuid, i32)| *n > 1).collect();
    let extra_sends: i32 = duplicates.iter().map(|(_, n)| n - 1).sum();
    println!(
        "crash test (seed {seed}): {kills} SIGKILLs, {} messages committed, {} delivered, {} lost, \
         {} messages delivered more than once ({extra_sends} extra deliveries), sweeper lease term {sweeper_term}",
        committed.len(),
        delivered.len(),
        lost.len(),
        duplicates.len()
    );
    for (id, n) in &duplicates {
        println!("  duplicate: {id} delivered {n} times");
    }
    assert!(kills >= 20);
    assert!(sweeper_term >= 2, "sweepers of later children took over the lease");
    assert!(!committed.is_empty());
    assert!(lost.is_empty(), "committed messages never delivered: {lost:?}");
    assert!(delivered.is_subset(&committed), "a delivery of a message never committed");
}
