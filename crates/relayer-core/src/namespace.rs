//! Namespaces: where a set of relayer tables lives (NS-1, NS-2).
//!
//! A namespace is a PostgreSQL schema plus a table prefix. Every table is named
//! `"{schema}"."{prefix}{table}"`, so several namespaces can share one database. Both parts
//! must be plain identifiers, checked once here; a [`Namespace`] that exists is valid, and
//! the storage crate can quote it into SQL without further checks.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// PostgreSQL's identifier limit in bytes (`NAMEDATALEN - 1`).
pub const MAX_IDENTIFIER_LEN: usize = 63;

/// The longest object-name suffix the storage layer appends to a prefix (tables, indexes,
/// constraints). The storage crate pins every name it creates to this bound by a test.
pub const LONGEST_OBJECT_SUFFIX: usize = 24;

/// The longest prefix allowed: the longest object name must still fit in 63 bytes.
pub const MAX_PREFIX_LEN: usize = MAX_IDENTIFIER_LEN - LONGEST_OBJECT_SUFFIX;

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The default table prefix.
pub const DEFAULT_PREFIX: &str = "relayer_";

/// A validated schema and table prefix.
///
/// ```
/// use relayer_core::Namespace;
/// let ns = Namespace::new("messaging", "orders_").unwrap();
/// assert_eq!(ns.table("outbox"), r#""messaging"."orders_outbox""#);
/// assert!(Namespace::new("bad;schema", "x_").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Namespace {
    schema: String,
    prefix: String,
}

impl Namespace {
    /// Validates `schema` and `prefix` (NS-2).
    pub fn new(schema: impl Into<String>, prefix: impl Into<String>) -> Result<Self, IdentifierError> {
        let (schema, prefix) = (schema.into(), prefix.into());
        check_identifier(IdentifierKind::Schema, &schema, MAX_IDENTIFIER_LEN)?;
        if schema.to_ascii_lowercase().starts_with("pg_") {
            return Err(IdentifierError::new(
                IdentifierKind::Schema,
                &schema,
                "names starting with \"pg_\" are reserved by PostgreSQL".to_owned(),
            ));
        }
        if !prefix.is_empty() {
            check_identifier(IdentifierKind::Prefix, &prefix, MAX_PREFIX_LEN)?;
        }
        Ok(Namespace { schema, prefix })
    }

    /// The schema name, unquoted.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The table prefix, unquoted (may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The quoted, schema-qualified name of `object`: `"{schema}"."{prefix}{object}"`.
    ///
    /// `object` is one of the storage layer's fixed names, never user input.
    pub fn table(&self, object: &str) -> String {
        format!("\"{}\".\"{}{}\"", self.schema, self.prefix, object)
    }

    /// The unquoted object name within the schema: `{prefix}{object}`.
    pub fn object_name(&self, object: &str) -> String {
        format!("{}{}", self.prefix, object)
    }

    /// The quoted schema name.
    pub fn quoted_schema(&self) -> String {
        format!("\"{}\"", self.schema)
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Namespace { schema: DEFAULT_SCHEMA.to_owned(), prefix: DEFAULT_PREFIX.to_owned() }
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Namespace({self})")
    }
}

/// `schema.prefix*`, e.g. `public.relayer_*`.
impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}*", self.schema, self.prefix)
    }
}

impl<'de> Deserialize<'de> for Namespace {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default = "default_schema")]
            schema: String,
            #[serde(default = "default_prefix")]
            prefix: String,
        }
        fn default_schema() -> String {
            DEFAULT_SCHEMA.to_owned()
        }
        fn default_prefix() -> String {
            DEFAULT_PREFIX.to_owned()
        }
        let raw = Raw::deserialize(deserializer)?;
        Namespace::new(raw.schema, raw.prefix).map_err(serde::de::Error::custom)
    }
}

/// Which part of a namespace an [`IdentifierError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentifierKind {
    /// The schema name.
    Schema,
    /// The table prefix.
    Prefix,
}

impl fmt::Display for IdentifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdentifierKind::Schema => "schema",
            IdentifierKind::Prefix => "table prefix",
        })
    }
}

