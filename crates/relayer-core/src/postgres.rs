//! relayer's own types as PostgreSQL values (feature `postgres`): [`MessageId`] as a
//! `uuid`, a message's [`Headers`] as a `jsonb` object of strings ([`JsonbHeaders`]), and
//! external text as `text` only once made a [`BoundedText`](crate::BoundedText).
//!
//! These are the only encoding of the two columns: every statement binds and reads them
//! through [`ToSql`]/[`FromSql`], one value or an array (`Vec<T>`, `&[T]`) at a time. The
//! bytes are the ones a `serde_json::Value` object of strings would give, so rows written
//! before keep reading back. Decoding refuses anything but an object of strings with a
//! [`MalformedHeaders`] saying why, which the storage layer reports as an undecodable row
//! (SPEC §15) instead of failing the rows around it.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;

use bytes::{BufMut, BytesMut};
use postgres_types::{FromSql, IsNull, ToSql, Type, accepts, to_sql_checked};
use serde::Deserializer;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use uuid::Uuid;

use crate::message::{Headers, MessageId};

/// The error type postgres-types conversions return.
type BoxError = Box<dyn Error + Sync + Send>;

impl ToSql for MessageId {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        self.as_uuid().to_sql(ty, out)
    }

    accepts!(UUID);
    to_sql_checked!();
}

/// External text is bound only in this form: no NUL, bounded (SPEC §15).
impl ToSql for crate::BoundedText {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        self.as_str().to_sql(ty, out)
    }

    accepts!(TEXT, VARCHAR);
    to_sql_checked!();
}

impl<'a> FromSql<'a> for MessageId {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Uuid::from_sql(ty, raw).map(MessageId::from_uuid)
    }

    accepts!(UUID);
}

/// A message's headers as a `json`/`jsonb` value: a JSON object whose values are strings.
///
/// Borrowed to bind (`JsonbHeaders::from(&headers)`, no copy), owned when read
/// ([`into_headers`](Self::into_headers)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonbHeaders<'a>(Cow<'a, Headers>);

impl<'a> From<&'a Headers> for JsonbHeaders<'a> {
    fn from(headers: &'a Headers) -> Self {
        JsonbHeaders(Cow::Borrowed(headers))
    }
}

impl From<Headers> for JsonbHeaders<'_> {
    fn from(headers: Headers) -> Self {
        JsonbHeaders(Cow::Owned(headers))
    }
}

impl JsonbHeaders<'_> {
    /// The headers, copied only if they were borrowed.
    pub fn into_headers(self) -> Headers {
        self.0.into_owned()
    }

    /// Writes the headers' JSON text (a `json` value; `jsonb`'s binary format puts a
    /// version byte, 1, before it), for drivers other than tokio-postgres. A map of strings
    /// always serializes, so only `out` can fail; the error is `out`'s, which keeps the
    /// JSON library out of this crate's API.
    pub fn write_json(&self, out: impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(out, self.0.as_ref()).map_err(std::io::Error::from)
    }

    /// Decodes a `json` value's text: the headers, or why the text is not an object of
    /// strings. Fails with a [`MalformedHeaders`] for valid JSON of another shape, with a
    /// `serde_json::Error` for text that is not JSON.
    pub fn from_json(text: &[u8]) -> Result<Headers, BoxError> {
        match serde_json::from_slice::<Decoded>(text)? {
            Decoded(Ok(headers)) => Ok(headers),
            Decoded(Err(malformed)) => Err(Box::new(malformed)),
        }
    }
}

impl ToSql for JsonbHeaders<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        if *ty == Type::JSONB {
            out.put_u8(JSONB_VERSION);
        }
        self.write_json(out.writer())?;
        Ok(IsNull::No)
    }

    accepts!(JSON, JSONB);
    to_sql_checked!();
}

impl<'a> FromSql<'a> for JsonbHeaders<'static> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        let text = if *ty == Type::JSONB {
            match raw.split_first() {
                Some((&JSONB_VERSION, text)) => text,
                _ => return Err("unsupported jsonb encoding version".into()),
            }
        } else {
            raw
        };
        JsonbHeaders::from_json(text).map(JsonbHeaders::from)
    }

    accepts!(JSON, JSONB);
}

