//! `list_tools` and `tools_changed`: how tools are described to frontends.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApprovalClass, TrustDiffResult};

/// Output format of `list_tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolFormat {
    /// OpenAI function-calling entries: `{"type": "function", "function": {…}}`.
    #[default]
    Openai,
    /// MCP `Tool` objects: `{"name", "description", "inputSchema", …}`.
    Mcp,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListToolsParams {
    /// List this session's stable view instead of the live registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default)]
    pub format: ToolFormat,
    /// Also list tools flagged hidden.
    #[serde(default)]
    pub include_hidden: bool,
    /// Also list deferred tools (by default they are left out and `tool_search` finds them).
    #[serde(default)]
    pub include_deferred: bool,
    /// List only what this config profile serves (a session's own profile applies too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// With `session_id`: the live registry as that session is served it (its profile and
    /// meta, its workspace's custom tools) instead of its stable view. What an MCP
    /// connection lists: it follows the live list through `tools/list_changed`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
}

/// Where a tool comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolSourceKind {
    Builtin,
    Custom,
    Mcp,
}

/// Per-tool facts that are not part of the model-facing schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolMeta {
    pub source: ToolSourceKind,
    /// The MCP server, for `mcp` tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `null` when unclassified (refused in strict mode).
    pub approval: Option<ApprovalClass>,
    pub hidden: bool,
    pub deferrable: bool,
    /// Left out of `list_tools` unless `include_deferred`; found through `tool_search`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
    /// MCP tool annotations, as the server reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// The `type` of an OpenAI tool entry (always `function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiToolType {
    #[default]
    Function,
}

/// A tool in OpenAI function-calling format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpenAiTool {
    #[serde(rename = "type")]
    pub kind: OpenAiToolType,
    pub function: OpenAiFunction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpenAiFunction {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (always an object schema).
    pub parameters: Value,
    /// OpenAI strict mode: the schema is strict-compatible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A tool in MCP `tools/list` format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// One entry of `list_tools.tools`, in the requested format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ToolEntry {
    Openai(OpenAiTool),
    Mcp(McpTool),
}

impl ToolEntry {
    /// The tool's public name, whatever the format.
    pub fn name(&self) -> &str {
        match self {
            ToolEntry::Openai(t) => &t.function.name,
            ToolEntry::Mcp(t) => &t.name,
        }
    }
    pub fn description(&self) -> &str {
        match self {
            ToolEntry::Openai(t) => &t.function.description,
            ToolEntry::Mcp(t) => &t.description,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListToolsResult {
    /// The live registry's revision.
    pub revision: u64,
    /// Content hash of `tools`: equal lists have equal etags.
    pub etag: String,
    pub tools: Vec<ToolEntry>,
    /// By tool name.
    pub meta: BTreeMap<String, ToolMeta>,
}

/// Notification `tools_changed`: the live registry moved to `revision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsChanged {
    pub revision: u64,
    pub etag: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

/// `tools.search`: ranks deferred tools by relevance to `query`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsSearchParams {
    /// Words (BM25 over name, title, description, parameter names), or a regular expression
    /// when it looks like one (`^`, `$`, `.*`, `|`, `[…]`, `\\`…).
    pub query: String,
    /// How many matches to return (default 5, at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default)]
    pub format: ToolFormat,
    /// Remember the matches as loaded in this session: its `list_tools` lists them from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// One match of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchMatch {
    pub name: String,
    /// Relevance: higher is better (BM25 score, or 1 for a regex match).
    pub score: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsSearchResult {
    /// Full definitions of the matches, best first, in the requested format.
    pub tools: Vec<ToolEntry>,
    pub matches: Vec<SearchMatch>,
    /// By tool name.
    pub meta: BTreeMap<String, ToolMeta>,
}

/// `tools.describe`: a frontend was given these tools' full definitions (an MCP client's
/// SEP-2636 `tools/describe`, proto-docs/mcp-facade.md#tool-manifests).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsDescribeParams {
    /// The session whose frontend asked.
    pub session_id: String,
    /// Tool names the session is served.
    pub names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsDescribeResult {
    /// The deferred tools among `names`: found by the session's frontend, so every session
    /// of it lists them from now on (`list_tools` with `live`).
    pub found: Vec<String>,
}

/// Params of methods about one tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolNameParams {
    pub name: String,
}

/// Why a tool is quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineReason {
    /// Its definition differs from the pinned one.
    Changed,
    /// A new tool of a `quarantine_new` server.
    New,
    /// Its description looks like an injection attempt (`flags` say why).
    Flagged,
    /// `pins.json` cannot be read, so no approval can be checked (`host.health` names the
    /// file; repair it or reset with `tools.pins_reset`).
    PinsDamaged,
}

/// A tool held back until the user approves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuarantinedTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub reason: QuarantineReason,
    /// The parts of the definition that changed (`title`, `description`, `input_schema`,
    /// `output_schema`, `annotations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// What the description screening found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// What happened and how to approve, in words.
    pub message: String,
}

/// `tools.diff`: the pinned definition against the current one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsDiffResult {
    pub name: String,
    /// Present while the tool is quarantined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<QuarantinedTool>,
    /// The approved definition (MCP format), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<McpTool>,
    /// The definition the source offers now, if it offers the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<McpTool>,
    /// `pinned` against `current` as a unified diff of their indented JSON (empty when
    /// they are equal or one is missing).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff: String,
    /// For a workspace tool or module waiting for workspace trust under this name: its
    /// files against the ones approved before (what `trust.diff` says of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<TrustDiffResult>,
}

/// `tools.approve`: the definition now pinned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsApproveResult {
    pub name: String,
    /// The live registry's revision after the approval.
    pub revision: u64,
}

/// `tools.pins_reset`: where the damaged pin file went; every tool was pinned afresh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsPinsResetResult {
    /// The damaged file's new name, beside `pins.json`.
    pub moved_to: String,
    /// The live registry's revision after the reset.
    pub revision: u64,
}
