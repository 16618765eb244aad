//! `relayer`: the operations binary (OBS-3) — the maintenance sidecar (`run`), `status`,
//! `dead-letters`, `lanes`, `schema`, `config check`, shell completions, and the demo.
#![deny(missing_docs)]
// A command-line tool writes its results to standard output.
#![allow(clippy::print_stdout)]

mod args;
mod config;
mod config_error;
mod connect;
mod database_url;
mod dead_letters;
mod demo;
mod escape;
mod gauges;
mod lanes;
mod output;
mod run;
mod schema;
mod status;
mod stop_signals;
mod table;

use std::process::ExitCode;

use args::{Cli, Command, ConfigCommand, SchemaCommand};
use clap::{CommandFactory, Parser};

use crate::connect::CliResult;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELAYER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    database_url::warn_on_conflict(cli.global.database_url.as_deref());
    match execute(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line, each cause once (relayer's top-level errors already carry theirs).
            // Errors may quote the database's text (a row's error, a server message): escaped.
            let chain = relayer::error_chain(error.as_ref());
            eprintln!("error: {}", escape::printable(&chain, escape::Newlines::Keep));
            ExitCode::FAILURE
        }
    }
}

async fn execute(cli: Cli) -> CliResult {
    let global = cli.global;
    let database = |default_schema: &str| global.resolve(default_schema);
    match cli.command {
        Command::Status(flag) => status::show(&database("public")?, flag.json).await,
        Command::Schema(SchemaCommand::Print { grants: None }) => {
            print!("{}", relayer_postgres::schema_sql(&database("public")?.namespace));
            Ok(())
        }
        Command::Schema(SchemaCommand::Print { grants: Some(role) }) => {
            let sql = relayer_postgres::grants_sql(&database("public")?.namespace, &role)
                .map_err(|e| format!("--grants: {e}"))?;
            print!("{sql}");
            Ok(())
        }
        Command::Schema(SchemaCommand::Apply) => schema::apply(&database("public")?).await,
        Command::Schema(SchemaCommand::Status(flag)) => schema::status(&database("public")?, flag.json).await,
        Command::DeadLetters(command) => dead_letters::run(&database("public")?, command).await,
        Command::Lanes(command) => lanes::run(&database("public")?, command).await,
        Command::Run(run_args) => run::run(&global, &run_args).await,
        Command::Config(ConfigCommand::Check { file, json }) => {
            let config = config::Config::load(&file)?;
            if json {
                output::print_json(&config.to_json());
            } else {
                println!(
                    "{}: ok — runs {} on namespace {}{}",
                    file.display(),
                    config.workers().join(", "),
                    config.namespace,
                    config.metrics.map_or_else(String::new, |m| format!(", metrics on {}", m.listen))
                );
            }
            Ok(())
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "relayer", &mut std::io::stdout());
            Ok(())
        }
        Command::Demo { messages, console } => {
            let args = database("relayer_demo")?;
            Box::pin(demo::run(&args, demo::Size::new(messages))).await?;
            match console {
                Some(listen) => Box::pin(demo::console::serve(&args, listen)).await,
                None => Ok(()),
            }
        }
        Command::DemoChild => demo::child::run(&database("relayer_demo")?).await,
    }
}
