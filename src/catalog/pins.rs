//! Pins: the definition of each MCP and custom tool as first seen or last approved, kept in
//! `pins.json` in the data dir, so a changed definition is caught across restarts.
//!
//! A small JSON file rather than a sled tree: it is rewritten only when a pin changes (new
//! tools, approvals), read once at start, and an operator can inspect or delete it.
//!
//! A pin file that exists but cannot be read as a pin table (truncated, garbage, empty, a
//! directory, too large) is *damage*, not absence: starting afresh would pin every changed
//! definition as if the user had approved it. While the store is damaged nothing is
//! approved or written, every tool that would be checked against a pin is quarantined
//! ([`crate::catalog::verdict`]), and `host.health` names the file. The damage ends when the
//! file reads again (checked at every registry rebuild: a reload, an approval) or when the
//! operator resets the store ([`Pins::reset`]), which moves the damaged file aside.
//!
//! In fleet mode the pins are the fleet's ([`Shared`], src/fleet/pins.rs): approved on one
//! member, trusted on all; and a definition one member sees differ from its pin is *marked*
//! for the whole fleet, so every member quarantines the tool until someone approves a
//! definition. The table here is then a copy of the database's, read again whenever a member
//! changes it (LISTEN/NOTIFY, [`Pins::reload`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
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

/// The fleet's pins and marks, when the daemon is a member of one (src/fleet/).
pub trait Shared: Send + Sync {
    /// Every pin and every mark in the fleet.
    fn load(&self) -> Result<Table, String>;
    /// Pins `new` for the fleet (ending their marks) and tells the other members.
    fn pin(&self, new: &[(String, Pin)]) -> Result<(), String>;
    /// Marks `seen` (a changed definition, by tool name) for the fleet and tells the other
    /// members: each quarantines the tool until a definition is approved.
    fn mark(&self, seen: &[(String, Pin)]) -> Result<(), String>;
}

/// A pin as held in memory: its definition as the compact JSON it is written as, parsed
/// only when a changed definition is judged or shown. The pins of every tool ever seen
/// stay (a tool that comes back changed is still caught), and a parsed definition held
/// for each cost ≈ 1 KB of heap per tool (1,000 projects' tools, `benches/idle.rs
/// workspaces`); its text is a third of that, and the file is written from it as is.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    hash: String,
    definition: Box<RawValue>,
}

impl Kept {
    fn of(pin: &Pin) -> Result<Kept, String> {
        Ok(Kept {
            hash: pin.hash.clone(),
            definition: serde_json::value::to_raw_value(&pin.definition)
                .map_err(|e| format!("cannot encode the definition: {e}"))?,
        })
    }

    /// The pin, its definition parsed (written by [`Kept::of`] or read from a file whose
    /// pins parsed at load, so it parses).
    fn pin(&self) -> Option<Pin> {
        let definition = serde_json::from_str(self.definition.get()).ok()?;
        Some(Pin {
            hash: self.hash.clone(),
            definition,
        })
    }
}

/// The pins in memory, from a table of parsed ones.
fn kept(pins: BTreeMap<String, Pin>) -> BTreeMap<String, Kept> {
    pins.into_iter()
        .filter_map(|(name, pin)| Some((name, Kept::of(&pin).ok()?)))
        .collect()
}

/// The pins and the marks ([`Shared`]), by tool name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Table {
    pub pins: BTreeMap<String, Pin>,
    pub marks: BTreeMap<String, Pin>,
}

/// The pin table; every method is short and never blocks on anything but its own file (or,
/// in fleet mode, the database, within its timeout).
pub struct Pins {
    path: Option<PathBuf>,
    shared: Option<std::sync::Arc<dyn Shared>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pins: BTreeMap<String, Kept>,
    /// Changed definitions some member of the fleet saw (fleet mode only).
    marks: BTreeMap<String, Pin>,
    /// Why the file could not be read, naming it; `Some` while the store is damaged.
    damage: Option<String>,
}

