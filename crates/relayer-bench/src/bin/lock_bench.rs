//! `lock-bench`: how close `PgAdvisoryLock` comes to a raw advisory-lock loop.
//!
//! On one database, for D seconds each (10 s, or 3 s with `--quick`):
//!
//! - **raw**: one connection looping the prepared statements `SELECT pg_try_advisory_lock($1)`
//!   and `SELECT pg_advisory_unlock($1)`;
//! - **relayer**: `PgAdvisoryLock::try_lock` followed by `guard.release()`.
//!
//! It prints the acquire+release pairs per second of each, and as its last line
//! `RESULT lock_ratio=<x>`: relayer pairs/s ÷ raw pairs/s. The database comes from
//! `DATABASE_URL` (a URL or a `key=value` string), else
//! `host=127.0.0.1 user=postgres dbname=test`.
//!
//! # Method
//!
//! On a small, shared machine two back-to-back loops measure the machine as much as the code.
//! So the time is cut into rounds; each round opens a fresh raw connection and a fresh lock
//! (fresh server backends, which the OS places anew) and runs the two loops in alternating
//! batches of a few pairs, alternating which goes first. A round's rate for each loop is that
//! of its median batch (a batch stalled by a context switch does not decide it), and the
//! figures reported are medians over rounds (the plain means beside them); the ratio is the
//! geometric mean of the per-round ratios.
#![allow(clippy::print_stdout, reason = "a benchmark reports its figures on stdout")]

use std::error::Error;
use std::time::{Duration, Instant};

use relayer_advisory_lock::PgAdvisoryLock;
use relayer_core::{DistributedLock, advisory_lock_key};
use tokio_postgres::{Config, NoTls};

const DEFAULT_DATABASE: &str = "host=127.0.0.1 user=postgres dbname=test";

/// Acquire+release pairs per batch: short enough that paired batches see the same conditions.
const BATCH: u32 = 16;

/// Rounds per run (each gets D / ROUNDS seconds per loop).
const ROUNDS: u32 = 9;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut quick = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => quick = true,
            "-h" | "--help" => {
                println!("usage: lock-bench [--quick]   (DATABASE_URL selects the database)");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; usage: lock-bench [--quick]").into()),
        }
    }
    let duration = Duration::from_secs(if quick { 3 } else { 10 });
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE.to_owned());
    let mut config: Config = url.parse()?;
    config.application_name("relayer-lock-bench");

    // A resource of its own, so a concurrent run elsewhere on the server does not interfere.
    let resource = format!("lock-bench:{}", std::process::id());
    let key = advisory_lock_key(&resource);
    println!(
        "lock-bench: {} s per loop in {ROUNDS} rounds, batches of {BATCH} pairs, resource {resource:?} (key {key})",
        duration.as_secs()
    );

    let mut rounds = Vec::new();
    let (mut raw_all, mut relayer_all) = (Tally::default(), Tally::default());
    for n in 1..=ROUNDS {
        let round = round(&config, &resource, key, duration / ROUNDS).await?;
        println!(
            "round {n}: raw {:>6.0}  relayer {:>6.0} pairs/s  (ratio {:.2})",
            round.raw,
            round.relayer,
            round.relayer / round.raw
        );
        raw_all.add(round.raw_tally);
        relayer_all.add(round.relayer_tally);
        rounds.push(round);
    }
    let raw = median_f64(rounds.iter().map(|r| r.raw).collect());
    let relayer = median_f64(rounds.iter().map(|r| r.relayer).collect());
    // Which of the two sessions lands on the quiet core differs from round to round and
    // swings a round's ratio both ways (0.3 one round, 3 the next): the geometric mean of
    // the per-round ratios lets those draws cancel, where a median would pick one side.
    #[allow(clippy::cast_precision_loss)]
    let ratio = (rounds.iter().map(|r| (r.relayer / r.raw).ln()).sum::<f64>() / rounds.len() as f64).exp();

    println!(
        "raw:     {raw:>8.0} pairs/s (mean {:>6.0})  pg_try_advisory_lock + pg_advisory_unlock, prepared",
        raw_all.per_second()
    );
    println!(
        "relayer: {relayer:>8.0} pairs/s (mean {:>6.0})  PgAdvisoryLock::try_lock + guard.release",
        relayer_all.per_second()
    );
    println!("RESULT lock_ratio={ratio:.2}");
    Ok(())
}

