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
