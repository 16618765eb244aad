//! The raw limit's transport step: relayer's queue insert issued by hand, the floor the
//! dispatch and recovery benchmarks compare relayer against.

use relayer_core::Namespace;

use crate::scratch::BenchResult;

/// The raw loops' transport step: relayer's queue insert (one `unnest` statement),
/// prepared on `transport`.
pub(crate) async fn prepare_raw_queue_insert(
    transport: &tokio_postgres::Client,
    namespace: &Namespace,
) -> BenchResult<tokio_postgres::Statement> {
    let queue = namespace.table("queue");
    Ok(transport
        .prepare(&format!(
            "INSERT INTO {queue} (message_id, queue, body, headers, trace_context, created_at) \
             SELECT m.id, $1, m.body, m.headers, m.trace_context, m.created_at \
             FROM unnest($2::uuid[], $3::bytea[], $4::jsonb[], $5::text[], $6::timestamptz[]) \
                  WITH ORDINALITY AS m(id, body, headers, trace_context, created_at, ord) \
             ORDER BY m.ord"
        ))
        .await?)
}

/// Sends `rows` (`seq, message_id, destination, body, headers, trace_context, created_at`,
/// one destination) with `insert` on `transport`, committed on its own; returns their seqs.
pub(crate) async fn raw_queue_insert(
    transport: &tokio_postgres::Client,
    insert: &tokio_postgres::Statement,
    rows: &[tokio_postgres::Row],
) -> BenchResult<Vec<i64>> {
    let seqs: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
    let destination: String = rows[0].get(2);
    let bodies: Vec<Vec<u8>> = rows.iter().map(|r| r.get(3)).collect();
    let headers: Vec<serde_json::Value> = rows.iter().map(|r| r.get(4)).collect();
    let traces: Vec<Option<String>> = rows.iter().map(|r| r.get(5)).collect();
    let created: Vec<std::time::SystemTime> = rows.iter().map(|r| r.get(6)).collect();
    transport.execute(insert, &[&destination, &ids, &bodies, &headers, &traces, &created]).await?;
    Ok(seqs)
}
