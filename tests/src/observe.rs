//! Reading relayer's tables as an observer: what reached the PostgreSQL queue (for
//! [`audit`](crate::audit())) and what is still waiting in the outbox.

use relayer::Namespace;
use uuid::Uuid;

use crate::audit::Delivery;

/// Every message id in `namespace`'s queue table, with its first queue seq and its number
/// of deliveries.
pub async fn read_deliveries(
    client: &tokio_postgres::Client,
    namespace: &Namespace,
) -> Result<Vec<Delivery>, tokio_postgres::Error> {
    let sql = format!(
        "SELECT message_id, min(seq), count(*) FROM {} GROUP BY message_id",
        namespace.table("queue")
    );
    let rows = client.query(&sql, &[]).await?;
    Ok(rows
        .iter()
        .map(|row| Delivery { id: row.get::<_, Uuid>(0), first: row.get(1), count: row.get(2) })
        .collect())
}

/// How many rows `namespace`'s outbox holds (pending, claimed, scheduled or parked).
pub async fn outbox_rows(
    client: &tokio_postgres::Client,
    namespace: &Namespace,
) -> Result<i64, tokio_postgres::Error> {
    let sql = format!("SELECT count(*) FROM {}", namespace.table("outbox"));
    Ok(client.query_one(&sql, &[]).await?.get(0))
}
