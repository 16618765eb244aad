//! What every benchmark shares: its database (a migrated namespace in a scratch schema,
//! dropped at the end), plain connections, the message body and the writer count.

use std::time::{Duration, Instant};

use relayer_core::Namespace;
use relayer_postgres::migrate;
use tokio_postgres::NoTls;

/// Any benchmark failure, with its cause chain.
pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Concurrent writers in every throughput run.
pub(crate) const WRITERS: usize = 4;

/// The benchmark database: `DATABASE_URL`, else the local test server.
pub(crate) fn database_config() -> BenchResult<tokio_postgres::Config> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".to_owned());
    let mut config: tokio_postgres::Config = url.parse()?;
    // Unique to this process, so PostgreSQL's CPU can be summed over this run's backends
    // alone on a server other sessions share (see `cpu`).
    config.application_name(application_name());
    Ok(config)
}

/// This benchmark process's `application_name`: `relayer-bench-<pid>`.
pub(crate) fn application_name() -> String {
    format!("relayer-bench-{}", std::process::id())
}

/// A plain connection to the benchmark database, its driver spawned.
pub(crate) async fn connect(config: &tokio_postgres::Config) -> BenchResult<tokio_postgres::Client> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// A fresh migrated namespace in a random schema; [`Scratch::drop_schema`] removes it.
pub(crate) struct Scratch {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) namespace: Namespace,
}

impl Scratch {
    pub(crate) async fn new() -> BenchResult<Self> {
        Self::on(database_config()?).await
    }

    /// [`Scratch::new`] on the server of `config`.
    pub(crate) async fn on(config: tokio_postgres::Config) -> BenchResult<Self> {
        let schema = format!("bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let namespace = Namespace::new(schema, "relayer_")?;
        let mut client = connect(&config).await?;
        migrate(&mut client, &namespace).await?;
        Ok(Scratch { config, namespace })
    }

    pub(crate) async fn drop_schema(&self) -> BenchResult<()> {
        let client = connect(&self.config).await?;
        client.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.namespace.quoted_schema())).await?;
        Ok(())
    }

    pub(crate) async fn truncate(&self) -> BenchResult<()> {
        let client = connect(&self.config).await?;
        let (outbox, queue) = (self.namespace.table("outbox"), self.namespace.table("queue"));
        // VACUUM cannot run inside the implicit transaction of a multi-statement batch.
        client.batch_execute(&format!("TRUNCATE {outbox}, {queue}")).await?;
        client.batch_execute(&format!("VACUUM ANALYZE {outbox}")).await?;
        client.batch_execute(&format!("VACUUM ANALYZE {queue}")).await?;
        Ok(())
    }

    pub(crate) async fn count(&self, client: &tokio_postgres::Client, table: &str) -> BenchResult<i64> {
        Ok(client
            .query_one(&format!("SELECT count(*) FROM {}", self.namespace.table(table)), &[])
            .await?
            .get(0))
    }
}

/// The body of the `n`th benchmark message (about 80 bytes of JSON).
pub(crate) fn body(n: usize) -> Vec<u8> {
    format!("{{\"order\":{n},\"payload\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}")
        .into_bytes()
}

/// With `RELAYER_BENCH_WINDOWS` set, prints the window of a timed run that started at
/// `started` and ends now, in seconds of `CLOCK_MONOTONIC`, so a profile recorded with
/// `perf record -k CLOCK_MONOTONIC -a` can be cut to it (`perf report --time <from>,<to>
/// --sort comm`): which process spent the CPU of that run.
pub(crate) fn report_window(run: &str, started: Instant) {
    if std::env::var_os("RELAYER_BENCH_WINDOWS").is_some() {
        let elapsed = started.elapsed();
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let to =
            Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0));
        let from = to.saturating_sub(elapsed);
        eprintln!("WINDOW {run} {:.6},{:.6}", from.as_secs_f64(), to.as_secs_f64());
    }
}

/// The `q` quantile (0..=1) of `sorted` by nearest rank; NaN for no sample.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let last = sorted.len() - 1;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let index = ((last as f64) * q).round() as usize;
    sorted[index.min(last)]
}
