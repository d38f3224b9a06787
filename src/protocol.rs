//! Wire types of protocol.md: the only shapes serialised to clients.
//!
//! Every `*Params` type derives `JsonSchema`, so the OpenRPC document served by
//! `rpc.discover` is generated from the same types the handlers parse.
//! The mapping from internal failures to `error_kind` and JSON-RPC codes lives here too.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::approval::{ApprovalClass, ApprovalMode};

/// JSON-RPC error codes (protocol.md §1 and §3).
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Unknown session id: `session not found: <id>`.
    pub const SESSION_NOT_FOUND: i32 = -32001;
    /// A server-side failure that is not the caller's fault (store I/O, config write).
    pub const SERVER_ERROR: i32 = -32000;
}

/// Why a tool call failed; the `error_kind` of an `ok:false` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    UnknownTool,
    InvalidArguments,
    ApprovalRequired,
    Denied,
    Timeout,
    Cancelled,
    Unavailable,
    Failed,
}

/// Output format of `list_tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolFormat {
    #[default]
    Openai,
    Mcp,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListToolsParams {
    /// List this session's stable view instead of the live registry.
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub format: ToolFormat,
    /// Also list tools flagged hidden.
    #[serde(default)]
    pub include_hidden: bool,
}

/// Per-tool facts that are not part of the model-facing schema.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolMeta {
    /// `builtin`, `custom` or `mcp`.
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub approval: Option<ApprovalClass>,
    pub hidden: bool,
    pub deferrable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListToolsResult {
    pub revision: u64,
    pub etag: String,
    pub tools: Vec<Value>,
    pub meta: BTreeMap<String, ToolMeta>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InvokeParams {
    pub name: String,
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// Caller-chosen id (for `cancel` and logs); generated when absent.
    #[serde(default)]
    pub call_id: Option<String>,
    /// Overall deadline of this call in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Approves a `write`/`command` call in a strict session.
    #[serde(default)]
    pub approved: bool,
}

/// The envelope of one finished call.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InvokeResult {
    pub call_id: String,
    pub tool: String,
    /// Always has `ok`; on failure also `error` and `error_kind`.
    pub result: Map<String, Value>,
    /// Control fields (names starting with `_`) split out of the tool's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<Map<String, Value>>,
    pub duration_ms: u64,
    /// The live registry's revision when the call ended.
    pub revision: u64,
}

/// A notification of `subscribe_invoke` (method `invoke_event`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InvokeEvent {
    Update {
        call_id: String,
        content: Vec<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    Result(InvokeResult),
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub call_id: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CancelResult {
    pub cancelled: bool,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyParams {}

/// Notification `tools_changed`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolsChanged {
    pub revision: u64,
    pub etag: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct McpCounts {
    pub ready: usize,
    pub failed: usize,
    pub connecting: usize,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HealthResult {
    /// `ok`, or `degraded` while a config error or a tool-name collision is outstanding.
    pub status: &'static str,
    pub version: &'static str,
    pub uptime_s: u64,
    pub tools: usize,
    pub sessions: u64,
    pub mcp: McpCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    /// Tool names claimed by more than one source (the earlier source keeps the name).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub collisions: Vec<String>,
}

// ---- sessions ----

/// A persisted session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub id: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub updated_at: u64,
    pub workspace: String,
    pub approval: ApprovalMode,
    pub meta: Map<String, Value>,
    pub tool_names: Vec<String>,
    pub tools_etag: String,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub approval: Option<ApprovalMode>,
    #[serde(default)]
    pub meta: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionIdParams {
    pub id: String,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {
    /// Page size (default 50, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next` cursor of the previous page.
    #[serde(default)]
    pub after: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionListResult {
    pub sessions: Vec<Session>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionUpdateParams {
    pub id: String,
    /// Merged key by key; a `null` value deletes the key.
    #[serde(default)]
    pub meta: Option<Map<String, Value>>,
    #[serde(default)]
    pub approval: Option<ApprovalMode>,
    #[serde(default)]
    pub workspace: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeletedResult {
    pub deleted: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionToolsParams {
    pub id: String,
    #[serde(default)]
    pub if_etag: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionToolsResult {
    pub etag: String,
    pub unchanged: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionResumeResult {
    pub session: Session,
    pub tools: Vec<Value>,
    pub added: Vec<String>,
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionRefreshResult {
    pub etag: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

// ---- administration ----

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerParams {
    #[serde(default)]
    pub server: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct McpServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// `connecting`, `ready`, `failed`, `disabled` or `circuit_open`.
    pub state: &'static str,
    pub tools: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Milliseconds since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_since: Option<u64>,
    pub consecutive_failures: u32,
    pub restarts: u32,
    pub in_flight: usize,
    pub queued: usize,
    /// Tool names this server could not get because an earlier source holds them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub collisions: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct McpStatusResult {
    pub servers: Vec<McpServerStatus>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpAddParams {
    pub name: String,
    /// The server block, same shape as in config.json.
    pub server: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpRemoveParams {
    pub name: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ConfigStatusResult {
    pub path: String,
    /// Milliseconds since the Unix epoch of the last successful apply.
    pub loaded_at: u64,
    /// How many configs have been applied since start.
    pub revision: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Warnings of the last read (unknown keys, settings that need a restart).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ConfigReloadResult {
    pub applied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub status: ConfigStatusResult,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OkResult {
    pub ok: bool,
}
