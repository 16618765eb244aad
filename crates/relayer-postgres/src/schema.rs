//! The versioned schema (NS-3): DDL shipped with the crate, rendered for a namespace.
//!
//! Each migration is a numbered step of plain SQL; the namespace's
//! `{prefix}schema_version` table records the steps applied. Steps are only ever added,
//! never edited once released, so a database at version N plus steps N+1.. equals a fresh
//! database at the latest version.

use relayer_core::Namespace;

/// A numbered schema step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    pub(crate) version: i32,
    pub(crate) description: &'static str,
    sql: &'static str,
}

impl Migration {
    /// The step's SQL for `namespace`. Safe to splice: a [`Namespace`] holds only plain
    /// identifiers (NS-2).
    pub(crate) fn render(&self, namespace: &Namespace) -> String {
        render(self.sql, namespace)
    }
}

/// Every step, in order.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "outbox, lanes, dead, inbox, leases, queue, audit, instances",
        sql: include_str!("schema/v1.sql"),
    },
    Migration {
        version: 2,
        description: "queue receipt tokens for the consumer",
        sql: include_str!("schema/v2.sql"),
    },
    Migration {
        version: 3,
        description: "due rows indexed per transport; instances record their transports",
        sql: include_str!("schema/v3.sql"),
    },
    Migration {
        version: 4,
        description: "audit rows record the session user and the client address",
        sql: include_str!("schema/v4.sql"),
    },
    Migration {
        version: 5,
        description: "queue and outbox vacuumed after a count of dead rows, not a share of the table",
        sql: include_str!("schema/v5.sql"),
    },
    Migration {
        version: 6,
        description: "dead letters indexed by message id and by seq",
        sql: include_str!("schema/v6.sql"),
    },
];

/// Version numbers skipped on purpose: reserved for a step of a branch merged beside this one.
#[cfg(test)]
const RESERVED: &[i32] = &[];

/// The schema version this build of relayer requires and migrates to.
pub const SCHEMA_VERSION: i32 = 6;

/// Every table the schema creates, by its unprefixed name.
pub const TABLES: &[&str] =
    &["outbox", "lanes", "dead", "inbox", "leases", "queue", "audit", "instances", "schema_version"];

/// The version table, created before any step.
const VERSION_TABLE: &str = r#"CREATE TABLE IF NOT EXISTS "__SCHEMA__"."__PREFIX__schema_version" (
    version     integer     NOT NULL,
    description text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "__PREFIX__schema_version_pkey" PRIMARY KEY (version)
);
"#;

/// The placeholders of a template, each replaced by one of the namespace's identifiers.
const SCHEMA_PLACEHOLDER: &str = "__SCHEMA__";
const PREFIX_PLACEHOLDER: &str = "__PREFIX__";

/// `sql` with every placeholder replaced by the namespace's identifier, in one pass over
/// the template: text already substituted is never scanned again, so a schema named
/// `a__PREFIX__b` (a valid identifier) renders as itself.
fn render(sql: &str, namespace: &Namespace) -> String {
    let values = [(SCHEMA_PLACEHOLDER, namespace.schema()), (PREFIX_PLACEHOLDER, namespace.prefix())];
    let mut rendered =
        String::with_capacity(sql.len() + 32 * (namespace.schema().len() + namespace.prefix().len()));
    let mut rest = sql;
    // The nearest placeholder next, whichever it is.
    while let Some((at, placeholder, value)) = values
        .iter()
        .filter_map(|(placeholder, value)| rest.find(placeholder).map(|at| (at, *placeholder, *value)))
        .min_by_key(|(at, _, _)| *at)
    {
        rendered.push_str(&rest[..at]);
        rendered.push_str(value);
        rest = &rest[at + placeholder.len()..];
    }
    rendered.push_str(rest);
    rendered
}

pub(crate) fn create_schema_sql(namespace: &Namespace) -> String {
    format!("CREATE SCHEMA IF NOT EXISTS {};\n", namespace.quoted_schema())
}

pub(crate) fn version_table_sql(namespace: &Namespace) -> String {
    render(VERSION_TABLE, namespace)
}

