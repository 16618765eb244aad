//! A plain connection to the test server: the fixture's own statements (creating and
//! dropping schemas, probing a server) run on it, outside any pool.

use tokio_postgres::{Client, Config, NoTls};

/// Opens a connection and spawns its driver on the current runtime.
pub(crate) async fn connect(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // The error (if any) resurfaces on the client's next call.
        let _ = connection.await;
    });
    Ok(client)
}
