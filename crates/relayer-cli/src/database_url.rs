//! Which database a command connects to, when several places name one. In order, the
//! first that is set wins:
//!
//! 1. `--database-url`;
//! 2. `DATABASE_URL`;
//! 3. `RELAYER_DATABASE_URL`;
//! 4. for `relayer run`, `database_url` in the configuration file;
//! 5. the default, `host=127.0.0.1 user=postgres dbname=test`.
//!
//! `DATABASE_URL` and `RELAYER_DATABASE_URL` both set to different values is warned about
//! (naming the variables, never their values: they may carry a password).

/// The variable `relayer run`'s configuration and every command read after `DATABASE_URL`.
pub(crate) const RELAYER_DATABASE_URL: &str = "RELAYER_DATABASE_URL";

/// The warning to print when `DATABASE_URL` and `RELAYER_DATABASE_URL` disagree, given
/// the URL the command line resolved (`--database-url` or `DATABASE_URL`), `DATABASE_URL`
/// and `RELAYER_DATABASE_URL`. Values never appear in it.
pub(crate) fn conflict_warning(
    resolved: Option<&str>,
    database_url: Option<&str>,
    relayer_database_url: Option<&str>,
) -> Option<String> {
    let (database_url, relayer) = (database_url?, relayer_database_url?);
    if database_url == relayer {
        return None;
    }
    let used = if resolved.is_some_and(|url| url != database_url) {
        "--database-url (both variables are ignored)"
    } else {
        "DATABASE_URL"
    };
    Some(format!(
        "warning: DATABASE_URL and RELAYER_DATABASE_URL are both set and differ; using {used} \
         (order: --database-url, DATABASE_URL, RELAYER_DATABASE_URL, the configuration file)"
    ))
}

/// [`conflict_warning`] for this process's environment.
pub(crate) fn warn_on_conflict(resolved: Option<&str>) {
    let database_url = std::env::var("DATABASE_URL").ok();
    let relayer = std::env::var(RELAYER_DATABASE_URL).ok();
    if let Some(warning) = conflict_warning(resolved, database_url.as_deref(), relayer.as_deref()) {
        eprintln!("{warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_variables_are_warned_about_without_their_values() {
        let (a, b) = ("postgres://u:secret-a@db-a/app", "postgres://u:secret-b@db-b/app");
        let warning = conflict_warning(Some(a), Some(a), Some(b)).unwrap();
        assert!(warning.contains("using DATABASE_URL"), "{warning}");
        assert!(!warning.contains("secret") && !warning.contains("db-a"), "{warning}");
        let flag = conflict_warning(Some("host=c"), Some(a), Some(b)).unwrap();
        assert!(flag.contains("using --database-url"), "{flag}");
        assert_eq!(conflict_warning(Some(a), Some(a), Some(a)), None, "the same value");
        assert_eq!(conflict_warning(Some(a), Some(a), None), None, "one variable");
        assert_eq!(conflict_warning(None, None, Some(b)), None, "one variable");
    }
}
