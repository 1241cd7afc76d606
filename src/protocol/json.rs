//! Strict JSON: the one reader for JSON another party wrote (A2A request bodies, Agent Cards,
//! key sets, JWS protected headers).
//!
//! `serde_json` keeps the last of two members with the same name, and other readers keep the
//! first; a message two readers understand differently is how signature and authorization
//! checks get bypassed. So every object, at every depth, must name each member once. Every
//! string is decoded, so a lone surrogate anywhere fails. For documents that get signed, an
//! integer a double cannot hold exactly is refused too: RFC 8785 can only write it rounded, so
//! two different cards would share one payload.
//!
//! ```
//! use peergate::protocol::json::{self, Integers, StrictError};
//! assert!(json::check(r#"{"a": {"b": 1}}"#).is_ok());
//! assert!(matches!(json::check(r#"{"a": {"b": 1, "b": 2}}"#), Err(StrictError::Repeated(_))));
//! assert!(json::parse("9007199254740993", Integers::ExactInDouble).is_err());
//! ```

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Which integers a document may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integers {
    /// Any JSON integer.
    Any,
    /// Only those a double holds exactly (documents canonicalized by RFC 8785).
    ExactInDouble,
}

/// Why text is not strict JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StrictError {
    /// Not JSON at all (or not UTF-8, or a lone surrogate).
    #[error("not JSON: {0}")]
    Syntax(String),
    /// JSON, but an object names a member twice.
    #[error("duplicate member {0}")]
    Repeated(String),
    /// JSON, but a value this document may not hold (an inexact integer).
    #[error("{0}")]
    Value(String),
}

/// Checks `text` without building anything: the cheap form for bodies that are then read into
/// types.
pub fn check(text: &str) -> Result<(), StrictError> {
    read::<false>(text, Integers::Any).map(|_| ())
}

/// Reads `text` into a value.
pub fn parse(text: &str, integers: Integers) -> Result<Value, StrictError> {
    read::<true>(text, integers).map(|value| value.unwrap_or(Value::Null))
}

/// Reads a JSON object (a JWS protected header, say).
pub fn parse_object(bytes: &[u8], integers: Integers) -> Result<Map<String, Value>, StrictError> {
    let text = std::str::from_utf8(bytes).map_err(|_| StrictError::Syntax("not UTF-8".into()))?;
    match parse(text, integers)? {
        Value::Object(map) => Ok(map),
        _ => Err(StrictError::Value("not a JSON object".into())),
    }
}

const REPEATED: &str = "duplicate member ";
const INEXACT: &str = "an integer a double cannot hold exactly";

fn read<const BUILD: bool>(text: &str, integers: Integers) -> Result<Option<Value>, StrictError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = Reader::<BUILD> { integers }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value))
        .map_err(|e| {
            let message = e.to_string();
            let message = message.split(" at line ").next().unwrap_or("").to_owned();
            if !e.is_data() {
                StrictError::Syntax(message)
            } else if let Some(name) = message.strip_prefix(REPEATED) {
                StrictError::Repeated(name.to_owned())
            } else {
                StrictError::Value(message)
            }
        })?;
    Ok(value)
}

/// Reads one value; builds it only when `BUILD`.
#[derive(Clone, Copy)]
struct Reader<const BUILD: bool> {
    integers: Integers,
}

impl<'de, const BUILD: bool> DeserializeSeed<'de> for Reader<BUILD> {
    type Value = Option<Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<const BUILD: bool> Reader<BUILD> {
    fn integer<E: de::Error>(
        self,
        v: i128,
        value: impl FnOnce() -> Value,
    ) -> Result<Option<Value>, E> {
        if self.integers == Integers::ExactInDouble && !exact_as_double(v) {
            return Err(E::custom(INEXACT));
        }
        Ok(BUILD.then(value))
    }
}

impl<'de, const BUILD: bool> Visitor<'de> for Reader<BUILD> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(BUILD.then_some(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.integer(i128::from(v), || Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.integer(i128::from(v), || Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        if !BUILD {
            return Ok(None);
        }
        serde_json::Number::from_f64(v)
            .map(|n| Some(Value::Number(n)))
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(BUILD.then(|| Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(BUILD.then_some(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(BUILD.then_some(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.extend(item);
        }
        Ok(BUILD.then_some(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        let mut out = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("{REPEATED}{key:?}")));
            }
            let value = map.next_value_seed(self)?;
            if let Some(value) = value {
                out.insert(key.into_owned(), value);
            }
        }
        Ok(BUILD.then_some(Value::Object(out)))
    }
}

/// Whether an integer keeps its own spelling through RFC 8785, which writes every number as
/// the shortest form of the nearest IEEE double: `9007199254740993` becomes
/// `9007199254740992` (two cards, one payload: refused), while `10000000000000000000` stays.
pub fn exact_as_double(v: i128) -> bool {
    #[allow(clippy::cast_precision_loss)]
    let nearest = v as f64;
    serde_json_canonicalizer::to_string(&nearest).is_ok_and(|text| text == v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_members_are_refused_at_every_depth() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"x":{"a":1,"a":2}}"#,
            r#"[{"a":1},{"b":{"c":[{"d":1,"d":1}]}}]"#,
        ] {
            assert!(
                matches!(check(text), Err(StrictError::Repeated(_))),
                "{text}"
            );
            assert!(
                matches!(parse(text, Integers::Any), Err(StrictError::Repeated(_))),
                "{text}"
            );
        }
        assert_eq!(
            parse(r#"{"a":{"b":[1,"x",null]}}"#, Integers::Any).unwrap(),
            serde_json::json!({"a": {"b": [1, "x", null]}})
        );
    }

    #[test]
    fn syntax_and_surrogates_are_syntax_errors() {
        for text in ["{", r#""\ud800""#, "1 2", ""] {
            assert!(
                matches!(check(text), Err(StrictError::Syntax(_))),
                "{text:?}"
            );
        }
    }

    #[test]
    fn inexact_integers_only_where_asked() {
        let big = "9007199254740993";
        assert!(parse(big, Integers::Any).is_ok());
        assert!(matches!(
            parse(big, Integers::ExactInDouble),
            Err(StrictError::Value(_))
        ));
    }
}
