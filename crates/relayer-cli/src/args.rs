//! Command-line parsing, by hand: the command set is small and the binary stays lean.

use relayer_core::Namespace;

pub(crate) const USAGE: &str = "\
relayer — reliable messaging on PostgreSQL: operations

USAGE:
    relayer <COMMAND> [OPTIONS]

COMMANDS:
    schema print     Print the schema SQL for a namespace (for your own migration tool)
    schema apply     Apply the schema to a namespace (idempotent, safe from several replicas)
    status           Show a namespace's backlog, oldest message, lanes, dead rows, queues, leases
    dead-letters list|show <ID>|redrive|purge
                     Queue dead letters (with --outbox: the outbox's dead rows); redrive and
                     purge are audited and need --actor and a filter; --dry-run shows what
                     they would touch. Filters: --queue --topic --reason (queue),
                     --transport --destination --lane (outbox), --older-than <DURATION>,
                     --id <MESSAGE ID>, --after <SEQ>, --limit <N> [default: 100]
    demo             The end-to-end run: apply the schema, write, dispatch, crash, recover, clean up
    help             Show this text

OPTIONS:
    --database-url <URL>   postgres://… URL or key=value string
                           [default: $DATABASE_URL, else host=127.0.0.1 user=postgres dbname=test]
    --schema <NAME>        Namespace schema [default: public; demo: relayer_demo]
    --prefix <PREFIX>      Namespace table prefix [default: relayer_]
";

/// What to run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    SchemaPrint,
    SchemaApply,
    Status,
    Demo,
    /// `dead-letters list|show|redrive|purge` (DLP-7).
    DeadLetters(crate::dead_letters::Action),
    /// Hidden: the demo's dispatcher process, killed on purpose by `demo`.
    DemoChild,
    Help,
}

/// A parsed command line.
#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) command: Command,
    pub(crate) database_url: String,
    pub(crate) namespace: Namespace,
    /// The `dead-letters` options (`--queue value`, `--dry-run`, …), checked by that command.
    pub(crate) dead_letter_options: Vec<(String, Option<String>)>,
}

/// Parses `args` (without the program name). Errors name the offending argument.
pub(crate) fn parse(args: &[String], env_database_url: Option<String>) -> Result<Args, String> {
    let mut words = Vec::new();
    let mut dead_letter_options = Vec::new();
    let (mut url, mut schema, mut prefix) = (env_database_url, None, None);
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| iter.next().cloned().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--database-url" => url = Some(value("--database-url")?),
            "--schema" => schema = Some(value("--schema")?),
            "--prefix" => prefix = Some(value("--prefix")?),
            "-h" | "--help" => words.push("help".to_owned()),
            flag if crate::dead_letters::FLAGS.contains(&flag) => {
                dead_letter_options.push((flag.to_owned(), None));
            }
            option if crate::dead_letters::OPTIONS.contains(&option) => {
                dead_letter_options.push((option.to_owned(), Some(value(option)?)));
            }
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option {flag:?}; see `relayer help`"));
            }
            word => words.push(word.to_owned()),
        }
    }
    let command = match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["schema", "print"] => Command::SchemaPrint,
        ["schema", "apply"] => Command::SchemaApply,
        ["status"] => Command::Status,
        ["demo"] => Command::Demo,
        ["demo-child"] => Command::DemoChild,
        [] | ["help", ..] | [_, "help"] => Command::Help,
        ["dead-letters", action @ ..] => Command::DeadLetters(crate::dead_letters::Action::parse(action)?),
        other => return Err(format!("unknown command {:?}; see `relayer help`", other.join(" "))),
    };
    let default_schema =
        if matches!(command, Command::Demo | Command::DemoChild) { "relayer_demo" } else { "public" };
    let namespace = Namespace::new(
        schema.unwrap_or_else(|| default_schema.to_owned()),
        prefix.unwrap_or_else(|| relayer_core::namespace::DEFAULT_PREFIX.to_owned()),
    )
    .map_err(|e| e.to_string())?;
    if !dead_letter_options.is_empty() && !matches!(command, Command::DeadLetters(_)) {
        return Err(format!("option {:?} belongs to `relayer dead-letters`", dead_letter_options[0].0));
    }
    Ok(Args {
        command,
        dead_letter_options,
        database_url: url.unwrap_or_else(|| "host=127.0.0.1 user=postgres dbname=test".to_owned()),
        namespace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &str) -> Result<Args, String> {
        let args: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        parse(&args, None)
    }

    #[test]
    fn parses_commands_and_options() {
        let args = parse_words("schema print --schema msg --prefix o_").unwrap();
        assert_eq!(args.command, Command::SchemaPrint);
        assert_eq!(args.namespace, Namespace::new("msg", "o_").unwrap());
        assert_eq!(parse_words("demo").unwrap().namespace.schema(), "relayer_demo");
        assert_eq!(parse_words("demo-child --prefix d_").unwrap().command, Command::DemoChild);
        assert!(!USAGE.contains("demo-child"), "the demo's child process is not a user command");
        assert_eq!(parse_words("").unwrap().command, Command::Help);
        assert_eq!(parse_words("status --help").unwrap().command, Command::Help);
    }

    #[test]
    fn refuses_bad_input_naming_it() {
        assert_eq!(
            parse_words("schema drop").unwrap_err(),
            "unknown command \"schema drop\"; see `relayer help`"
        );
        assert_eq!(
            parse_words("status --shema x").unwrap_err(),
            "unknown option \"--shema\"; see `relayer help`"
        );
        assert_eq!(parse_words("status --schema").unwrap_err(), "--schema needs a value");
        let err = parse_words("status --schema a;b").unwrap_err();
        assert!(err.starts_with("invalid schema \"a;b\""), "{err}");
    }
}
