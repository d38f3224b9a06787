//! The live tool registry: what is callable right now.
//!
//! Tools come from *sources* (the built-ins, custom tool folders, each MCP server). A change
//! replaces whole sources and is applied as one atomic swap of an immutable [`Snapshot`]
//! that carries a `revision`, so readers never see half a reload.
//!
//! Architecture Invariant: `tools_changed` is derived here from the difference between two
//! snapshots — one swap, at most one notification — and is never sent from anywhere else.

mod search_tool;
mod snapshot;
pub(crate) mod tool;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::broadcast;

use crate::protocol::ApprovalClass;
use crate::protocol::ToolsChanged;

pub use search_tool::{is_search_tool, search_tool_result};
use snapshot::CatalogState;
pub use snapshot::{Entry, Snapshot};

/// Compiles a tool's JSON Schema (arguments or output). A schema that names no `$schema`
/// is read as draft 7, the draft tool schemas in the wild are written in.
pub fn compile_schema(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .build(schema)
        .map_err(|e| e.to_string())
}
/// The most values (objects, arrays, strings, numbers…) a tool's schema from a tool
/// folder or a module may hold: every `list_tools` answer and every model's context carries
/// it, so a 30,000-property schema would swell them all.
pub const MAX_SCHEMA_VALUES: usize = 10_000;
/// How deep such a schema may nest (JSON levels; a property's schema is two below its
/// object's): a validator compiles and walks schemas recursively.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// The rule for a tool name a user writes (a `tool.json`'s, a module's): what every model
/// API accepts. The error is the sentence every writer of tools reads.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    if (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Ok(());
    }
    Err(format!(
        "{name:?} is not a valid tool name: use 1 to 64 of a-z, A-Z, 0-9, _ and -"
    ))
}

/// Checks a schema a workspace can write (a `tool.json`'s, a module's) against
/// [`MAX_SCHEMA_VALUES`] and [`MAX_SCHEMA_DEPTH`], walking it without recursion.
pub fn check_schema_size(schema: &serde_json::Value) -> Result<(), String> {
    let mut pending = vec![(schema, 1usize)];
    let mut values = 0usize;
    while let Some((v, depth)) = pending.pop() {
        values += 1;
        if values > MAX_SCHEMA_VALUES {
            return Err(format!(
                "holds more than {MAX_SCHEMA_VALUES} JSON values; a tool schema may hold at most that many"
            ));
        }
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!(
                "nests more than {MAX_SCHEMA_DEPTH} levels deep; a tool schema may nest at most that deep"
            ));
        }
        match v {
            serde_json::Value::Object(m) => pending.extend(m.values().map(|c| (c, depth + 1))),
            serde_json::Value::Array(a) => pending.extend(a.iter().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

pub use tool::{CallContext, Tool, ToolError, ToolResult, ToolUpdate, UpdateSink};

/// A group of tools that changes together. The order of the variants (and of server names)
/// is the listing order; on a name clash built-ins (`load_skill` among them), then custom tools, then MCP servers in
/// config order keep the name (`snapshot::claim_names`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKey {
    Builtin,
    /// `load_skill`, rebuilt with each skill catalog (`crate::skills`).
    Skills,
    Custom,
    Mcp(String),
}

/// How `host.health` names an owner: `builtin`, `skills`, `custom`, `mcp:<server>`.
impl std::fmt::Display for SourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceKey::Builtin => f.write_str("builtin"),
            SourceKey::Skills => f.write_str("skills"),
            SourceKey::Custom => f.write_str("custom"),
            SourceKey::Mcp(server) => write!(f, "mcp:{server}"),
        }
    }
}

/// The tools of one source.
pub type Tools = Vec<Arc<dyn Tool>>;

/// A source replaced (`Some`) or removed (`None`).
pub type SourceUpdate = (SourceKey, Option<Tools>);

/// One batch of changes, applied as one swap.
#[derive(Default)]
pub struct Change {
    /// `Some(tools)` replaces the source, `None` removes it.
    pub sources: Vec<SourceUpdate>,
    /// Replaces the config's approval overrides (`approval.tools`) when `Some`.
    pub approval_overrides: Option<HashMap<String, ApprovalClass>>,
}

/// The writer side is serialised by a mutex; readers take an `Arc<Snapshot>` and go.
/// Cloning is cheap: clones share one registry (MCP supervisors publish through a clone).
#[derive(Clone)]
pub struct Registry(Arc<Inner>);

struct Inner {
    sources: Mutex<Sources>,
    current: RwLock<Arc<Snapshot>>,
    changes: broadcast::Sender<ToolsChanged>,
}

