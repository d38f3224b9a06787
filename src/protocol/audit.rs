//! The audit log's record: one JSON line per finished call in `<data_dir>/audit.jsonl`
//! (proto-docs/operations.md), read by operators and their tools.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApprovalVerdictRecord, ErrorKind};

/// What the approval policy said about a call that got that far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalVerdict {
    Allow,
    NeedsApproval,
    Deny,
}

/// One finished call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch when the call finished.
    pub time_ms: u64,
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_pid: Option<i32>,
    /// The name of the bearer token a TCP caller presented (`listen.tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_token: Option<String>,
    /// The peer's process name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_process: Option<String>,
    /// The frontend's own name, when it gave one: session meta `client` (or
    /// `clientInfo.name`), else the connection's `User-Agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The frontend of the call's session (its session meta `frontend_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
    /// The workspace the call ran in: its session's project, else the daemon's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    pub tool: String,
    /// `builtin`, `custom`, `mcp`, or `unknown` for a tool that does not exist.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `None` when the call failed before the policy was asked (unknown tool, bad args).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalVerdict>,
    /// How the call's approval was decided when it was asked for: the approval queue's
    /// or the caller's own answer, who gave it, and from where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_decision: Option<ApprovalVerdictRecord>,
    /// The call carried `approved: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approved: bool,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    pub duration_ms: u64,
    /// Size of the result the tool produced (before any cap), in bytes of JSON.
    pub output_bytes: u64,
    /// SHA-256 of the arguments as JSON (never the arguments themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_sha256: Option<String>,
    pub args_bytes: u64,
    /// The guard that refused the call (`error_kind: "limited"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<super::GuardRefusal>,
    /// The code call whose program made this call (proto-docs/code-mode.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}
