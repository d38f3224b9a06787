//! Pins: the definition of each MCP and custom tool as first seen or last approved, kept in
//! `pins.json` in the data dir, so a changed definition is caught across restarts.
//!
//! A small JSON file rather than a sled tree: it is rewritten only when a pin changes (new
//! tools, approvals), read once at start, and an operator can inspect or delete it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::atomic_file::{write_atomic, Durability};
use crate::protocol::McpTool;

/// The largest pin file read (ten thousand tools with large schemas fit easily).
const MAX_PINS_BYTES: u64 = 64 * 1024 * 1024;

/// One pinned definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub hash: String,
    pub definition: McpTool,
}

/// The pin table; every method is short and never blocks on anything but its own file.
pub struct Pins {
    path: Option<PathBuf>,
    pins: Mutex<BTreeMap<String, Pin>>,
}

impl Pins {
    /// Pins kept in memory only (tests, and hosts without a data dir).
    pub fn in_memory() -> Pins {
        Pins {
            path: None,
            pins: Mutex::default(),
        }
    }

    /// Opens (or starts) the pin file. An unreadable file is reported and set aside, so a
    /// corrupt file cannot keep the daemon from starting; its tools are pinned afresh.
    pub fn open(path: &Path) -> Pins {
        let pins = match crate::safe_read::read_in_folder(path, MAX_PINS_BYTES) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(p) => p,
                Err(e) => {
                    let aside = path.with_extension("json.corrupt");
                    tracing::error!(%e, file = %path.display(), aside = %aside.display(), "pin file unreadable; starting afresh");
                    let _ = std::fs::rename(path, aside);
                    BTreeMap::new()
                }
            },
            Err(crate::safe_read::ReadError::NotFound) => BTreeMap::new(),
            Err(e) => {
                tracing::error!(file = %path.display(), "pin file {e}; starting afresh");
                BTreeMap::new()
            }
        };
        Pins {
            path: Some(path.to_path_buf()),
            pins: Mutex::new(pins),
        }
    }

    pub fn get(&self, name: &str) -> Option<Pin> {
        crate::lock(&self.pins).get(name).cloned()
    }

    /// Whether `name` is pinned with exactly `hash`.
    pub fn matches(&self, name: &str, hash: &str) -> Option<bool> {
        crate::lock(&self.pins).get(name).map(|p| p.hash == hash)
    }

    /// Pins many definitions at once (one file write).
    pub fn set_all(&self, new: Vec<(String, Pin)>) {
        if new.is_empty() {
            return;
        }
        let mut pins = crate::lock(&self.pins);
        for (name, pin) in new {
            pins.insert(name, pin);
        }
        self.save(&pins);
    }

    fn save(&self, pins: &BTreeMap<String, Pin>) {
        let Some(path) = &self.path else { return };
        let bytes = match serde_json::to_vec(pins) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(%e, "cannot encode the pin table");
                return;
            }
        };
        if let Err(e) = write_atomic(path, &bytes, Durability::Synced) {
            tracing::error!(%e, file = %path.display(), "cannot write the pin table");
        }
    }
}

/// The pin hash of a definition: SHA-256 of its canonical JSON (object keys sorted, so a
/// server that reorders keys does not look changed).
pub fn hash_of(def: &McpTool) -> String {
    let value = serde_json::to_value(def).unwrap_or(Value::Null);
    let mut h = Sha256::new();
    canonical(&value, &mut h);
    hex::encode(&h.finalize()[..16])
}

fn canonical(v: &Value, h: &mut Sha256) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                if let Some(inner) = map.get(k) {
                    canonical(inner, h);
                }
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(items) => {
            h.update(b"[");
            for i in items {
                canonical(i, h);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => h.update(other.to_string().as_bytes()),
    }
}

/// The parts of a definition that differ between `old` and `new`.
pub fn changed_parts(old: &McpTool, new: &McpTool) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |name: &str, same: bool| {
        if !same {
            out.push(name.to_owned());
        }
    };
    check("title", old.title == new.title);
    check("description", old.description == new.description);
    check(
        "input_schema",
        same_json(&old.input_schema, &new.input_schema),
    );
    check(
        "output_schema",
        match (&old.output_schema, &new.output_schema) {
            (Some(a), Some(b)) => same_json(a, b),
            (a, b) => a.is_none() && b.is_none(),
        },
    );
    check(
        "annotations",
        match (&old.annotations, &new.annotations) {
            (Some(a), Some(b)) => same_json(a, b),
            (a, b) => a.is_none() && b.is_none(),
        },
    );
    out
}

fn same_json(a: &Value, b: &Value) -> bool {
    let (mut ha, mut hb) = (Sha256::new(), Sha256::new());
    canonical(a, &mut ha);
    canonical(b, &mut hb);
    ha.finalize() == hb.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(desc: &str, schema: Value) -> McpTool {
        McpTool {
            name: "t".into(),
            title: None,
            description: desc.into(),
            input_schema: schema,
            output_schema: None,
            annotations: None,
        }
    }

    #[test]
    fn key_order_does_not_change_the_hash_but_content_does() {
        let a = tool(
            "d",
            json!({"type": "object", "properties": {"x": {}, "y": {}}}),
        );
        let b: McpTool = serde_json::from_str(
            r#"{"name":"t","description":"d","inputSchema":{"properties":{"y":{},"x":{}},"type":"object"}}"#,
        )
        .unwrap();
        assert_eq!(hash_of(&a), hash_of(&b));
        let c = tool("d2", a.input_schema.clone());
        assert_ne!(hash_of(&a), hash_of(&c));
        assert_eq!(changed_parts(&a, &c), vec!["description".to_owned()]);
    }

    #[test]
    fn pins_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        let t = tool("d", json!({"type": "object"}));
        let pins = Pins::open(&path);
        pins.set_all(vec![(
            "t".into(),
            Pin {
                hash: hash_of(&t),
                definition: t.clone(),
            },
        )]);
        let again = Pins::open(&path);
        assert_eq!(again.matches("t", &hash_of(&t)), Some(true));
        assert_eq!(again.get("t").unwrap().definition, t);
    }
}
