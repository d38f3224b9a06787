//! JSON paths as messages about config.json and `tool.json` show them
//! (`mcp_servers.fs.args[1]`), how a value is quoted in a message, and the "did you mean"
//! for a misspelt key.

use std::fmt;

use serde_json::Value;

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A JSON path such as `mcp_servers.fs.args[1]`; keys that are not plain words are written
/// as `["a key"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JsonPath(pub Vec<Seg>);

pub(crate) fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'$')
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => write!(f, "[{}]", Value::String(k.clone()))?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// How a value is shown in a message: scalars as JSON (long strings cut), containers by kind.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut shown: String = s.chars().take(60).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            Value::String(shown).to_string()
        }
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// A `serde_ignored` path as our segments.
pub(crate) fn segments(p: &serde_ignored::Path) -> Vec<Seg> {
    use serde_ignored::Path as P;
    match p {
        P::Root => Vec::new(),
        P::Seq { parent, index } => {
            let mut v = segments(parent);
            v.push(Seg::Index(*index));
            v
        }
        P::Map { parent, key } => {
            let mut v = segments(parent);
            v.push(Seg::Key(key.clone()));
            v
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            segments(parent)
        }
    }
}

/// A `serde_path_to_error` path (where deserialising failed) as ours.
pub(crate) fn from_serde_path(p: &serde_path_to_error::Path) -> JsonPath {
    use serde_path_to_error::Segment as S;
    JsonPath(
        p.iter()
            .filter_map(|s| match s {
                S::Seq { index } => Some(Seg::Index(*index)),
                S::Map { key } | S::Enum { variant: key } => Some(Seg::Key(key.clone())),
                S::Unknown => None,
            })
            .collect(),
    )
}

/// The closest known key, if it is close enough to be a likely typo.
pub(crate) fn suggest<'a>(key: &str, known: Vec<&'a str>) -> Option<&'a str> {
    let key_l = key.to_ascii_lowercase();
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(&key_l, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4) && *d < k.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The field names of the struct `T` as its derived `Deserialize` declares them (what it
/// hands to `deserialize_struct`), so a model's known keys need no table kept beside it.
pub(crate) fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};

    /// Ends the probe at once; the fields are all it wanted.
    #[derive(Debug)]
    struct Stop;
    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }

    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> de::Deserializer<'de> for Probe<'_> {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            *self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_formatted() {
        let p = JsonPath(vec![
            Seg::Key("mcp_servers".into()),
            Seg::Key("fs".into()),
            Seg::Key("args".into()),
            Seg::Index(1),
        ]);
        assert_eq!(p.to_string(), "mcp_servers.fs.args[1]");
        let p = JsonPath(vec![Seg::Key("env".into()), Seg::Key("A B".into())]);
        assert_eq!(p.to_string(), "env[\"A B\"]");
    }

    #[test]
    fn field_names_come_from_the_derive() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct T {
            #[serde(rename = "$schema")]
            schema: Option<String>,
            timeout_ms: u64,
        }
        assert_eq!(field_names::<T>(), ["$schema", "timeout_ms"]);
        assert_eq!(
            suggest("timout_ms", field_names::<T>().to_vec()),
            Some("timeout_ms")
        );
        assert_eq!(suggest("x", field_names::<T>().to_vec()), None);
    }
}
