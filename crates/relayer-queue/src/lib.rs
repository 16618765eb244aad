//! relayer's PostgreSQL queue transport, producer side (QUE-1).
//!
//! The model: a message dispatched to the transport named `"queue"` (configurable) becomes
//! a row of the namespace's `queue` table, its destination the queue name. A batch is one
//! multi-row insert (one round trip, with a NOTIFY on the namespace's queue channel that
//! wakes `relayer-consumer` pumps on commit) on the transport's own pool — which may point at the
//! same database as the outbox or another one. The outcome is all or nothing: every
//! message accepted, or the whole batch failed with a transient error that the dispatcher
//! retries. Identity, headers, body, creation context and `created_at` are kept as written.
//!
//! ```no_run
//! # async fn example(pool: relayer_postgres::PgPool) -> Result<(), relayer_core::DuplicateTransport> {
//! use std::sync::Arc;
//! use relayer_core::{Namespace, TransportRegistry};
//! use relayer_queue::PgQueueTransport;
//!
//! let queue = PgQueueTransport::new(pool, &Namespace::default());
//! let transports = TransportRegistry::new().with(Arc::new(queue))?;
//! # let _ = transports; Ok(()) }
//! ```
#![deny(missing_docs)]

use std::num::NonZeroUsize;

use async_trait::async_trait;
use relayer_core::{Envelope, Namespace, SendOutcome, Transport, TransportError};
use relayer_postgres::{PgPool, QueueStatements};

/// The transport name used unless another is set.
pub const DEFAULT_NAME: &str = "queue";

/// The most messages one insert carries unless another limit is set.
pub const DEFAULT_BATCH_LIMIT: NonZeroUsize = match NonZeroUsize::new(500) {
    Some(limit) => limit,
    None => NonZeroUsize::MIN,
};

/// Sends messages into relayer's PostgreSQL queue table.
#[derive(Clone)]
pub struct PgQueueTransport {
    name: String,
    batch_limit: NonZeroUsize,
    pool: PgPool,
    statements: QueueStatements,
}

impl std::fmt::Debug for PgQueueTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgQueueTransport")
            .field("name", &self.name)
            .field("batch_limit", &self.batch_limit)
            .finish()
    }
}

impl PgQueueTransport {
    /// A transport named [`DEFAULT_NAME`] writing to `namespace`'s queue table through
    /// `pool`, at most [`DEFAULT_BATCH_LIMIT`] messages per insert.
    pub fn new(pool: PgPool, namespace: &Namespace) -> Self {
        PgQueueTransport {
            name: DEFAULT_NAME.to_owned(),
            batch_limit: DEFAULT_BATCH_LIMIT,
            pool,
            statements: QueueStatements::new(namespace),
        }
    }

    /// Registers the transport under `name` instead.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Caps each insert at `limit` messages instead.
    pub fn with_batch_limit(mut self, limit: NonZeroUsize) -> Self {
        self.batch_limit = limit;
        self
    }
}

#[async_trait]
impl Transport for PgQueueTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn batch_limit(&self) -> NonZeroUsize {
        self.batch_limit
    }

    async fn send(&self, destination: &str, batch: &[Envelope]) -> Result<Vec<SendOutcome>, TransportError> {
        let connection = self.pool.get().await.map_err(|e| {
            TransportError::transient(format!("no connection to the queue database for {destination:?}"))
                .with_source(e)
        })?;
        self.statements.insert(&*connection, destination, batch).await.map_err(|e| {
            TransportError::transient(format!("inserting into queue {destination:?}")).with_source(e)
        })?;
        Ok(vec![SendOutcome::Accepted; batch.len()])
    }
}