impl Pins {
    /// Pins kept in memory only (tests, and hosts without a data dir).
    pub fn in_memory() -> Pins {
        Pins {
            path: None,
            shared: None,
            state: Mutex::default(),
        }
    }

    /// The fleet's pins (fleet mode). A table that cannot be read at start is damage, as a
    /// file's is: nothing is approved against pins this member cannot see.
    pub fn shared(shared: std::sync::Arc<dyn Shared>) -> Pins {
        let state = match shared.load() {
            Ok(t) => State {
                pins: kept(t.pins),
                marks: t.marks,
                damage: None,
            },
            Err(e) => State {
                damage: Some(shared_damage(&e)),
                ..State::default()
            },
        };
        Pins {
            path: None,
            shared: Some(shared),
            state: Mutex::new(state),
        }
    }

    /// Reads the fleet's table again (another member pinned or marked a tool); `true` when
    /// it changed. A failure leaves the copy as it is (the database may be away for a while).
    pub fn reload(&self) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let table = match shared.load() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the fleet's pins; keeping the last copy");
                return false;
            }
        };
        let mut state = crate::lock(&self.state);
        let same_pins = state.pins.len() == table.pins.len()
            && (state.pins.iter().zip(&table.pins))
                .all(|((n, k), (m, p))| n == m && k.hash == p.hash);
        let changed = state.damage.is_some() || !same_pins || state.marks != table.marks;
        *state = State {
            pins: kept(table.pins),
            marks: table.marks,
            damage: None,
        };
        changed
    }

    /// The changed definition of `name` a member of the fleet saw, while it is marked.
    pub fn marked(&self, name: &str) -> Option<Pin> {
        crate::lock(&self.state).marks.get(name).cloned()
    }

    /// Marks changed definitions for the fleet (fleet mode; nothing otherwise). Only what is
    /// not marked already with the same definition is written.
    pub fn mark(&self, seen: Vec<(String, Pin)>) {
        let Some(shared) = &self.shared else { return };
        let mut state = crate::lock(&self.state);
        let new: Vec<(String, Pin)> = seen
            .into_iter()
            .filter(|(name, pin)| state.marks.get(name).is_none_or(|m| m.hash != pin.hash))
            .collect();
        if new.is_empty() {
            return;
        }
        match shared.mark(&new) {
            Ok(()) => state.marks.extend(new),
            Err(e) => tracing::warn!(error = %e, "cannot mark changed definitions for the fleet"),
        }
    }

    /// Opens (or starts, when there is no file yet) the pin file. A damaged file does not
    /// keep the daemon from starting: it is left where it is and the store is damaged.
    pub fn open(path: &Path) -> Pins {
        let state = match load(path) {
            Ok(pins) => State {
                pins: kept(pins),
                ..State::default()
            },
            Err(damage) => {
                tracing::error!(file = %path.display(), "{damage}; pinned tools are quarantined until it is repaired or reset");
                State {
                    damage: Some(damage),
                    ..State::default()
                }
            }
        };
        Pins {
            path: Some(path.to_path_buf()),
            shared: None,
            state: Mutex::new(state),
        }
    }

    pub fn get(&self, name: &str) -> Option<Pin> {
        crate::lock(&self.state).pins.get(name).and_then(Kept::pin)
    }

    /// Whether `name` is pinned with exactly `hash`.
    pub fn matches(&self, name: &str, hash: &str) -> Option<bool> {
        crate::lock(&self.state)
            .pins
            .get(name)
            .map(|p| p.hash == hash)
    }

    /// Why the store is damaged (a sentence naming the file), while it is.
    pub fn damage(&self) -> Option<String> {
        crate::lock(&self.state).damage.clone()
    }

    /// Reads a damaged file again, so a repaired one is taken up; `true` when it was.
    pub fn recheck(&self) -> bool {
        if self.shared.is_some() {
            return self.damage().is_some() && self.reload();
        }
        let Some(path) = &self.path else { return false };
        let mut state = crate::lock(&self.state);
        if state.damage.is_none() {
            return false;
        }
        match load(path) {
            Ok(pins) => {
                tracing::info!(file = %path.display(), "pin file readable again");
                *state = State {
                    pins: kept(pins),
                    ..State::default()
                };
                true
            }
            Err(damage) => {
                state.damage = Some(damage);
                false
            }
        }
    }

    /// Pins many definitions at once (one file write, or one transaction for the fleet,
    /// which ends their marks). Nothing is pinned while the store is damaged: the damaged
    /// file stays as it is for the operator.
    pub fn set_all(&self, new: Vec<(String, Pin)>) -> Result<(), String> {
        if new.is_empty() {
            return Ok(());
        }
        let kept = new
            .iter()
            .map(|(name, pin)| Ok((name.clone(), Kept::of(pin)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let mut state = crate::lock(&self.state);
        if let Some(shared) = &self.shared {
            if let Some(damage) = &state.damage {
                return Err(damage.clone());
            }
            shared.pin(&new)?;
            for (name, pin) in kept {
                state.marks.remove(&name);
                state.pins.insert(name, pin);
            }
            return Ok(());
        }
        if state.damage.is_none() {
            // Deleted while the daemon ran: the pins in memory still judge, but the file
            // is not quietly written afresh; the operator is told, as at a start.
            state.damage = self.path.as_deref().and_then(deleted);
        }
        if let Some(damage) = &state.damage {
            tracing::warn!("pin store damaged; not pinning {} definitions", new.len());
            return Err(damage.clone());
        }
        state.pins.extend(kept);
        self.save(&state.pins);
        Ok(())
    }

    /// Ends damage on the operator's word: the damaged file is moved aside (returned, for the
    /// operator to inspect) and the store starts empty, so every tool is pinned afresh on the
    /// next rebuild. Refused while the store is not damaged: forgetting good approvals is
    /// deleting `pins.json` by hand, not a side effect of a command.
    pub fn reset(&self) -> Result<PathBuf, String> {
        let mut state = crate::lock(&self.state);
        if state.damage.is_none() {
            return Err("the pin store is not damaged; nothing to reset".to_owned());
        }
        if self.shared.is_some() {
            // The fleet's table is read again instead: it has no file to move aside.
            return match self.reload() {
                true => Err("the fleet's pins are readable again; nothing to reset".to_owned()),
                false => Err("the fleet's pins are in its database, which cannot be read now; nothing to reset".to_owned()),
            };
        }
        let Some(path) = &self.path else {
            return Err("the pin store has no file".to_owned());
        };
        let aside = aside_path(path);
        // A deleted file leaves its marker to move aside.
        let damaged = match deleted(path) {
            Some(_) => written_marker(path),
            None => path.clone(),
        };
        std::fs::rename(&damaged, &aside)
            .map_err(|e| format!("cannot move {} aside: {e}", damaged.display()))?;
        // Afresh: the marker comes back with the next table written.
        let _ = std::fs::remove_file(written_marker(path));
        tracing::warn!(file = %path.display(), aside = %aside.display(), "damaged pin file moved aside; pinning afresh");
        *state = State::default();
        Ok(aside)
    }

    fn save(&self, pins: &BTreeMap<String, Kept>) {
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
            return;
        }
        let marker = written_marker(path);
        if marker.symlink_metadata().is_err() {
            if let Err(e) = write_atomic(&marker, b"", Durability::Synced) {
                tracing::warn!(%e, file = %marker.display(), "cannot mark the pin table as written");
            }
        }
    }
}

/// The damage of a fleet's pin table that cannot be read.
fn shared_damage(e: &str) -> String {
    format!("fleet's pin table cannot be read ({e})")
}

/// Beside `pins.json`: a pin table was written here, so a `pins.json` that is missing was
/// deleted — damage, not a first start (which would pin every changed tool afresh as if
/// the user had approved it).
fn written_marker(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".written");
    PathBuf::from(name)
}

