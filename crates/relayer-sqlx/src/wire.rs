//! The binary encodings of the enqueue statement's uuid, jsonb and timestamptz values,
//! written exactly as tokio-postgres writes them, so both drivers send the same bytes
//! without enabling sqlx's `uuid`, `json` or `chrono` features. Headers are written by
//! the one codec relayer-postgres binds them with (`relayer_core::postgres::JsonbHeaders`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relayer_core::postgres::JsonbHeaders;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Encode, Postgres, Type};
use uuid::Uuid;

/// A `uuid` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PgUuid(pub(crate) Uuid);

/// A message's headers as a `jsonb` value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PgJsonb<'a, 'h>(pub(crate) &'a JsonbHeaders<'h>);

/// A `timestamptz` value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PgTimestamptz(pub(crate) SystemTime);

// The built-in type OIDs (pg_type.dat): fixed by PostgreSQL, no catalog lookup needed.
const UUID: u32 = 2950;
const UUID_ARRAY: u32 = 2951;
const JSONB: u32 = 3802;
const JSONB_ARRAY: u32 = 3807;
const TIMESTAMPTZ: u32 = 1184;
const TIMESTAMPTZ_ARRAY: u32 = 1185;

/// `Type` and `PgHasArrayType` for a wrapper: the built-in type and its array type, by OID.
macro_rules! builtin_type {
    ($wrapper:ty, $oid:expr, $array_oid:expr) => {
        impl Type<Postgres> for $wrapper {
            fn type_info() -> PgTypeInfo {
                PgTypeInfo::with_oid(Oid($oid))
            }
        }

        impl PgHasArrayType for $wrapper {
            fn array_type_info() -> PgTypeInfo {
                PgTypeInfo::with_oid(Oid($array_oid))
            }
        }
    };
}

builtin_type!(PgUuid, UUID, UUID_ARRAY);
builtin_type!(PgJsonb<'_, '_>, JSONB, JSONB_ARRAY);
builtin_type!(PgTimestamptz, TIMESTAMPTZ, TIMESTAMPTZ_ARRAY);

/// 2000-01-01T00:00:00Z, PostgreSQL's epoch, in seconds after the Unix epoch.
const POSTGRES_EPOCH_UNIX_SECONDS: u64 = 946_684_800;

impl Encode<'_, Postgres> for PgUuid {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
}

impl Decode<'_, Postgres> for PgUuid {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        let uuid = match value.format() {
            PgValueFormat::Binary => Uuid::from_slice(value.as_bytes()?)?,
            PgValueFormat::Text => value.as_str()?.parse()?,
        };
        Ok(PgUuid(uuid))
    }
}

impl Encode<'_, Postgres> for PgJsonb<'_, '_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        // jsonb's binary format: a version byte (1), then the JSON text.
        buf.push(1);
        self.0.write_json(&mut **buf)?;
        Ok(IsNull::No)
    }
}

impl Encode<'_, Postgres> for PgTimestamptz {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend_from_slice(&postgres_micros(self.0)?.to_be_bytes());
        Ok(IsNull::No)
    }
}

/// Microseconds since PostgreSQL's epoch, rounded as tokio-postgres rounds (toward the
/// epoch), so both drivers store the same instant.
fn postgres_micros(time: SystemTime) -> Result<i64, BoxDynError> {
    let epoch = UNIX_EPOCH + Duration::from_secs(POSTGRES_EPOCH_UNIX_SECONDS);
    let micros = |d: Duration| i64::try_from(d.as_micros());
    let value = match time.duration_since(epoch) {
        Ok(after) => micros(after)?,
        Err(before) => -micros(before.duration())?,
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The epoch itself, a microsecond either side, and a known instant.
    #[test]
    fn timestamps_count_microseconds_from_the_postgres_epoch() {
        let epoch = UNIX_EPOCH + Duration::from_secs(POSTGRES_EPOCH_UNIX_SECONDS);
        let at = |t: SystemTime| postgres_micros(t).ok();
        assert_eq!(at(epoch), Some(0));
        assert_eq!(at(epoch + Duration::from_micros(1)), Some(1));
        assert_eq!(at(epoch - Duration::from_micros(1)), Some(-1));
        // Sub-microsecond parts are dropped toward the epoch, as tokio-postgres drops them.
        assert_eq!(at(epoch + Duration::from_nanos(1_999)), Some(1));
        assert_eq!(at(epoch - Duration::from_nanos(1_999)), Some(-1));
        // 2026-01-01T00:00:00Z.
        assert_eq!(at(UNIX_EPOCH + Duration::from_secs(1_767_225_600)), Some(820_540_800_000_000));
    }
}
