//! Reading what reached relayer's PostgreSQL queue, for [`audit`](crate::audit()).

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
