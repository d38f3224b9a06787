//! Checkpoints on the wire (proto-docs/checkpoints.md): one timeline of changes per
//! workspace, its diffs, and restores.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `checkpoint.list`: a workspace's timeline, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointListParams {
    /// A directory in the workspace (its store is the one whose workspace holds it);
    /// default: the daemon's workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Only entries of calls of this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Only entries of calls from this frontend (its client name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
    /// Only entries at or after this time (milliseconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// At most this many entries (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// What made an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// A tool call's own change.
    Call,
    /// A change made between calls, by something other than a call (an editor, a process
    /// outside the host).
    Outside,
    /// A `checkpoint.restore`.
    Restore,
}

/// How a file changed in one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileChange {
    Added,
    Modified,
    Deleted,
}

/// One file of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointFile {
    /// Relative to the workspace (invalid UTF-8 shown lossily; `path_b64` has the bytes).
    pub path: String,
    /// The path's bytes in base64, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    pub change: FileChange,
    /// What it is before and after: `file`, `symlink`, `large` (over
    /// `checkpoint.max_file_bytes`: size and digest only), `fifo`, `socket`, `device`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Lines added and removed (text files up to 1 MiB).
    #[serde(rename = "+lines", default, skip_serializing_if = "Option::is_none")]
    pub added_lines: Option<u64>,
    #[serde(rename = "-lines", default, skip_serializing_if = "Option::is_none")]
    pub removed_lines: Option<u64>,
}

/// One entry of a workspace's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointEntry {
    /// `cp_<workspace>_<n>`: unique across workspaces and restarts.
    pub id: String,
    pub kind: CheckpointKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// When it was recorded, in milliseconds since the epoch.
    pub time: u64,
    pub files: Vec<CheckpointFile>,
    /// For a restore: the entry it restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restores: Option<String>,
    /// Calls that ran in the same workspace at the same time: their changes cannot be told
    /// apart from this one's, so this entry may hold some of theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concurrent: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointListResult {
    /// The workspace the timeline belongs to.
    pub workspace: String,
    pub entries: Vec<CheckpointEntry>,
    /// Lines of the timeline that could not be read (a damaged store): those entries are lost.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost: u64,
    /// Why this workspace records no checkpoints, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
    /// Whether a change watcher feeds this workspace's scans (only what changed is looked
    /// at); false: each checkpoint walks the whole workspace (no watcher yet, or the
    /// inotify limits were reached).
    #[serde(default)]
    pub watched: bool,
    /// Every workspace with a timeline, sorted (ask for one with `workspace`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspaces: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `checkpoint.diff`: an entry's changes as a unified diff.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointDiffParams {
    pub id: String,
    /// Only this file (as `files[].path` shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointDiffResult {
    pub id: String,
    pub diff: String,
}

/// What `checkpoint.restore` puts back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RestoreScope {
    /// Reverts exactly that entry's changes.
    #[default]
    Call,
    /// Puts the workspace's recorded files back as they were before that entry (reverting
    /// every later change too).
    Before,
}

/// `checkpoint.restore`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRestoreParams {
    pub id: String,
    #[serde(default)]
    pub scope: RestoreScope,
    /// Only these files (as `files[].path` shows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// Overwrite files changed since the entry (conflicts) instead of refusing.
    #[serde(default)]
    pub force: bool,
    /// Only say what would be done: files, conflicts, what cannot be restored.
    #[serde(default)]
    pub dry_run: bool,
}

/// A file changed after the entry being restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RestoreConflict {
    pub path: String,
    /// The later entry that changed it, and by which tool and frontend.
    pub changed_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointRestoreResult {
    /// The files written or removed (or, for a dry run, that would be).
    pub files: Vec<CheckpointFile>,
    /// Files changed since the entry; with `force` they were overwritten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<RestoreConflict>,
    /// Files that cannot be restored (recorded by size only, or not regular files), left as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_restorable: Vec<String>,
    /// The restore's own entry (absent for a dry run, or when nothing changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<CheckpointEntry>,
}
