//! `relayer`: the operations binary (OBS-3).
#![deny(missing_docs)]
// A command-line tool writes its results to standard output.
#![allow(clippy::print_stdout)]

mod args;
mod dead_letters;
mod demo;
mod status;

use std::process::ExitCode;

use args::Command;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELAYER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match args::parse(&argv, std::env::var("DATABASE_URL").ok()) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let result = match args.command {
        Command::Help => {
            print!("{}", args::USAGE);
            Ok(())
        }
        Command::SchemaPrint => {
            print!("{}", relayer_postgres::schema_sql(&args.namespace));
            Ok(())
        }
        Command::SchemaApply => status::apply(&args).await,
        Command::Status => status::show(&args).await,
        Command::Demo => demo::run(&args).await,
        Command::DeadLetters(ref action) => dead_letters::run(&args, action.clone()).await,
        Command::DemoChild => demo::child::run(&args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            let mut source = std::error::Error::source(error.as_ref());
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// Any failure of a command, with its cause chain.
pub(crate) type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Connects one client to the database named on the command line.
pub(crate) async fn connect(
    args: &args::Args,
) -> Result<tokio_postgres::Client, Box<dyn std::error::Error + Send + Sync>> {
    let config: tokio_postgres::Config = args
        .database_url
        .parse()
        .map_err(|e| format!("invalid --database-url {:?}: {e}", args.database_url))?;
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL at {:?}: {e}", args.database_url))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(target: "relayer::cli", %error, "connection closed");
        }
    });
    Ok(client)
}
