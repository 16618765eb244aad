//! Least privilege: the GRANTs a runtime role needs on a namespace (`relayer schema print
//! --grants ROLE`), and nothing more.
//!
//! The split (docs/operations.md, "Roles: who migrates, who runs"): a *migration role*
//! owns the schema and applies it (`relayer schema apply`, `migrate`); the *runtime role*
//! every worker, consumer and service connects as gets data access only:
//!
//! - `USAGE` on the schema (to reach its tables; not `CREATE`);
//! - `SELECT, INSERT, UPDATE, DELETE` on each relayer table workers write (`FOR UPDATE`
//!   row locks need `UPDATE`; `RETURNING` and `WHERE` need `SELECT`);
//! - `SELECT, INSERT` on the audit table: operators' actions append to it, nothing at run
//!   time rewrites it;
//! - `SELECT` on the version table (the schema check at start).
//!
//! Identity columns draw from their sequence with the table's `INSERT` alone. `LISTEN`,
//! `NOTIFY` and advisory locks need no privilege. No `TRUNCATE`, `REFERENCES`, `TRIGGER`,
//! and no grant on anything outside the namespace's own tables: a namespace in a shared
//! schema (`public`) gives nothing on its neighbours.

use relayer_core::Namespace;

/// Tables the runtime role writes rows of: every relayer table but the audit and version
/// tables.
const WRITTEN: &[&str] = &["outbox", "lanes", "dead", "inbox", "leases", "queue", "instances"];

/// A role name `relayer schema print --grants` refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid role {role:?}: {reason}")]
pub struct InvalidRole {
    role: String,
    reason: &'static str,
}

/// The longest identifier PostgreSQL keeps whole (NAMEDATALEN - 1).
const MAX_ROLE_LEN: usize = 63;

/// Checks that `role` is a plain identifier that names one role: letters, digits and `_`,
/// not starting with a digit, at most 63 bytes, and neither `public` (every role) nor a
/// reserved `pg_` name. It is then safe to quote into SQL.
fn check_role(role: &str) -> Result<(), InvalidRole> {
    let refuse = |reason| Err(InvalidRole { role: role.to_owned(), reason });
    if role.is_empty() {
        return refuse("it must not be empty");
    }
    if role.len() > MAX_ROLE_LEN {
        return refuse("it is longer than 63 bytes, PostgreSQL's identifier limit");
    }
    if !role.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return refuse("only ASCII letters, digits and '_' are allowed");
    }
    if role.starts_with(|c: char| c.is_ascii_digit()) {
        return refuse("it must not start with a digit");
    }
    if role.eq_ignore_ascii_case("public") {
        return refuse("PUBLIC is every role: name the runtime role itself");
    }
    if role.to_ascii_lowercase().starts_with("pg_") {
        return refuse("names starting with pg_ are reserved for PostgreSQL's own roles");
    }
    Ok(())
}

/// The GRANTs the runtime role `role` needs on `namespace` (what it grants and why: docs/operations.md, "Roles"),
/// as a script for the schema's owner to run after each `relayer schema apply` (a later
/// schema step may add a table). Refuses a `role` that is not a plain identifier, naming
/// why.
pub fn grants_sql(namespace: &Namespace, role: &str) -> Result<String, InvalidRole> {
    check_role(role)?;
    let role = format!("\"{role}\"");
    let written: Vec<String> = WRITTEN.iter().map(|table| namespace.table(table)).collect();
    Ok(format!(
        "-- relayer runtime grants for role {role} on namespace {namespace}: data access only.\n\
         -- Run as the schema's owner (the migration role), again after every `relayer schema apply`.\n\
         -- LISTEN/NOTIFY and advisory locks need no grant; identity columns need none beyond INSERT.\n\
         BEGIN;\n\
         GRANT USAGE ON SCHEMA {schema} TO {role};\n\
         GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {written} TO {role};\n\
         GRANT SELECT, INSERT ON TABLE {audit} TO {role};\n\
         GRANT SELECT ON TABLE {version} TO {role};\n\
         COMMIT;\n",
        schema = namespace.quoted_schema(),
        written = written.join(", "),
        audit = namespace.table("audit"),
        version = namespace.table("schema_version"),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn every_table_of_the_schema_is_granted_once() {
        let ns = Namespace::new("msg", "r_").unwrap();
        let sql = grants_sql(&ns, "app_rw").unwrap();
        for table in crate::schema::TABLES {
            assert_eq!(
                sql.matches(&format!("{} ", ns.table(table))).count()
                    + sql.matches(&format!("{},", ns.table(table))).count(),
                1,
                "{table}: {sql}"
            );
        }
        assert!(sql.contains("GRANT USAGE ON SCHEMA \"msg\" TO \"app_rw\";"), "{sql}");
        for never in ["CREATE", "TRUNCATE", "ALL", "REFERENCES", "TRIGGER", "ALTER", "OWNER"] {
            let statements = sql.lines().filter(|line| !line.starts_with("--"));
            assert!(statements.clone().all(|line| !line.contains(never)), "{never}: {sql}");
        }
    }

    #[test]
    fn bad_roles_are_refused_naming_why() {
        let ns = Namespace::default();
        for (role, why) in [
            ("", "must not be empty"),
            ("a;b", "only ASCII letters"),
            ("app\"x", "only ASCII letters"),
            ("9app", "must not start with a digit"),
            ("PUBLIC", "every role"),
            ("pg_monitor", "reserved"),
            (&"r".repeat(64), "longer than 63"),
        ] {
            let error = grants_sql(&ns, role).unwrap_err().to_string();
            assert!(error.starts_with(&format!("invalid role {role:?}: ")) && error.contains(why), "{error}");
        }
    }

    proptest! {
        /// A role that is accepted appears in the script only quoted, as itself.
        #[test]
        fn an_accepted_role_is_quoted_as_itself(role in "[A-Za-z_][A-Za-z0-9_]{0,62}") {
            prop_assume!(!role.eq_ignore_ascii_case("public") && !role.to_ascii_lowercase().starts_with("pg_"));
            let sql = grants_sql(&Namespace::default(), &role).unwrap();
            let quoted = format!("TO \"{role}\";");
            prop_assert_eq!(sql.matches(&quoted).count(), 4);
        }
    }
}
