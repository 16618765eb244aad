//! The database a command works on: one client connected to the database named on the
//! command line, and the result every command returns.

use crate::args;

/// Any failure of a command, with its cause chain.
pub(crate) type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Connects one client to the database named on the command line, with TLS as its
/// `sslmode` and `--ca-file` say.
pub(crate) async fn connect(
    args: &args::Args,
) -> Result<tokio_postgres::Client, Box<dyn std::error::Error + Send + Sync>> {
    let database = args.connector()?;
    database.connect().await.map_err(|e| {
        format!("cannot connect to PostgreSQL at {}: {}", database.target(), relayer::error_chain(&e)).into()
    })
}
