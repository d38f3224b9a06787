//! `list_tools` and `tools_changed`: how tools are described to frontends.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::ApprovalClass;

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
