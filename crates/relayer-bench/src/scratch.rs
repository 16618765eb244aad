//! What every benchmark shares: its database (a migrated namespace in a scratch schema,
//! dropped at the end), plain connections, the message body and the writer count.

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
    config.application_name("relayer-bench");
    Ok(config)
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
        let config = database_config()?;
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
