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
    // Version 2 is reserved for a step developed alongside this one; when both are merged
    // the steps are dense again (and RESERVED below is emptied).
    Migration {
        version: 3,
        description: "queue receipt tokens for the consumer",
        sql: include_str!("schema/v3.sql"),
    },
];

/// Version numbers skipped on purpose: reserved for a step of a branch merged beside this one.
#[cfg(test)]
const RESERVED: &[i32] = &[2];

/// The schema version this build of relayer requires and migrates to.
pub const SCHEMA_VERSION: i32 = 3;

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

fn render(sql: &str, namespace: &Namespace) -> String {
    sql.replace("__SCHEMA__", namespace.schema()).replace("__PREFIX__", namespace.prefix())
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
mod tests {
    use super::*;

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
