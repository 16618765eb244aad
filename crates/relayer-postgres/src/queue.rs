//! The PostgreSQL queue table, producer side (QUE-1).
//!
//! relayer's own queue transport stores each message as a row of the `queue` table, the
//! queue name in `queue`. Producing is one multi-row insert per batch (through `unnest`,
//! one round trip); the message's id, headers, body, creation context and `created_at` are
//! kept as the outbox had them, and `visible_at` defaults to the insert's `now()`, so the
//! message is receivable at once. Consumers (a later layer) receive with
//! `FOR UPDATE SKIP LOCKED` through `queue_receive_idx`.

use std::time::SystemTime;

use relayer_core::{Envelope, Namespace};
use tokio_postgres::types::{ToSql, Type};

use crate::error::StorageError;
use crate::exec::Executor;

/// The queue statements rendered for one namespace.
#[derive(Clone, Debug)]
pub struct QueueStatements {
    insert: String,
}

impl QueueStatements {
    /// Renders the statements for `namespace`.
    pub fn new(namespace: &Namespace) -> Self {
        let queue = namespace.table("queue");
        QueueStatements {
            // Index: none read; maintains queue_pkey and queue_receive_idx.
            insert: format!(
                "INSERT INTO {queue} (message_id, queue, body, headers, trace_context, created_at) \
                 SELECT m.id, $1, m.body, m.headers, m.trace_context, m.created_at \
                 FROM unnest($2::uuid[], $3::bytea[], $4::jsonb[], $5::text[], $6::timestamptz[]) \
                      WITH ORDINALITY AS m(id, body, headers, trace_context, created_at, ord) \
                 ORDER BY m.ord"
            ),
        }
    }

    /// Inserts `messages` into queue `queue`, in order, in one statement; returns how many
    /// rows were inserted.
    pub async fn insert(
        &self,
        client: &impl Executor,
        queue: &str,
        messages: &[Envelope],
    ) -> Result<u64, StorageError> {
        let ids: Vec<_> = messages.iter().map(|m| *m.id.as_uuid()).collect();
        let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
        let headers: Vec<serde_json::Value> =
            messages.iter().map(|m| crate::row_codec::headers_to_json(&m.headers)).collect();
        let trace_contexts: Vec<Option<&str>> = messages.iter().map(|m| m.trace_context.as_deref()).collect();
        let created_at: Vec<SystemTime> = messages.iter().map(|m| m.created_at.to_system_time()).collect();
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&queue, Type::TEXT),
            (&ids, Type::UUID_ARRAY),
            (&bodies, Type::BYTEA_ARRAY),
            (&headers, Type::JSONB_ARRAY),
            (&trace_contexts, Type::TEXT_ARRAY),
            (&created_at, Type::TIMESTAMPTZ_ARRAY),
        ];
        client.affected(&self.insert, &params).await.map_err(|e| {
            StorageError::database(format!("inserting {} messages into queue {queue:?}", messages.len()), e)
        })
    }
}
