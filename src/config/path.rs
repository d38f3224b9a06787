//! JSON paths as config messages show them (`mcp_servers.fs.args[1]`), and how a value is
//! quoted in a message.

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
}
