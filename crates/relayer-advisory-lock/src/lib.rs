//! PostgreSQL advisory locks for relayer.
#![deny(missing_docs)]