/// A schema or prefix that is not a plain identifier. The message names the part, the
/// offending value and why it was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {reason}")]
pub struct IdentifierError {
    kind: IdentifierKind,
    value: String,
    reason: String,
}

impl IdentifierError {
    fn new(kind: IdentifierKind, value: &str, reason: String) -> Self {
        IdentifierError { kind, value: value.to_owned(), reason }
    }

    /// The part of the namespace that was refused.
    pub fn kind(&self) -> IdentifierKind {
        self.kind
    }

    /// The refused value, as given.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// Checks that `value` is a plain identifier of at most `max_len` bytes: ASCII letters,
/// digits and `_`, not starting with a digit.
fn check_identifier(kind: IdentifierKind, value: &str, max_len: usize) -> Result<(), IdentifierError> {
    let refuse = |reason: String| Err(IdentifierError::new(kind, value, reason));
    if value.is_empty() {
        return refuse("it must not be empty".to_owned());
    }
    if let Some((at, ch)) = value.char_indices().find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_')) {
        return refuse(format!("only ASCII letters, digits and '_' are allowed, found {ch:?} at byte {at}"));
    }
    if value.as_bytes()[0].is_ascii_digit() {
        return refuse("it must not start with a digit".to_owned());
    }
    if value.len() > max_len {
        return refuse(format!("it is {} bytes long; at most {max_len} are allowed", value.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_identifiers() {
        let ns = Namespace::new("Messaging_2", "").unwrap();
        assert_eq!(ns.table("outbox"), "\"Messaging_2\".\"outbox\"");
        assert_eq!(Namespace::default().table("leases"), "\"public\".\"relayer_leases\"");
        Namespace::new("_s", "_").unwrap();
        Namespace::new("a".repeat(63), "p".repeat(MAX_PREFIX_LEN)).unwrap();
    }

    #[test]
    fn refuses_with_part_value_and_reason() {
        let cases: &[(&str, &str, &str)] = &[
            ("", "p_", "invalid schema \"\": it must not be empty"),
            (
                "a\"b",
                "p_",
                "invalid schema \"a\\\"b\": only ASCII letters, digits and '_' are allowed, found '\"' at byte 1",
            ),
            (
                "s",
                "x;drop",
                "invalid table prefix \"x;drop\": only ASCII letters, digits and '_' are allowed, found ';' at byte 1",
            ),
            (
                "sché",
                "p_",
                "invalid schema \"sché\": only ASCII letters, digits and '_' are allowed, found 'é' at byte 3",
            ),
            ("s", "1p", "invalid table prefix \"1p\": it must not start with a digit"),
            (
                "s",
                "a b",
                "invalid table prefix \"a b\": only ASCII letters, digits and '_' are allowed, found ' ' at byte 1",
            ),
            (
                "pg_temp",
                "p_",
                "invalid schema \"pg_temp\": names starting with \"pg_\" are reserved by PostgreSQL",
            ),
        ];
        for (schema, prefix, expected) in cases {
            let err = Namespace::new(*schema, *prefix).unwrap_err();
            assert_eq!(err.to_string(), *expected);
        }
        let long = "a".repeat(64);
        let err = Namespace::new(long.clone(), "p_").unwrap_err();
        assert_eq!(err.kind(), IdentifierKind::Schema);
        assert_eq!(err.value(), long);
        assert!(err.to_string().ends_with("it is 64 bytes long; at most 63 are allowed"));
        let err = Namespace::new("s", "p".repeat(MAX_PREFIX_LEN + 1)).unwrap_err();
        assert_eq!(err.kind(), IdentifierKind::Prefix);
    }

    #[test]
    fn deserializes_with_defaults_and_validation() {
        let ns: Namespace = serde_json::from_str(r#"{"schema":"msg"}"#).unwrap();
        assert_eq!(ns, Namespace::new("msg", DEFAULT_PREFIX).unwrap());
        let err = serde_json::from_str::<Namespace>(r#"{"schema":"a-b"}"#).unwrap_err();
        assert!(err.to_string().contains("invalid schema \"a-b\""), "{err}");
        let err = serde_json::from_str::<Namespace>(r#"{"shema":"a"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `shema`"), "{err}");
    }
}
