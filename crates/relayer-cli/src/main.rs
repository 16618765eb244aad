//! `relayer`: the operations binary (OBS-3) — the maintenance sidecar (`run`), `status`,
//! `doctor`, `dead-letters`, `lanes`, `schema`, `config check`, shell completions, and the demo.
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
mod doctor;
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if !error.use_stderr() {
                ExitCode::SUCCESS // --help, --version
            } else if std::env::args().skip(1).any(|arg| arg == "doctor") {
                // A usage error exits 2, which is the doctor's "critical": its own exit 3.
                ExitCode::from(doctor::COULD_NOT_CHECK)
            } else {
                ExitCode::from(2)
            };
        }
    };
    database_url::warn_on_conflict(cli.global.database_url.as_deref());
    // The doctor's exit status is its verdict (0/1/2); it fails with its own (3).
    let failure = if matches!(cli.command, Command::Doctor(_)) {
        ExitCode::from(doctor::COULD_NOT_CHECK)
    } else {
        ExitCode::FAILURE
    };
    match execute(cli).await {
        Ok(code) => code,
        Err(error) => {
            // One line, each cause once (relayer's top-level errors already carry theirs).
            // Errors may quote the database's text (a row's error, a server message): escaped.
            let chain = relayer::error_chain(error.as_ref());
            eprintln!("error: {}", escape::printable(&chain, escape::Newlines::Keep));
            failure
        }
    }
}

async fn execute(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error + Send + Sync>> {
    let global = cli.global;
    if let Command::Doctor(doctor_args) = &cli.command {
        return doctor::run(&global.resolve("public")?, doctor_args).await.map(ExitCode::from);
    }
    run_command(cli.command, &global).await.map(|()| ExitCode::SUCCESS)
}

async fn run_command(command: Command, global: &args::Global) -> CliResult {
    let database = |default_schema: &str| global.resolve(default_schema);
    match command {
        Command::Doctor(_) => Err("relayer doctor is handled before the other commands".into()),
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
        Command::Run(run_args) => run::run(global, &run_args).await,
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