/// One round's figures: pairs/s of the median batch of each loop, and the plain totals.
struct Round {
    raw: f64,
    relayer: f64,
    raw_tally: Tally,
    relayer_tally: Tally,
}

/// Runs one round of `length` per loop on a fresh connection and a fresh lock.
async fn round(config: &Config, resource: &str, key: i64, length: Duration) -> Result<Round, Box<dyn Error>> {
    let raw = RawLoop::open(config, key).await?;
    let relayer = PgAdvisoryLock::new(config.clone());
    // Warm up both: the relayer's first acquire opens and prepares its session.
    raw.run(BATCH).await?;
    relayer_batch(&relayer, resource, BATCH).await?;

    let (mut raw_times, mut relayer_times) = (Vec::new(), Vec::new());
    let (mut raw_tally, mut relayer_tally) = (Tally::default(), Tally::default());
    while raw_tally.elapsed < length || relayer_tally.elapsed < length {
        // Alternate which loop goes first, so neither gains from its position in the pair.
        let (raw_time, relayer_time) = if raw_times.len() % 2 == 0 {
            let raw_time = raw.run(BATCH).await?;
            (raw_time, relayer_batch(&relayer, resource, BATCH).await?)
        } else {
            let relayer_time = relayer_batch(&relayer, resource, BATCH).await?;
            (raw.run(BATCH).await?, relayer_time)
        };
        raw_tally.add(Tally { pairs: BATCH.into(), elapsed: raw_time });
        relayer_tally.add(Tally { pairs: BATCH.into(), elapsed: relayer_time });
        raw_times.push(raw_time);
        relayer_times.push(relayer_time);
    }
    let rate = |time: Duration| f64::from(BATCH) / time.as_secs_f64();
    Ok(Round { raw: rate(median(raw_times)), relayer: rate(median(relayer_times)), raw_tally, relayer_tally })
}

/// Pairs done and the time they took.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    pairs: u64,
    elapsed: Duration,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.pairs += other.pairs;
        self.elapsed += other.elapsed;
    }

    #[allow(clippy::cast_precision_loss, reason = "a pair count fits f64's 53-bit mantissa")]
    fn per_second(self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64()
    }
}

/// The median of `times` (zero if empty).
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// The median of `values` (NaN if empty).
fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The baseline: one connection and two prepared statements.
struct RawLoop {
    client: tokio_postgres::Client,
    lock: tokio_postgres::Statement,
    unlock: tokio_postgres::Statement,
    key: i64,
}

impl RawLoop {
    async fn open(config: &Config, key: i64) -> Result<RawLoop, Box<dyn Error>> {
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(connection);
        let lock = client.prepare("SELECT pg_try_advisory_lock($1)").await?;
        let unlock = client.prepare("SELECT pg_advisory_unlock($1)").await?;
        Ok(RawLoop { client, lock, unlock, key })
    }

    async fn run(&self, pairs: u32) -> Result<Duration, Box<dyn Error>> {
        let start = Instant::now();
        for _ in 0..pairs {
            let taken: bool = self.client.query_one(&self.lock, &[&self.key]).await?.try_get(0)?;
            let freed: bool = self.client.query_one(&self.unlock, &[&self.key]).await?.try_get(0)?;
            if !(taken && freed) {
                return Err("raw loop: the bench resource is held by someone else".into());
            }
        }
        Ok(start.elapsed())
    }
}

/// A batch of `PgAdvisoryLock::try_lock` + `release` pairs.
async fn relayer_batch(
    lock: &PgAdvisoryLock,
    resource: &str,
    pairs: u32,
) -> Result<Duration, Box<dyn Error>> {
    let start = Instant::now();
    for _ in 0..pairs {
        let Some(guard) = lock.try_lock(resource).await? else {
            return Err("relayer loop: the bench resource is held by someone else".into());
        };
        guard.release().await?;
    }
    Ok(start.elapsed())
}
