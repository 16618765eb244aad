//! relayer's PostgreSQL storage.
#![deny(missing_docs)]
