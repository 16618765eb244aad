//! Test fixtures for relayer.
#![deny(missing_docs)]