/// The whole schema for `namespace` as one SQL script, for teams that apply DDL with their
/// own migration tool (`relayer schema print`). It creates the schema, every table and
/// index, and records each version, so relayer's version check passes afterwards. Run it
/// once, in a transaction, on a namespace without relayer tables.
pub fn schema_sql(namespace: &Namespace) -> String {
    let mut script = format!(
        "-- relayer schema version {SCHEMA_VERSION} for namespace {namespace}\nBEGIN;\n{}{}",
        create_schema_sql(namespace),
        version_table_sql(namespace)
    );
    for step in MIGRATIONS {
        script.push('\n');
        script.push_str(&step.render(namespace));
        script.push_str(&format!(
            "INSERT INTO {} (version, description) VALUES ({}, '{}');\n",
            namespace.table("schema_version"),
            step.version,
            step.description.replace('\'', "''")
        ));
    }
    script.push_str("COMMIT;\n");
    script
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// NS-2 identifiers, some with a placeholder's text inside them.
    fn identifier(max: usize) -> impl Strategy<Value = String> {
        let plain = proptest::string::string_regex("[A-Za-z_][A-Za-z0-9_]{0,12}").unwrap();
        let marker = prop_oneof![Just(""), Just(SCHEMA_PLACEHOLDER), Just(PREFIX_PLACEHOLDER)];
        (plain, marker, proptest::string::string_regex("[A-Za-z0-9_]{0,8}").unwrap()).prop_map(
            move |(head, marker, tail)| {
                let mut name = format!("{head}{marker}{tail}");
                name.truncate(max);
                name
            },
        )
    }

    proptest! {
        /// NS-1, NS-2: a template renders to exactly its text with each placeholder replaced
        /// by its identifier, whatever valid identifiers the namespace holds (placeholder
        /// text inside them included).
        #[test]
        fn rendering_substitutes_each_placeholder_once_ns_2(
            schema in identifier(relayer_core::namespace::MAX_IDENTIFIER_LEN),
            prefix in identifier(relayer_core::namespace::MAX_PREFIX_LEN),
            parts in proptest::collection::vec((0..3usize, "[ a-z\\.\"()_]{0,6}"), 0..12),
        ) {
            prop_assume!(!schema.to_ascii_lowercase().starts_with("pg_"));
            let namespace = Namespace::new(schema.as_str(), prefix.as_str()).unwrap();
            let (mut template, mut expected) = (String::new(), String::new());
            for (which, text) in &parts {
                let (placeholder, value) = match which {
                    0 => (SCHEMA_PLACEHOLDER, schema.as_str()),
                    1 => (PREFIX_PLACEHOLDER, prefix.as_str()),
                    _ => ("", ""),
                };
                template.push_str(placeholder);
                template.push_str(text);
                expected.push_str(value);
                expected.push_str(text);
            }
            // The plain text may join with a placeholder into one by chance: skip such cases.
            let rebuilt = template.replace(SCHEMA_PLACEHOLDER, "").replace(PREFIX_PLACEHOLDER, "");
            let plain: String = parts.iter().map(|(_, text)| text.as_str()).collect();
            prop_assume!(rebuilt == plain);
            prop_assert_eq!(render(&template, &namespace), expected);
        }
    }

    /// NS-2: the old chained replacement rendered a schema named `a__PREFIX__b` as
    /// `a{prefix}b`; the schema must render as itself.
    #[test]
    fn a_schema_named_with_a_placeholder_renders_as_itself_ns_2() {
        let ns = Namespace::new("a__PREFIX__b", "p__SCHEMA__").unwrap();
        let sql = schema_sql(&ns);
        assert!(sql.contains(r#"CREATE SCHEMA IF NOT EXISTS "a__PREFIX__b";"#), "{sql}");
        assert!(sql.contains(r#"CREATE TABLE "a__PREFIX__b"."p__SCHEMA__outbox""#));
        assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "a__PREFIX__b"."p__SCHEMA__schema_version""#));
        for table in TABLES {
            assert!(sql.contains(&ns.table(table)), "{table}");
        }
    }

    #[test]
    fn versions_are_dense_and_end_at_the_required_version() {
        let mut expected = 1..;
        for step in MIGRATIONS {
            let next = expected.find(|version| !RESERVED.contains(version)).unwrap();
            assert_eq!(step.version, next);
        }
        assert_eq!(MIGRATIONS.last().unwrap().version, SCHEMA_VERSION);
    }

    #[test]
    fn rendered_sql_names_only_the_namespace() {
        let ns = Namespace::new("msg", "orders_").unwrap();
        let sql = schema_sql(&ns);
        assert!(!sql.contains("__SCHEMA__") && !sql.contains("__PREFIX__"));
        assert!(sql.contains(r#"CREATE TABLE "msg"."orders_outbox""#));
        for table in TABLES {
            assert!(sql.contains(&ns.table(table)), "{table}");
        }
    }
}
