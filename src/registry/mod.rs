//! The live tool registry: what is callable right now.
//!
//! Tools come from *sources* (the built-ins, custom tool folders, each MCP server). A change
//! replaces whole sources and is applied as one atomic swap of an immutable [`Snapshot`]
//! that carries a `revision`, so readers never see half a reload.
//!
//! Architecture Invariant: `tools_changed` is derived here from the difference between two
//! snapshots — one swap, at most one notification — and is never sent from anywhere else.

mod snapshot;
mod tool;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::broadcast;

use crate::approval::ApprovalClass;
use crate::protocol::ToolsChanged;

pub use snapshot::Snapshot;

/// Compiles a tool's JSON Schema (arguments or output). A schema that names no `$schema`
/// is read as draft 7: the compiler checks every schema against its draft's meta-schema,
/// compiled once and kept for the process's life, and 2020-12's costs some 30 MB of heap
/// where draft 7's costs a few hundred KB. Tool schemas in the wild use draft 7 keywords.
pub fn compile_schema(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .build(schema)
        .map_err(|e| e.to_string())
}
pub use tool::{
    CallContext, Tool, ToolError, ToolOk, ToolResult, ToolSource, ToolSpec, ToolUpdate, UpdateSink,
};

/// A group of tools that changes together. The order of the variants is the precedence on a
/// name clash: the earlier source keeps the name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKey {
    Builtin,
    Custom,
    Mcp(String),
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

#[derive(Default)]
struct Sources {
    tools: BTreeMap<SourceKey, Vec<Arc<dyn Tool>>>,
    overrides: HashMap<String, ApprovalClass>,
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
            sources: Mutex::new(Sources::default()),
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
        let old = self.snapshot();
        let next = Snapshot::build(&old, &sources.tools, &sources.overrides);
        let diff = old.diff(&next);
        let visible_change = !diff.is_empty() || old.collisions() != next.collisions();
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
        match self.0.current.write() {
            Ok(mut g) => *g = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        drop(sources);
        if !visible_change {
            return None;
        }
        let _ = self.0.changes.send(note.clone());
        Some(note)
    }
}
