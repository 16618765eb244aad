//! The command line, described with clap: every subcommand has its own help
//! (`relayer help <command>`), and completions are generated from this description.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};
use relayer_core::Namespace;

/// The database used when neither `--database-url` nor `DATABASE_URL` names one.
pub(crate) const DEFAULT_DATABASE_URL: &str = "host=127.0.0.1 user=postgres dbname=test";

/// relayer — reliable messaging on PostgreSQL: operations.
#[derive(Debug, Parser)]
#[command(name = "relayer", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, ClapArgs)]
pub(crate) struct Global {
    /// postgres://… URL or key=value string; else DATABASE_URL, else RELAYER_DATABASE_URL
    /// (both set and different: warned), else for `run` the file's database_url
    /// [default: host=127.0.0.1 user=postgres dbname=test]; libpq's sslmode (disable, prefer,
    /// require, verify-ca, verify-full) and sslrootcert apply, PGSSLMODE and PGSSLROOTCERT
    /// when the URL leaves them out, and ~/.postgresql/root.crt is the CA when no other is given
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// A PEM file of CA certificates to verify the server against (the only trusted roots):
    /// TLS is then required (sslmode=prefer becomes require, which checks the chain as
    /// verify-ca; sslmode=disable is refused)
    #[arg(long, env = "RELAYER_CA_FILE", global = true)]
    pub(crate) ca_file: Option<PathBuf>,
    /// Namespace schema [default: public; demo: relayer_demo; run: the config file's]
    #[arg(long, global = true)]
    pub(crate) schema: Option<String>,
    /// Namespace table prefix [default: relayer_]
    #[arg(long, global = true)]
    pub(crate) prefix: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show a namespace's health: backlog, lanes, leases, instances, dead letters, workers,
    /// xmin horizon
    Status(JsonFlag),
    /// Check a live database for what hurts a PostgreSQL queue (who holds the xmin horizon,
    /// vacuum, NOTIFY queue, a transaction-mode pooler, unserved transports, parked lanes,
    /// stuck dead letters, stalled workers, settings disagreements), each with what to do;
    /// exits 0 ok, 1 warning, 2 critical, 3 could not check
    Doctor(DoctorArgs),
    /// Print, apply or check the schema
    #[command(subcommand)]
    Schema(SchemaCommand),
    /// List, show, redrive or purge dead letters (queue dead letters, or the outbox's dead
    /// table with --outbox); every action is audited
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(DeadLetterCommand),
    /// List parked lanes; release or skip their heads (audited)
    #[command(subcommand)]
    Lanes(LaneCommand),
    /// Run the maintenance workers as a sidecar, from a TOML file (stops on SIGTERM/SIGINT)
    Run(RunArgs),
    /// Validate a configuration file
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// The end-to-end run: apply the schema, write, dispatch, crash, recover, consume
    /// (reject, redrive, handle), clean up
    Demo {
        /// Orders to write (payments: half as many); CI runs it small
        #[arg(long, visible_alias = "size", default_value_t = 2_000,
              value_parser = clap::value_parser!(u32).range(100..=200_000))]
        messages: u32,
        /// Then leave a parked lane, dead letters and a backlog, and serve the operator
        /// console on this address (default 127.0.0.1:9188) until Ctrl-C
        #[arg(long, value_name = "ADDRESS", num_args = 0..=1, default_missing_value = "127.0.0.1:9188")]
        console: Option<std::net::SocketAddr>,
    },
    /// The demo's dispatcher process, killed on purpose by `demo`
    #[command(name = "demo-child", hide = true)]
    DemoChild,
}

