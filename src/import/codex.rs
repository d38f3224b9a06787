//! Codex: `~/.codex/config.toml`, one `[mcp_servers.NAME]` table per server. Read and
//! rewritten with `toml_edit`, so the rest of the file keeps its comments and layout.

use serde_json::{Map, Value};
use toml_edit::{DocumentMut, Item, TableLike};

use super::Entry;

const KEY: &str = "mcp_servers";

/// Parses `text` into its entries.
pub fn read(text: &str) -> Result<Vec<Entry>, String> {
    let doc: DocumentMut = text.parse().map_err(toml_error)?;
    let Some(servers) = doc.get(KEY).and_then(Item::as_table_like) else {
        return Ok(Vec::new());
    };
    Ok(servers
        .iter()
        .map(|(name, item)| Entry {
            at: vec![KEY.to_owned()],
            name: name.to_owned(),
            raw: item_json(item),
        })
        .collect())
}

/// `text` without the servers named in `remove`, with (when `entry` is given) a
/// `[mcp_servers.toolhost]` running `command args…`.
pub fn rewrite(
    text: &str,
    remove: &[String],
    entry: Option<(&str, &[&str])>,
) -> Result<String, String> {
    let mut doc: DocumentMut = text.parse().map_err(toml_error)?;
    let servers = doc
        .entry(KEY)
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or_else(|| format!("{KEY} is not a table"))?;
    for name in remove {
        servers.remove(name);
    }
    let Some((command, args)) = entry else {
        return Ok(doc.to_string());
    };
    let mut entry = toml_edit::Table::new();
    entry.insert("command", toml_edit::value(command));
    let mut list = toml_edit::Array::new();
    for a in args {
        list.push(*a);
    }
    entry.insert("args", toml_edit::value(list));
    servers.insert(super::TOOLHOST, Item::Table(entry));
    Ok(doc.to_string())
}

/// A TOML item as JSON (dates as their text; TOML has no null).
fn item_json(item: &Item) -> Value {
    match item {
        Item::None => Value::Null,
        Item::Value(v) => value_json(v),
        Item::Table(t) => table_json(t),
        Item::ArrayOfTables(a) => Value::Array(a.iter().map(|t| table_json(t)).collect()),
    }
}

fn table_json(t: &dyn TableLike) -> Value {
    Value::Object(
        t.iter()
            .map(|(k, v)| (k.to_owned(), item_json(v)))
            .collect::<Map<String, Value>>(),
    )
}

fn value_json(v: &toml_edit::Value) -> Value {
    use toml_edit::Value as T;
    match v {
        T::String(s) => Value::String(s.value().clone()),
        T::Integer(i) => Value::from(*i.value()),
        T::Float(f) => Value::from(*f.value()),
        T::Boolean(b) => Value::Bool(*b.value()),
        T::Datetime(d) => Value::String(d.value().to_string()),
        T::Array(a) => Value::Array(a.iter().map(value_json).collect()),
        T::InlineTable(t) => table_json(t),
    }
}

/// A TOML error without the snippet `TomlError` prints: the offending line may be
/// hundreds of kilobytes (200,000 nested brackets).
fn toml_error(e: toml_edit::TomlError) -> String {
    match e.span() {
        Some(at) => format!(
            "TOML parse error at byte {}: {}",
            at.start,
            e.message().trim_end()
        ),
        None => format!("TOML parse error: {}", e.message().trim_end()),
    }
}
