//! The workspace-trust gate (proto-docs/trust.md): what a workspace brings waits for the
//! user's word before it is loaded, run, listed or shown to a model.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What kind of file-defined source an item is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TrustKind {
    /// A program tool: a folder of `.toolhost/tools/` with a `tool.json`.
    Tool,
    /// A JS/TS tool module (`.toolhost/tools`, `.musepi/tools`, `.claude/tools`, `.codex/tools`).
    Module,
    /// A skill folder (`.toolhost/skills`, `.agents/skills`, `.claude/skills`).
    Skill,
    /// A command file (`.toolhost/commands`).
    Command,
}

impl TrustKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TrustKind::Tool => "tool",
            TrustKind::Module => "module",
            TrustKind::Skill => "skill",
            TrustKind::Command => "command",
        }
    }
}

/// One item a workspace brings, as the gate judged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TrustItem {
    /// The workspace it comes from.
    pub workspace: String,
    pub kind: TrustKind,
    /// Its path inside the workspace (`.claude/skills/deploy`).
    pub item: String,
    /// Its absolute path: what `trust.approve` takes.
    pub path: String,
    /// SHA-256 (first 16 bytes, hex) of what it is made of: a changed item waits again.
    pub digest: String,
}

/// `trust.list`: what waits, and what the user trusts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct TrustListResult {
    /// Items found and not trusted, in the order the sources found them.
    pub waiting: Vec<TrustItem>,
    /// Folders trusted as a whole (with every workspace beneath them).
    pub folders: Vec<String>,
    /// Items approved one by one, with the digest approved.
    pub approved: Vec<TrustItem>,
}

/// `trust.approve`: approves the waiting item at `path` (an item's `path`), or every
/// waiting item beneath it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustApproveParams {
    pub path: String,
}

/// `trust.folder`: trusts a workspace folder as a whole ("trust this folder"), or, with
/// `trusted: false`, takes that trust back.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustFolderParams {
    pub folder: String,
    #[serde(default = "yes")]
    pub trusted: bool,
}

fn yes() -> bool {
    true
}

/// What a trust decision admitted (or, for a folder trust taken back, the folder).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TrustDecisionResult {
    /// The items that were waiting and are now admitted.
    pub admitted: Vec<TrustItem>,
    /// The folder trusted or no longer trusted, for `trust.folder`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
}

/// `trust.diff`: what changed in the waiting item at `path` since it was approved.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustDiffParams {
    pub path: String,
}

/// A waiting item's files against the ones approved before (`trust.diff`, and `tools.diff`
/// for a workspace tool or module that waits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrustDiffResult {
    /// The item as it waits.
    pub item: TrustItem,
    /// The digest approved before, if this item (same kind and path) was ever approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<String>,
    /// Why the approved files cannot be compared ("never approved", "not kept"): every file
    /// is then shown as added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The files added, removed or changed, in path order.
    pub changes: Vec<TrustFileChange>,
}

/// One file of an item that changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrustFileChange {
    /// Relative to the item's folder (a file item: its name).
    pub path: String,
    pub change: super::FileChange,
    /// A unified diff (`a/` approved, `b/` now), or a line saying what the entry was and
    /// became when it is not text.
    pub diff: String,
}
