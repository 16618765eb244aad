//! relayer's operator console: server-rendered pages over one namespace, served by
//! `relayer run` (OBS-3).
//!
//! - **Overview**: backlog and oldest pending age per transport and destination, rows no live
//!   instance can send (TRN-6), parked lanes, dead rows and letters, and a chart of the last
//!   hour from the sidecar's sampler ([`History`]).
//! - **Workers**: each worker's last pass and whether it stalled, the leases (leadership and
//!   term), the live instances and their settings disagreements (OPT-4).
//! - **Dead letters**: counts by queue and reason, a filtered listing (queue table or the
//!   outbox's dead table), one letter's headers and body (text or hex), the configured
//!   redrive and expire policies and their stuck letters (DLP-5).
//! - **Lanes**: parked lanes with their head's error.
//! - **Doctor**: the findings of a [`DoctorHook`] when the host provides one.
//!
//! Every page reads with bounded statements (the sampler's own, `namespace_gauges`, or a
//! keyset page of at most [`PAGE`] rows), never a full-table scan per view; docs/operations.md
//! states each page's cost. Everything the database holds — bodies, headers, errors, names —
//! is escaped for HTML, with control and direction characters shown as `\u{…}`.
//!
//! Actions (redrive, purge, release, skip) are off unless [`ConsoleSettings::actions`] is
//! set: each shows the dry run first, needs a confirmation posted with the page's CSRF token,
//! and runs through relayer-postgres' audited operator statements, the actor taken from a
//! configured header or name (never anonymous). The console serves on loopback only, unless
//! a TLS certificate, its key and an access token are configured
//! ([`ConsoleSettings::check`]).
#![deny(missing_docs)]

mod actions;
mod auth;
mod chart;
mod doctor;
mod format;
mod history;
mod html;
mod pages;
mod routes;
mod server;
mod settings;
mod state;
mod tls;

pub use doctor::{DoctorFinding, DoctorHook, Severity};
pub use history::{History, Sample};
pub use server::{BoundConsole, Console, ConsoleError};
pub use settings::{ActorSource, ConsoleSettings, TlsFiles};

/// The most rows a listing page shows (a keyset page: "next" continues after its last row).
pub const PAGE: u32 = 100;

/// The most rows of one table a bounded read (the overview's sample) looks at; past it,
/// counts are estimates or lower bounds, as the sidecar's gauges' are.
pub const SAMPLE_CAP: u32 = 10_000;
