//! `invoke`, `subscribe_invoke` and `cancel`: one tool call and its envelope.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Control, ErrorKind, ToolOutput};

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InvokeParams {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Caller-chosen id (for `cancel` and logs); generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Overall deadline of this call in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Approves a `write`/`command` call in a strict session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approved: bool,
    /// `"off"`: run this call's program outside the session's sandbox (needs `approved: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<super::SandboxOverride>,
}

impl InvokeParams {
    /// A call of `name` with `arguments` and nothing else set.
    pub fn new(name: impl Into<String>, arguments: Map<String, Value>) -> Self {
        InvokeParams {
            name: name.into(),
            arguments: Some(arguments),
            ..Default::default()
        }
    }
}

/// What a call produced: `ok`, and on failure `error` and `error_kind`, beside the tool's
/// output (on a failure, what the tool gave with it: e.g. `exit_code`, partial `stdout`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallOutcome {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// On the wire its members are the result's own; its control fields are the
    /// envelope's `control`, so here they are always empty.
    #[serde(flatten)]
    pub output: ToolOutput,
}

/// The envelope of one finished call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InvokeResult {
    pub call_id: String,
    pub tool: String,
    pub result: CallOutcome,
    /// The output's control fields (names starting with `_`), when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
    pub duration_ms: u64,
    /// The live registry's revision when the call ended.
    pub revision: u64,
}

/// An MCP content block: what a tool shows the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Base64 `data`.
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Base64 `data`.
    Audio {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Resource {
        resource: EmbeddedResource,
    },
    ResourceLink {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// The `resource` of a resource content block: `text` or base64 `blob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddedResource {
    pub uri: String,
    #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

/// How far a long call has come (MCP `notifications/progress` semantics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Progress {
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A partial result of a call in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InvokeUpdate {
    pub call_id: String,
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

/// A notification of `subscribe_invoke` (method `invoke_event`): updates, then exactly one
/// result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InvokeEvent {
    Update(InvokeUpdate),
    Result(InvokeResult),
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub call_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CancelResult {
    /// False when no call with this id is in flight.
    pub cancelled: bool,
}