/// The damage of a pin file that was deleted after a table was written, if it was.
fn deleted(path: &Path) -> Option<String> {
    let gone =
        matches!(path.symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    (gone && written_marker(path).symlink_metadata().is_ok()).then(|| {
        format!(
            "pin file {} is damaged (it was deleted after tools had been pinned; restore it, or reset the pin store to pin every tool afresh)",
            path.display()
        )
    })
}

/// The pin table in `path`: empty when there is no file, else the damage in words.
fn load(path: &Path) -> Result<BTreeMap<String, Pin>, String> {
    let name = path.display();
    match crate::safe_read::read_in_folder(path, MAX_PINS_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("pin file {name} is damaged (not a pin table: {e})")),
        Err(crate::safe_read::ReadError::NotFound) => match deleted(path) {
            Some(damage) => Err(damage),
            None => Ok(BTreeMap::new()),
        },
        Err(e) => Err(format!("pin file {name} is damaged (it {e})")),
    }
}

/// A free name beside `path` for its damaged copy: `pins.json.damaged-<unix seconds>[-n]`.
fn aside_path(path: &Path) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.damaged-{secs}", path.display());
    let mut aside = PathBuf::from(&base);
    let mut n = 1;
    while aside.symlink_metadata().is_ok() {
        aside = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    aside
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
    fn a_damaged_file_is_kept_refuses_pins_and_ends_on_repair_or_reset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        std::fs::write(&path, b"{\"t\": {\"hash\"").unwrap();
        let pins = Pins::open(&path);
        assert!(pins.damage().unwrap().contains("pins.json is damaged"));
        let t = tool("d", json!({"type": "object"}));
        let pin = Pin {
            hash: hash_of(&t),
            definition: t,
        };
        assert!(pins.set_all(vec![("t".into(), pin.clone())]).is_err());
        assert_eq!(pins.get("t"), None);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"t\": {\"hash\"");
        // Repaired by hand: taken up on the next check.
        std::fs::write(&path, serde_json::to_vec(&json!({"t": pin})).unwrap()).unwrap();
        assert!(pins.recheck());
        assert_eq!(pins.matches("t", &pin.hash), Some(true));
        assert!(pins.reset().is_err(), "a sound store is not reset");
        // Damaged again (a directory), then reset: moved aside, empty, writable again.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let pins = Pins::open(&path);
        assert!(pins.damage().is_some());
        let aside = pins.reset().unwrap();
        assert!(aside.is_dir());
        assert_eq!(pins.damage(), None);
        pins.set_all(vec![("t".into(), pin)]).unwrap();
        assert!(Pins::open(&path).get("t").is_some());
    }

    #[test]
    fn a_deleted_file_is_damage_at_the_next_start_and_while_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        let t = tool("d", json!({"type": "object"}));
        let pin = Pin {
            hash: hash_of(&t),
            definition: t,
        };
        // A first start: no file, no damage.
        let pins = Pins::open(&path);
        assert_eq!(pins.damage(), None);
        pins.set_all(vec![("t".into(), pin.clone())]).unwrap();
        // Deleted while running: the next pinning is refused and says so.
        std::fs::remove_file(&path).unwrap();
        assert!(pins.set_all(vec![("u".into(), pin.clone())]).is_err());
        assert!(pins.damage().unwrap().contains("was deleted"));
        assert!(!path.exists(), "the deleted file was written afresh");
        // And at the next start.
        let again = Pins::open(&path);
        assert!(again.damage().unwrap().contains("pins.json is damaged"));
        // Reset: the marker goes aside, pinning starts afresh.
        let aside = again.reset().unwrap();
        assert!(aside.exists());
        assert_eq!(again.damage(), None);
        again.set_all(vec![("t".into(), pin)]).unwrap();
        assert!(Pins::open(&path).get("t").is_some());
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
        )])
        .unwrap();
        let again = Pins::open(&path);
        assert_eq!(again.matches("t", &hash_of(&t)), Some(true));
        assert_eq!(again.get("t").unwrap().definition, t);
    }
}
