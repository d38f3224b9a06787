//! The rest of the MCP surface of the host's servers: prompts, resources, resource
//! templates, completions and resource subscriptions (`list_prompts`, `get_prompt`,
//! `list_resources`, `list_resource_templates`, `read_resource`, `complete`,
//! `subscribe_resource`, `prompts_changed`, `resources_changed`).
//!
//! Entries use MCP's own spelling (`mimeType`, `uriTemplate`), as the `mcp` format of
//! `list_tools` does, plus `server`: the host server that owns the entry. Prompt message
//! content is the server's MCP content block as it sent it (images and embedded resources
//! included), which belongs to the server, not to this contract.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One prompt of the live catalog, named like a tool (`mcp_<server>_<prompt>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromptEntry {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<PromptArgument>,
    /// The MCP server that serves it.
    pub server: String,
}

/// One declared argument of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromptArgument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// `list_prompts`, `list_resources` and `list_resource_templates`: whose view to list (as
/// for `list_tools`, what a profile hides is left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SurfaceListParams {
    /// Serve only what this config profile selects (a session's own profile applies too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Serve only what this session's profile selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListPromptsResult {
    pub prompts: Vec<PromptEntry>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetPromptParams {
    /// The prompt's name as `list_prompts` gives it.
    pub name: String,
    /// Argument values by name (MCP prompt arguments are strings).
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
    /// Serve only what this config profile selects (a session's own profile applies too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Serve only what this session's profile selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// A retry after `input_required` (MCP 2026-07-28): the answers under the prompt's
    /// server's own keys, passed to it as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<BTreeMap<String, Value>>,
    /// With `input_responses`: the server's `requestState`, exactly as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// The kinds of input request the caller's frontend answers (as `subscribe_invoke`'s
    /// `inputs`): a 2026-07-28 server is told them as the request's client capabilities,
    /// so it can refuse with `-32021` or ask only what can be answered. Empty: the caller
    /// answers nothing (the CLI).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<super::InputKind>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetPromptResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub messages: Vec<PromptMessage>,
    /// The prompt's MCP server needs input first (its 2026-07-28 `input_required`
    /// answer): its `inputRequests` and `requestState` as they came, and `messages` is
    /// empty. Ask the questions and get the prompt again with the answers
    /// (`input_responses`) and the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_required: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromptMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// One MCP content block (`text`, `image`, `audio`, `resource`, `resource_link`), whole.
    pub content: Value,
}

/// One resource of the live catalog; its URI is the server's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceEntry {
    pub uri: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Size in bytes, when the server says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    pub server: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListResourcesResult {
    pub resources: Vec<ResourceEntry>,
}

/// One resource template (RFC 6570) of the live catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceTemplateEntry {
    #[serde(rename = "uriTemplate")]
    pub uri_template: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    pub server: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListResourceTemplatesResult {
    #[serde(rename = "resourceTemplates")]
    pub resource_templates: Vec<ResourceTemplateEntry>,
}

/// `resource_updated`: the resource that changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceUri {
    pub uri: String,
}

/// `read_resource` and `subscribe_resource`: one resource by URI, in whose view (a
/// resource the profile hides is as unknown as one no server offers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceParams {
    pub uri: String,
    /// Serve only what this config profile selects (a session's own profile applies too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Serve only what this session's profile selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `read_resource`: one resource by URI, in whose view, and the answers to its server's
/// questions when this is a retry after `input_required`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadResourceParams {
    pub uri: String,
    /// Serve only what this config profile selects (a session's own profile applies too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Serve only what this session's profile selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// A retry after `input_required` (MCP 2026-07-28): the answers under the resource's
    /// server's own keys, passed to it as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<BTreeMap<String, Value>>,
    /// With `input_responses`: the server's `requestState`, exactly as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// The kinds of input request the caller's frontend answers (as `subscribe_invoke`'s
    /// `inputs`): a 2026-07-28 server is told them as the request's client capabilities,
    /// so it can refuse with `-32021` or ask only what can be answered. Empty: the caller
    /// answers nothing (the CLI).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<super::InputKind>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadResourceResult {
    pub contents: Vec<ResourceContents>,
    /// The resource's MCP server needs input first (its 2026-07-28 `input_required`
    /// answer), as for `get_prompt`: `contents` is empty; read again with the answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_required: Option<Map<String, Value>>,
}

/// One part of a resource: `text`, or `blob` (base64), exactly as the server sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceContents {
    pub uri: String,
    #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// `complete`: suggestions for one argument of a prompt or one variable of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    #[serde(rename = "ref")]
    pub reference: CompletionRef,
    pub argument: CompletionArgument,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<CompletionContext>,
    /// Serve only what this config profile selects (a session's own profile applies too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Serve only what this session's profile selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// What is being completed: a prompt by its catalog name, or a resource template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum CompletionRef {
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
    /// `uri`: the template (`uriTemplate`) as listed.
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompletionArgument {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CompletionContext {
    /// Values of the arguments already chosen.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompleteResult {
    pub completion: Completion,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Completion {
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u32>,
    #[serde(rename = "hasMore", default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
}

/// Notification `prompts_changed`: the live prompt catalog changed (a server's list
/// changed, or a reload added or removed a server); `prompts` is how many it holds now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromptsChanged {
    pub prompts: usize,
}

/// Notification `resources_changed`: the live resources or templates changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourcesChanged {
    pub resources: usize,
    pub templates: usize,
}

/// A resource URI or template that two servers both list: `kept` serves it, `dropped`
/// does not (the first in config order wins). Shown in `mcp.status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceClash {
    pub uri: String,
    pub kept: String,
}