/// The only `jsonb` binary format version PostgreSQL has.
const JSONB_VERSION: u8 = 1;

/// Why a JSON value is not a message's headers; its text is the reason an undecodable row
/// names (`expected a JSON object of strings, found null`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedHeaders(String);

impl fmt::Display for MalformedHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for MalformedHeaders {}

impl MalformedHeaders {
    fn not_an_object(found: Kind) -> Self {
        MalformedHeaders(format!("expected a JSON object of strings, found {}", found.0))
    }

    fn value_not_a_string(name: &str, found: Kind) -> Self {
        MalformedHeaders(format!("expected a JSON object of strings, but header {name:?} is {}", found.0))
    }
}

/// What kind of JSON value something is, as a reason says it (`a number`, `null`, …).
#[derive(Clone, Copy, Debug)]
struct Kind(&'static str);

/// Headers parsed straight from the JSON text, without building a `serde_json::Value`;
/// a value of another shape is an answer (`Err`), not a parse error, so its reason carries
/// no parser position.
struct Decoded(Result<Headers, MalformedHeaders>);

impl<'de> serde::Deserialize<'de> for Decoded {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjectOfStrings)
    }
}

/// Visits the top-level value.
struct ObjectOfStrings;

impl<'de> Visitor<'de> for ObjectOfStrings {
    type Value = Decoded;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let mut headers = Headers::new();
        // The first offending header in name order, as a map in name order would meet it
        // (jsonb stores keys shortest first).
        let mut offending: Option<(String, Kind)> = None;
        while let Some(name) = map.next_key::<String>()? {
            match map.next_value::<Value>()?.0 {
                Ok(text) => {
                    headers.insert(name, text);
                }
                Err(kind) => {
                    if offending.as_ref().is_none_or(|(first, _)| name < *first) {
                        offending = Some((name, kind));
                    }
                }
            }
        }
        Ok(Decoded(match offending {
            None => Ok(headers),
            Some((name, kind)) => Err(MalformedHeaders::value_not_a_string(&name, kind)),
        }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Decoded, A::Error> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(skip_seq(seq)?))))
    }

    fn visit_unit<E>(self) -> Result<Decoded, E> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(NULL))))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Decoded, E> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(BOOLEAN))))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Decoded, E> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(NUMBER))))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Decoded, E> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(NUMBER))))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Decoded, E> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(NUMBER))))
    }

    fn visit_str<E>(self, _: &str) -> Result<Decoded, E> {
        Ok(Decoded(Err(MalformedHeaders::not_an_object(STRING))))
    }
}

const NULL: Kind = Kind("null");
const BOOLEAN: Kind = Kind("a boolean");
const NUMBER: Kind = Kind("a number");
const STRING: Kind = Kind("a string");
const ARRAY: Kind = Kind("an array");
const OBJECT: Kind = Kind("an object");

/// Reads past an array's elements (the parser must consume them); it is an array.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Kind, A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(ARRAY)
}

/// One header value: its text, or what kind of JSON value it is instead.
struct Value(Result<String, Kind>);

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(HeaderValue)
    }
}

/// Visits one header value.
struct HeaderValue;

