//! A throwaway namespace for an example: its own schema on the local PostgreSQL, migrated,
//! and dropped when the example ends.

use relayer::Namespace;
use tokio_postgres::{Client, Config, NoTls};

use crate::ExampleResult;

/// The database an example uses: `DATABASE_URL`, else `127.0.0.1:5432`, user `postgres`,
/// database `test`.
pub fn config() -> ExampleResult<Config> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".to_owned());
    Ok(url.parse()?)
}

/// A connected client; its connection runs on a spawned task.
pub async fn connect(config: &Config) -> ExampleResult<Client> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// A fresh namespace `example_<name>_<pid>` (prefix `relayer_`) with relayer's tables in it.
pub async fn fresh_namespace(client: &mut Client, name: &str) -> ExampleResult<Namespace> {
    let namespace = Namespace::new(format!("example_{name}_{}", std::process::id()), "relayer_")?;
    drop_namespace(client, &namespace).await?;
    relayer::postgres::migrate(client, &namespace).await?;
    Ok(namespace)
}

/// Drops the namespace's schema and everything in it.
pub async fn drop_namespace(client: &Client, namespace: &Namespace) -> ExampleResult {
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", namespace.schema())).await?;
    Ok(())
}

/// Waits up to 30 s for the namespace's outbox to empty (a host deletes each row once its
/// transport accepted it, a moment after the receiver saw it); returns the rows left.
pub async fn outbox_left(client: &Client, namespace: &Namespace) -> ExampleResult<i64> {
    let outbox = format!("SELECT count(*) FROM {}", namespace.table("outbox"));
    let mut pending: i64 = client.query_one(&outbox, &[]).await?.get(0);
    for _ in 0..300 {
        if pending == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        pending = client.query_one(&outbox, &[]).await?.get(0);
    }
    Ok(pending)
}