struct Sources {
    tools: BTreeMap<SourceKey, Vec<Arc<dyn Tool>>>,
    overrides: HashMap<String, ApprovalClass>,
    catalog: CatalogState,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        let (changes, _) = broadcast::channel(256);
        Registry(Arc::new(Inner {
            sources: Mutex::new(Sources {
                tools: BTreeMap::new(),
                overrides: HashMap::new(),
                catalog: CatalogState {
                    policy: crate::catalog::Policy::default(),
                    pins: Arc::new(crate::catalog::Pins::in_memory()),
                },
            }),
            current: RwLock::new(Arc::new(Snapshot::empty())),
            changes,
        }))
    }

    /// The live snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.0.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ToolsChanged> {
        self.0.changes.subscribe()
    }

    /// Where definitions are pinned (the data dir's pin file); set once at start, before
    /// the first apply.
    pub fn set_pins(&self, pins: crate::catalog::Pins) {
        crate::lock(&self.0.sources).catalog.pins = Arc::new(pins);
    }

    /// Replaces the catalog rules (deferral, trust); they take effect at the next apply,
    /// which the reload path makes right after.
    pub fn set_catalog_policy(&self, policy: crate::catalog::Policy) {
        crate::lock(&self.0.sources).catalog.policy = policy;
    }

    /// Accepts a quarantined tool's current definition and lists it again (one swap, with
    /// its `tools_changed`). Errors say why nothing was approved.
    pub fn approve(&self, name: &str) -> Result<u64, String> {
        let mut sources = crate::lock(&self.0.sources);
        if sources.catalog.pins.recheck() {
            // Repaired since the last rebuild: judge `name` against the pins as they are now.
            self.rebuild(sources);
            sources = crate::lock(&self.0.sources);
        }
        if let Some(damage) = sources.catalog.pins.damage() {
            return Err(format!(
                "nothing can be approved while the {damage}; repair it or run `toolhost tools pins reset`"
            ));
        }
        let snapshot = self.snapshot();
        let Some((entry, _)) = snapshot.quarantined(name) else {
            return Err(if snapshot.get(name).is_some() {
                format!("tool '{name}' is not quarantined")
            } else {
                format!("no tool named '{name}'")
            });
        };
        sources
            .catalog
            .pins
            .set_all(vec![(name.to_owned(), entry.pin())])
            .map_err(|e| format!("tool '{name}' was not approved: {e}"))?;
        drop(snapshot);
        self.rebuild(sources);
        Ok(self.snapshot().revision())
    }

    /// Reads the fleet's pins again (another member approved or marked a tool) and, when
    /// they changed, judges every tool by them (one swap, with its `tools_changed`).
    pub fn refresh_pins(&self) -> Option<ToolsChanged> {
        let sources = crate::lock(&self.0.sources);
        if !sources.catalog.pins.reload() {
            return None;
        }
        self.rebuild(sources)
    }

    /// Why the pin file cannot be read, while it cannot (for `host.health`).
    pub fn pins_damage(&self) -> Option<String> {
        crate::lock(&self.0.sources).catalog.pins.damage()
    }

    /// Moves a damaged pin file aside and pins every tool afresh (one swap); returns where
    /// the damaged file went and the new revision.
    pub fn reset_pins(&self) -> Result<(std::path::PathBuf, u64), String> {
        let sources = crate::lock(&self.0.sources);
        let aside = sources.catalog.pins.reset()?;
        self.rebuild(sources);
        Ok((aside, self.snapshot().revision()))
    }

    /// The pinned and the current definition of `name`, and its quarantine if any.
    pub fn pin_diff(&self, name: &str) -> Option<crate::protocol::ToolsDiffResult> {
        let pinned = crate::lock(&self.0.sources).catalog.pins.get(name);
        let snapshot = self.snapshot();
        let (current, quarantine) = match snapshot.quarantined(name) {
            Some((e, q)) => (Some(e.definition().clone()), Some(q.clone())),
            None => (snapshot.get(name).map(|e| e.definition().clone()), None),
        };
        if pinned.is_none() && current.is_none() {
            return None;
        }
        let pinned = pinned.map(|p| p.definition);
        let diff = match (&pinned, &current) {
            (Some(old), Some(new)) => {
                let pretty = |t| serde_json::to_string_pretty(t).unwrap_or_default() + "\n";
                crate::text_diff::unified(&pretty(old), &pretty(new), "pinned", "current")
            }
            _ => String::new(),
        };
        Some(crate::protocol::ToolsDiffResult {
            name: name.to_owned(),
            quarantine,
            pinned,
            current,
            diff,
            files: None,
        })
    }

    /// Applies a batch of changes in one swap; returns (and broadcasts) the notification,
    /// or `None` when the visible tool list did not change.
    pub fn apply(&self, change: Change) -> Option<ToolsChanged> {
        let mut sources = match self.0.sources.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (key, tools) in change.sources {
            match tools {
                Some(t) => {
                    sources.tools.insert(key, t);
                }
                None => {
                    sources.tools.remove(&key);
                }
            }
        }
        if let Some(o) = change.approval_overrides {
            sources.overrides = o;
        }
        self.rebuild(sources)
    }

    /// Builds and swaps in the next snapshot from `sources`, releasing the lock after.
    fn rebuild(&self, sources: std::sync::MutexGuard<'_, Sources>) -> Option<ToolsChanged> {
        // A damaged pin file repaired by hand is taken up here (a reload, an approval).
        sources.catalog.pins.recheck();
        let old = self.snapshot();
        let next = Snapshot::build(&old, &sources.tools, &sources.overrides, &sources.catalog);
        let diff = old.diff(&next);
        // A tool moving in or out of deferral changes the listing (and its etag) only.
        let visible_change =
            !diff.is_empty() || old.collisions() != next.collisions() || old.etag() != next.etag();
        // Even an invisible change is swapped in: the tool objects may be new (a restarted
        // MCP server with the same tools) and calls must reach the new ones. Only a visible
        // change bumps the revision and notifies.
        let revision = old.revision() + u64::from(visible_change);
        let next = Arc::new(next.with_revision(revision));
        let note = ToolsChanged {
            revision,
            etag: next.etag().to_owned(),
            added: diff.added,
            removed: diff.removed,
            changed: diff.changed,
        };
        // Sent while the new snapshot is swapped in and before any reader can see it: a
        // client that has seen revision N listed has had N's notification sent, so a
        // subscription it makes afterwards never receives a change it has already seen.
        let mut current = match self.0.current.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *current = next;
        if visible_change {
            let _ = self.0.changes.send(note.clone());
        }
        drop(current);
        drop(sources);
        visible_change.then_some(note)
    }
}
