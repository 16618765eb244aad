//! Running an enqueue statement of relayer-postgres through sqlx: its parameters bound as
//! the tokio-postgres writers bind them, its `(seq, message_id)` rows read back.

use relayer_core::MessageId;
use relayer_postgres::{EnqueueParam, Enqueued};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use crate::wire::{PgJsonb, PgTimestamptz, PgUuid};

/// Runs `statement` with `params` (`$1` first) on `executor`, prepared and cached by sqlx
/// when `persistent`, and returns the written rows in order.
pub(crate) async fn run_enqueue<'c, E>(
    executor: E,
    statement: &str,
    params: Vec<EnqueueParam<'_>>,
    persistent: bool,
) -> Result<Vec<Enqueued>, sqlx::Error>
where
    E: sqlx::Executor<'c, Database = Postgres>,
{
    // The three column types sqlx cannot encode without its features are re-typed.
    let bound: Vec<Bound<'_>> = params
        .into_iter()
        .map(|param| match param {
            EnqueueParam::MessageIds(values) => {
                Bound::Uuids(values.iter().map(|id| PgUuid(*id.as_uuid())).collect())
            }
            EnqueueParam::Headers(values) => Bound::Jsons(values.iter().map(PgJsonb).collect()),
            EnqueueParam::OptionalTimestamps(values) => {
                Bound::Timestamps(values.iter().map(|at| at.map(PgTimestamptz)).collect())
            }
            EnqueueParam::Id(id) => Bound::Uuid(PgUuid(*id.as_uuid())),
            EnqueueParam::HeaderObject(headers) => Bound::Json(PgJsonb(headers)),
            EnqueueParam::OptionalTimestamp(at) => Bound::Timestamp(at.map(PgTimestamptz)),
            other => Bound::AsIs(other),
        })
        .collect();
    let mut query: Query<'_, Postgres, PgArguments> = sqlx::query(statement).persistent(persistent);
    for param in &bound {
        query = match param {
            Bound::Uuids(values) => query.bind(values),
            Bound::Jsons(values) => query.bind(values),
            Bound::Timestamps(values) => query.bind(values),
            Bound::Uuid(value) => query.bind(*value),
            Bound::Json(value) => query.bind(*value),
            Bound::Timestamp(value) => query.bind(*value),
            Bound::AsIs(EnqueueParam::OptionalText(value)) => query.bind(*value),
            Bound::AsIs(EnqueueParam::Body(value)) => query.bind(*value),
            Bound::AsIs(EnqueueParam::OptionalInt8(value)) => query.bind(*value),
            Bound::AsIs(EnqueueParam::Texts(values)) => query.bind(*values),
            Bound::AsIs(EnqueueParam::OptionalTexts(values)) => query.bind(*values),
            Bound::AsIs(EnqueueParam::Bytes(values)) => query.bind(*values),
            Bound::AsIs(EnqueueParam::OptionalInt8s(values)) => query.bind(*values),
            Bound::AsIs(EnqueueParam::Int8s(values)) => query.bind(*values),
            Bound::AsIs(EnqueueParam::Text(value)) => query.bind(*value),
            // A parameter kind this adapter does not know yet: fail rather than misbind.
            Bound::AsIs(other) => {
                return Err(sqlx::Error::Encode(
                    format!("relayer-sqlx cannot bind the enqueue parameter {other:?}").into(),
                ));
            }
        };
    }
    let rows = query.fetch_all(executor).await?;
    rows.iter()
        .map(|row| {
            let seq: i64 = row.try_get(0)?;
            let id: PgUuid = row.try_get(1)?;
            Ok(Enqueued { seq, id: MessageId::from_uuid(id.0) })
        })
        .collect()
}

/// One enqueue parameter as sqlx binds it.
enum Bound<'a> {
    Uuids(Vec<PgUuid>),
    Jsons(Vec<PgJsonb<'a, 'a>>),
    Timestamps(Vec<Option<PgTimestamptz>>),
    Uuid(PgUuid),
    Json(PgJsonb<'a, 'a>),
    Timestamp(Option<PgTimestamptz>),
    AsIs(EnqueueParam<'a>),
}
