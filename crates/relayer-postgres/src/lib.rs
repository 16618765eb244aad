//! relayer's PostgreSQL storage: the versioned schema, migrations, the pool, and every SQL
//! statement the workers run.
//!
//! SQL lives here and nowhere else. Each module owns one table or concern and names, next
//! to every statement, the index it relies on (see `src/schema/v1.sql`).
//! [`PgStore`] implements the core crate's store capabilities
//! ([`relayer_core::store`]) by delegating to those statements, so workers can depend on
//! the capabilities they use rather than on this crate's statement types.
#![deny(missing_docs)]

mod connector;
mod dead_letter_filter;
pub mod dead_letter_policy;
pub mod dead_letters;
pub mod doctor;
mod error;
pub mod exec;
mod grants;
pub mod inbox;
pub mod instances;
pub mod lanes;
pub mod lanes_admin;
pub mod leases;
#[cfg(feature = "tls-rustls")]
mod libpq_env;
#[cfg(feature = "tls-rustls")]
mod libpq_url;
pub mod listen;
mod migrate;
mod notifications;
pub mod outbox;
mod pool;
pub mod queue;
pub mod recovery;
pub mod retention;
mod row_codec;
#[cfg(feature = "tls-rustls")]
mod rustls_tls;
mod schema;
mod session;
mod split;
pub mod status;
mod store;
pub mod tls;

pub use connector::{Connector, DEFAULT_STATEMENT_TIMEOUT, TlsModeConflict};
pub use dead_letter_policy::{DeadLetterPolicyStatements, STUCK_COUNT_CAP};
pub use dead_letters::{
    DeadLetterApi, DeadLetterApiError, Mode, OutboxDeadFilter, OutboxDeadRow, QueueDeadLetter,
    QueueDeadLetterFilter, Touched,
};
pub use error::{StorageError, StorageErrorKind};
pub use exec::{Executor, Prepared};
pub use grants::{InvalidRole, grants_sql};
pub use inbox::{Inbox, InboxEntry};
pub use instances::{InstanceSettings, InstanceStatements};
pub use lanes::{HeadFailure, LaneClaim, LaneHead, LaneStatements, ParkedLane};
pub use lanes_admin::{LaneAdmin, LaneListing};
pub use leases::{Lease, LeaseStatements};
pub use listen::{Heard, listen};
pub use migrate::{
    MIGRATION_ATTEMPTS, MIGRATION_LOCK_TIMEOUT, MigrationReport, current_version, migrate,
    migration_lock_resource, verify_schema,
};
pub use notifications::PgNotifications;
pub use outbox::{
    Claimed, ClaimedMessage, Completion, CompletionReport, DEFAULT_MAX_BODY_BYTES, EnqueueBatch,
    EnqueueError, EnqueueParam, Enqueued, HOLD_BACK_BATCH, HOLD_BACK_HEAD, OutboxStatements, OutboxWriter,
    PARKED_COOL_DOWNS, UndecodableRow, notify_channel,
};
pub use pool::{
    LOST_STATEMENTS_BEFORE_GIVING_UP, PgClient, PgConnection, PgConnectionManager, PgPool, StatementCache,
    StatementMode, asynchronous_commit, connect_pool, connect_pool_with,
};
pub use queue::{
    ConsumeStatements, DEFAULT_NOTIFY_INTERVAL, DeadLetter, NOTIFY_AFTER_QUIET, QueueBatch, QueueMessage,
    QueueStatements, QueueWriter, Receipt, Received, Requeue, Undecodable, queue_channel,
};
#[cfg(feature = "tls-rustls")]
pub use rustls_tls::{CertificateCheck, TlsSetupError, connector_from_url, rustls_tls};
pub use schema::{SCHEMA_VERSION, TABLES, schema_sql};
pub use session::{PgSession, PgSource};
pub use status::{NamespaceStatus, namespace_gauges, namespace_status};
pub use store::PgStore;
pub use tls::Tls;
