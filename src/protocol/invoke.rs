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

/// `subscribe_invoke`: the call, and the input requests its frontend answers.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct SubscribeInvokeParams {
    #[serde(flatten)]
    pub call: InvokeParams,
    /// The kinds of `input_request` this frontend answers with `invoke.respond`. A request
    /// of another kind is refused at once (the asker gets `-32601`), so a frontend that
    /// knows nothing of input requests never holds a call up until its timeout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputKind>,
}

/// By hand: serde's `flatten` would let unknown fields through (it cannot be combined with
/// `deny_unknown_fields`), and an unknown field is an error like on `invoke`.
impl<'de> Deserialize<'de> for SubscribeInvokeParams {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut fields = Map::<String, Value>::deserialize(d)?;
        let inputs = match fields.remove("inputs") {
            Some(v) => serde_json::from_value(v).map_err(D::Error::custom)?,
            None => Vec::new(),
        };
        let call = InvokeParams::deserialize(Value::Object(fields)).map_err(D::Error::custom)?;
        Ok(SubscribeInvokeParams { call, inputs })
    }
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

/// The output field of a failed call whose MCP server refused it for a client capability
/// its frontend did not declare (`-32021`, 2026-07-28): the server's `requiredCapabilities`
/// (an MCP `ClientCapabilities` object). The MCP facade answers such a call with the same
/// `-32021` error.
pub const REQUIRED_CAPABILITIES: &str = "required_capabilities";

/// The output field (`true`) of a call cancelled because the daemon is stopping (past its
/// shutdown grace), not by its caller: a bridge answers it as the daemon-restarted tool
/// error, which says the call may or may not have run.
pub const DAEMON_STOPPING: &str = "daemon_stopping";

/// What a call produced: `ok`, and on failure `error` and `error_kind`, beside the tool's
/// output (on a failure, what the tool gave with it: e.g. `exit_code`, partial `stdout`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallOutcome {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// On `approval_required`: what the call would do, to show the user before repeating
    /// it with `approved: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<super::ApprovalSummary>,
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
    /// The tool asks the frontend something (answered with `invoke.respond`).
    InputRequest(InputRequest),
    /// A log message the tool's MCP server sent during the call.
    Log(InvokeLog),
    Result(InvokeResult),
}

/// What a tool may ask of the frontend of its call: the MCP client requests, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// `elicitation/create`: ask the user; `params` and the answer are MCP's.
    Elicitation,
    /// `sampling/createMessage`: ask the frontend's model; `params` and the answer are MCP's.
    Sampling,
    /// `roots/list`: the frontend's roots; `params` and the answer are MCP's.
    Roots,
}

impl InputKind {
    /// The MCP method this kind is.
    pub fn method(self) -> &'static str {
        match self {
            InputKind::Elicitation => "elicitation/create",
            InputKind::Sampling => "sampling/createMessage",
            InputKind::Roots => "roots/list",
        }
    }

    /// The kind the MCP method `method` is, if it is one.
    pub fn of_method(method: &str) -> Option<InputKind> {
        [
            InputKind::Elicitation,
            InputKind::Sampling,
            InputKind::Roots,
        ]
        .into_iter()
        .find(|kind| kind.method() == method)
    }

    /// The client capability that answering this kind needs (MCP's own name for it).
    pub fn capability(self) -> &'static str {
        match self {
            InputKind::Elicitation => "elicitation",
            InputKind::Sampling => "sampling",
            InputKind::Roots => "roots",
        }
    }
}

/// An `invoke_event` of kind `input_request`: answer it with `invoke.respond`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InputRequest {
    pub call_id: String,
    /// Unique within the call.
    pub request_id: String,
    /// What is asked (the event's `kind` is `input_request`).
    pub input: InputKind,
    /// The MCP request's params, as the tool sent them.
    #[serde(default)]
    pub params: Value,
    /// The asker's own name for the question, when it has one: the key of an upstream
    /// server's 2026-07-28 `inputRequests` entry. The MCP facade puts the question to a
    /// new-era client under this key, so the server's names reach the client unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// An `invoke_event` of kind `log`: an MCP `notifications/message` of the call's server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InvokeLog {
    pub call_id: String,
    /// MCP's syslog level name (`debug` … `emergency`).
    pub level: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    pub data: Value,
}

/// `invoke.respond`: the frontend's answer to one `input_request`, exactly one of
/// `result` (the MCP result of the request's kind) and `error`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondParams {
    pub call_id: String,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<InputError>,
}

/// A refused or failed input request, as a JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InputError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl InputError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        InputError {
            code: i64::from(code),
            message: message.into(),
            data: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RespondResult {
    /// Always true: a respond that is not taken is an error.
    pub accepted: bool,
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