/// `relayer doctor`'s thresholds (relayer_postgres::doctor::DoctorOptions).
#[derive(Debug, ClapArgs)]
pub(crate) struct DoctorArgs {
    /// A snapshot or prepared transaction held this long is a warning
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    pub(crate) horizon_warning: std::time::Duration,
    /// Held this long, critical
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub(crate) horizon_critical: std::time::Duration,
    /// Unserved rows and parked lanes this old are critical; dead letters this old, stuck
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub(crate) stuck_after: std::time::Duration,
    /// Print JSON instead of the report
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, ClapArgs)]
pub(crate) struct JsonFlag {
    /// Print JSON instead of a table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SchemaCommand {
    /// Print the schema SQL for the namespace (for your own migration tool), or with
    /// --grants the GRANTs a runtime role needs on it
    Print {
        /// Print instead the GRANTs the runtime role ROLE needs (data access only: schema
        /// USAGE, row DML on relayer's tables); run them as the schema's owner after every
        /// `schema apply` (see docs/operations.md, "Roles")
        #[arg(long, value_name = "ROLE")]
        grants: Option<String>,
    },
    /// Apply the schema to the namespace (idempotent, safe from several replicas)
    Apply,
    /// Show the namespace's schema version against the one this binary ships
    Status(JsonFlag),
}