impl<'de> Visitor<'de> for HeaderValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, text: &str) -> Result<Value, E> {
        Ok(Value(Ok(text.to_owned())))
    }

    fn visit_string<E>(self, text: String) -> Result<Value, E> {
        Ok(Value(Ok(text)))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value(Err(NULL)))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value(Err(BOOLEAN)))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value(Err(NUMBER)))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value(Err(NUMBER)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value(Err(NUMBER)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Ok(Value(Err(skip_seq(seq)?)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Value(Err(OBJECT)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Any JSON value, a few levels deep.
    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(serde_json::Value::from),
            ".{0,8}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// `value` through `ToSql` as `ty`, then back through `FromSql`.
    fn round_trip(value: &(dyn ToSql + Sync), ty: &Type) -> Result<Headers, BoxError> {
        let mut out = BytesMut::new();
        value.to_sql_checked(ty, &mut out).unwrap();
        JsonbHeaders::from_sql(ty, &out).map(JsonbHeaders::into_headers)
    }

    /// How the reason reads, whatever the error.
    fn reason(error: &BoxError) -> Option<String> {
        error.downcast_ref::<MalformedHeaders>().map(ToString::to_string)
    }

    proptest! {
        /// SPEC §15: every headers map reads back unchanged through `ToSql` → `FromSql`,
        /// with the very bytes a `serde_json::Value` object would have been written as, so
        /// rows written before this codec read back too.
        #[test]
        fn headers_round_trip_as_jsonb_with_the_bytes_of_a_json_object(
            headers in proptest::collection::btree_map(".{0,8}", ".{0,8}", 0..6),
        ) {
            for ty in [Type::JSONB, Type::JSON] {
                prop_assert_eq!(&round_trip(&JsonbHeaders::from(&headers), &ty).unwrap(), &headers);
                let object: serde_json::Value =
                    headers.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect();
                let (mut ours, mut theirs) = (BytesMut::new(), BytesMut::new());
                JsonbHeaders::from(&headers).to_sql(&ty, &mut ours).unwrap();
                object.to_sql(&ty, &mut theirs).unwrap();
                prop_assert_eq!(ours, theirs);
            }
        }

        /// Any JSON value that is not an object of strings is refused with a reason — never
        /// a panic, never a guess; an object of strings is decoded whole.
        #[test]
        fn exactly_the_objects_of_strings_decode_spec_15(other in json()) {
            let is_headers = matches!(&other, serde_json::Value::Object(map) if map.values().all(serde_json::Value::is_string));
            match round_trip(&other, &Type::JSONB) {
                Ok(decoded) => {
                    prop_assert!(is_headers);
                    let back: serde_json::Value =
                        decoded.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
                    prop_assert_eq!(back, other);
                }
                Err(error) => {
                    prop_assert!(!is_headers);
                    let reason = reason(&error).unwrap();
                    prop_assert!(reason.starts_with("expected a JSON object of strings"), "{}", reason);
                }
            }
        }

        #[test]
        fn message_ids_round_trip_as_uuids(bits in any::<u128>()) {
            let id = MessageId::from_uuid(Uuid::from_u128(bits));
            let mut out = BytesMut::new();
            id.to_sql_checked(&Type::UUID, &mut out).unwrap();
            prop_assert_eq!(MessageId::from_sql(&Type::UUID, &out).unwrap(), id);
        }
    }

    #[test]
    fn malformed_headers_name_the_reason() {
        let refused =
            |json: serde_json::Value| reason(&round_trip(&json, &Type::JSONB).unwrap_err()).unwrap();
        assert_eq!(refused(serde_json::Value::Null), "expected a JSON object of strings, found null");
        assert_eq!(refused(serde_json::json!(["a"])), "expected a JSON object of strings, found an array");
        assert_eq!(refused(serde_json::json!(7)), "expected a JSON object of strings, found a number");
        assert_eq!(
            refused(serde_json::json!({"a": 1})),
            "expected a JSON object of strings, but header \"a\" is a number"
        );
        // The first offender by name, however the text orders them.
        assert_eq!(
            refused(serde_json::json!({"zz": "ok", "b": [1, {"x": 2}], "a": {"y": null}})),
            "expected a JSON object of strings, but header \"a\" is an object"
        );
    }

    #[test]
    fn text_that_is_not_json_or_another_version_is_an_error_without_a_reason() {
        let not_json = JsonbHeaders::from_sql(&Type::JSONB, b"\x01{\"a\":").unwrap_err();
        assert!(reason(&not_json).is_none());
        let version = JsonbHeaders::from_sql(&Type::JSONB, b"\x02{}").unwrap_err();
        assert_eq!(version.to_string(), "unsupported jsonb encoding version");
    }
}