/// Which dead letters a command selects; criteria combine with AND.
#[derive(Debug, Clone, Default, ClapArgs)]
pub(crate) struct DeadLetterSelection {
    /// The outbox's dead table instead of queue dead letters
    #[arg(long)]
    pub(crate) outbox: bool,
    /// Queue: dead letters held in this dead-letter queue
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Queue: dead-lettered from this topic
    #[arg(long)]
    pub(crate) topic: Option<String>,
    /// Queue: with this rejection reason
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Outbox: for this transport
    #[arg(long)]
    pub(crate) transport: Option<String>,
    /// Outbox: for this destination
    #[arg(long)]
    pub(crate) destination: Option<String>,
    /// Outbox: of this lane
    #[arg(long)]
    pub(crate) lane: Option<String>,
    /// Dead for at least this long (30s, 5m, 7d)
    #[arg(long, value_parser = parse_duration)]
    pub(crate) older_than: Option<std::time::Duration>,
    /// Only rows after this seq (paging)
    #[arg(long)]
    pub(crate) after_seq: Option<i64>,
    /// At most this many rows (1..=10000)
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

/// Who acts and whether for real.
#[derive(Debug, Clone, ClapArgs)]
pub(crate) struct Action {
    /// Only show what would be touched; change and audit nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Who acts, for the audit record [default: the OS user]
    #[arg(long)]
    pub(crate) actor: Option<String>,
    /// Confirms the action: required when standard input is not a terminal (scripts, CI),
    /// so that a destructive command never runs unattended by accident
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadLetterCommand {
    /// List dead letters (oldest seq first)
    List {
        #[command(flatten)]
        selection: DeadLetterSelection,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Show one dead letter by message id, with headers and body
    Show {
        /// The message id
        id: relayer_core::Uuid,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Move dead letters back where they came from (by id or by filter)
    Redrive {
        /// One message id (instead of, or besides, a filter)
        id: Option<relayer_core::Uuid>,
        #[command(flatten)]
        selection: DeadLetterSelection,
        #[command(flatten)]
        action: Action,
    },
    /// Delete dead letters (by id or by filter)
    Purge {
        /// One message id (instead of, or besides, a filter)
        id: Option<relayer_core::Uuid>,
        #[command(flatten)]
        selection: DeadLetterSelection,
        #[command(flatten)]
        action: Action,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum LaneCommand {
    /// List parked lanes (with --all, every lane that has rows)
    List {
        /// Every lane with rows, not only parked ones
        #[arg(long)]
        all: bool,
        /// At most this many lanes
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Un-park a lane: its head is tried again at once, with a fresh attempt count
    Release {
        /// The lane key
        lane: String,
        #[command(flatten)]
        action: Action,
    },
    /// Move a parked lane's head to the dead table; the rest of the lane goes on
    Skip {
        /// The lane key
        lane: String,
        #[command(flatten)]
        action: Action,
    },
}

#[derive(Debug, ClapArgs)]
pub(crate) struct RunArgs {
    /// The configuration file (TOML; RELAYER_* environment variables override it)
    #[arg(long, short)]
    pub(crate) config: PathBuf,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Validate a configuration file (and RELAYER_* variables) without connecting
    Check {
        /// The configuration file
        file: PathBuf,
        /// Print the effective configuration as JSON
        #[arg(long)]
        json: bool,
    },
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    relayer_core::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// The connection and namespace a database command works on (the demo reads these too).
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) database_url: String,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) namespace: Namespace,
}

impl Args {
    /// Where and how to connect: the URL, with TLS as its `sslmode` and `--ca-file` say.
    pub(crate) fn connector(&self) -> Result<relayer::postgres::Connector, String> {
        relayer::postgres::connector_from_url(&self.database_url, self.ca_file.as_deref())
            .map_err(|e| format!("--database-url: {e}"))
    }
}

impl Global {
    /// The connection and namespace, with `default_schema` when `--schema` is absent.
    pub(crate) fn resolve(&self, default_schema: &str) -> Result<Args, String> {
        let namespace = Namespace::new(
            self.schema.clone().unwrap_or_else(|| default_schema.to_owned()),
            self.prefix.clone().unwrap_or_else(|| relayer_core::namespace::DEFAULT_PREFIX.to_owned()),
        )
        .map_err(|e| e.to_string())?;
        Ok(Args {
            database_url: self
                .database_url
                .clone()
                .or_else(|| std::env::var(crate::database_url::RELAYER_DATABASE_URL).ok())
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned()),
            ca_file: self.ca_file.clone(),
            namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(words: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("relayer").chain(words.split_whitespace()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_commands_and_global_options_anywhere() {
        let cli = parse("schema print --schema msg --prefix o_").unwrap();
        assert!(matches!(cli.command, Command::Schema(SchemaCommand::Print { grants: None })));
        let args = cli.global.resolve("public").unwrap();
        assert_eq!(args.namespace, Namespace::new("msg", "o_").unwrap());
        let cli = parse("schema print --grants app_rw").unwrap();
        assert!(
            matches!(cli.command, Command::Schema(SchemaCommand::Print { grants: Some(r) }) if r == "app_rw")
        );
        let cli = parse("--schema msg status --json").unwrap();
        assert!(matches!(cli.command, Command::Status(JsonFlag { json: true })));
        assert_eq!(
            parse("demo").unwrap().global.resolve("relayer_demo").unwrap().namespace.schema(),
            "relayer_demo"
        );
        assert!(matches!(parse("demo").unwrap().command, Command::Demo { messages: 2_000, console: None }));
        assert!(matches!(parse("demo --messages 300").unwrap().command, Command::Demo { messages: 300, .. }));
        assert!(parse("demo --messages 10").is_err(), "too few for every lane");
        assert!(matches!(parse("demo-child --prefix d_").unwrap().command, Command::DemoChild));
        let help = Cli::command().render_help().to_string();
        assert!(!help.contains("demo-child"), "the demo's child process is not a user command");
        let cli = parse("dead-letters redrive --queue orders.dead --older-than 1h --dry-run").unwrap();
        let Command::DeadLetters(DeadLetterCommand::Redrive { selection, action, id: None }) = cli.command
        else {
            panic!("not a redrive")
        };
        assert_eq!(selection.older_than, Some(std::time::Duration::from_secs(3600)));
        assert!(action.dry_run && !action.yes);
        let cli = parse("lanes skip account-1 --yes").unwrap();
        assert!(matches!(cli.command, Command::Lanes(LaneCommand::Skip { action, .. }) if action.yes));
    }

    #[test]
    fn refuses_bad_input_naming_it() {
        let error = parse("schema drop").unwrap_err().to_string();
        assert!(error.contains("unrecognized subcommand 'drop'"), "{error}");
        let error = parse("status --shema x").unwrap_err().to_string();
        assert!(error.contains("--shema"), "{error}");
        let error = parse("dead-letters list --older-than 5").unwrap_err().to_string();
        assert!(error.contains("--older-than"), "{error}");
        let cli = parse("status --schema a;b").unwrap();
        let error = cli.global.resolve("public").unwrap_err();
        assert!(error.starts_with("invalid schema \"a;b\""), "{error}");
    }
}
