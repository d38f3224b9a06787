//! The `Tool` abstraction every source (built-in, custom program, MCP server) implements.

use std::path::PathBuf;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::catalog::ToolSpec;
use crate::protocol::{
    ApprovalSummary, ContentBlock, ErrorKind, OpenAiFunction, OpenAiTool, OpenAiToolType, Progress,
    ToolOutput,
};

/// A partial result, forwarded to streaming callers as an `invoke_event` update.
#[derive(Debug, Clone)]
pub struct ToolUpdate {
    pub content: Vec<ContentBlock>,
    pub details: Option<Value>,
    pub progress: Option<Progress>,
}

/// Where a running tool sends partial results. Sending never blocks: when the caller does not
/// stream, or reads too slowly, updates are dropped (the final result is what counts).
#[derive(Debug, Clone, Default)]
pub struct UpdateSink(Option<mpsc::Sender<ToolUpdate>>);

impl UpdateSink {
    pub fn new(tx: mpsc::Sender<ToolUpdate>) -> Self {
        UpdateSink(Some(tx))
    }
    /// Whether anybody listens; tools may skip building updates when nobody does.
    pub fn is_active(&self) -> bool {
        self.0.as_ref().is_some_and(|tx| !tx.is_closed())
    }
    pub fn send(&self, update: ToolUpdate) {
        if let Some(tx) = &self.0 {
            let _ = tx.try_send(update);
        }
    }
}

/// What a tool knows about the call it serves.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub call_id: String,
    /// The session's workspace, or the host's; every path argument resolves inside it.
    pub workspace: PathBuf,
    pub session_id: Option<String>,
    /// The session's `meta`, read at the moment of the call (never a copy taken earlier).
    pub session_meta: Value,
    /// The call's deadline: its `timeout_ms`, else `limits.default_timeout_ms` (tools with
    /// their own timeout argument, like `bash`, take the smaller and report partial output).
    pub timeout_ms: Option<u64>,
    /// Fired on cancel, timeout and shutdown; tools that do not poll it are simply dropped.
    pub cancel: CancellationToken,
    pub updates: UpdateSink,
    /// What the tool may ask the call's frontend (elicitation, sampling, roots).
    pub inputs: std::sync::Arc<crate::inputs::CallInputs>,
    /// The sandbox the call's programs run in (tools that start programs apply it).
    pub sandbox: crate::sandbox::CallSandbox,
    /// The daemon's processes: every program a tool starts is one of them.
    pub processes: crate::process::Processes,
}

impl CallContext {
    /// A call in `workspace` with no session, deadline or sandbox, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_test(workspace: &std::path::Path) -> Self {
        CallContext {
            call_id: "call_test".into(),
            workspace: workspace.to_path_buf(),
            session_id: None,
            session_meta: Value::Object(Map::new()),
            timeout_ms: None,
            cancel: CancellationToken::new(),
            updates: UpdateSink::default(),
            inputs: std::sync::Arc::new(crate::inputs::CallInputs::unanswered("call_test")),
            sandbox: Default::default(),
            processes: Default::default(),
        }
    }

    /// The timeout for a tool with a limit of its own (`own_ms`: `bash`'s argument, a custom
    /// tool's manifest): the smaller of it and the call's deadline. When the call's deadline
    /// binds, the tool ends a little earlier (a tenth of it, at most 250 ms), so its own
    /// timeout error, which carries the partial output, wins the race with the pipeline's.
    pub fn own_timeout(&self, own_ms: u64) -> std::time::Duration {
        const MARGIN_MS: u64 = 250;
        let ms = match self.timeout_ms {
            Some(c) => own_ms.min(c.saturating_sub((c / 10).min(MARGIN_MS))),
            None => own_ms,
        };
        std::time::Duration::from_millis(ms.max(1))
    }
}

/// A tool failure: becomes `{ok:false, error, error_kind}` beside what the tool gave with
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    /// What the tool produced before it failed (e.g. `exit_code`, partial `stdout`); boxed,
    /// so a result that is an error is no bigger than one that is not.
    pub output: Box<ToolOutput>,
    /// On [`ErrorKind::ApprovalRequired`]: what the call would do, for the user.
    pub approval: Option<ApprovalSummary>,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
            output: Box::default(),
            approval: None,
        }
    }
    /// The call needs the user's approval first: `message` says how to give it, `summary`
    /// what the user approves.
    pub fn approval_required(summary: ApprovalSummary, message: impl Into<String>) -> Self {
        ToolError {
            approval: Some(summary),
            ..Self::new(ErrorKind::ApprovalRequired, message)
        }
    }
    /// The common case: the tool ran and could not do what was asked.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArguments, message)
    }
    pub fn with_field(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.output.insert(key, value);
        self
    }
    /// The call to `tool` reached its deadline (`timeout_ms`).
    pub fn timed_out(tool: &str, timeout_ms: u64) -> Self {
        Self::new(
            ErrorKind::Timeout,
            format!("Tool '{tool}' timed out after {timeout_ms} ms"),
        )
    }
    /// The call to `tool` was cancelled (by `cancel`, its caller leaving, or shutdown).
    pub fn cancelled(tool: &str) -> Self {
        Self::new(
            ErrorKind::Cancelled,
            format!("Call to '{tool}' was cancelled"),
        )
    }
}

pub type ToolResult = Result<ToolOutput, ToolError>;

/// A callable tool. Implementations must stop their work (and kill any process they
/// started) when the returned future is dropped: that is how timeout and cancel reach them.
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> &ToolSpec;
    /// Runs one call with arguments already validated against `spec().parameters`.
    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult>;
    /// A human title (MCP `title`), when the tool has one.
    fn title(&self) -> Option<&str> {
        None
    }
    /// JSON Schema of the tool's structured output (MCP `outputSchema`).
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    /// Whether the parameter schema is OpenAI strict-compatible and listed as `strict: true`.
    fn strict(&self) -> bool {
        false
    }
    /// What this call would do, in words, for the user approving it in strict mode;
    /// `None` falls back to the generic summary. Asked only of a call that needs approval,
    /// and may run the tool's own code (a module's `formatApprovalDetails`), so it is a
    /// future, which the tool itself keeps short.
    fn approval_details<'a>(
        &'a self,
        _args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(None))
    }
    /// The MCP tool this tool stands in for, as (server, the tool's name on that server):
    /// a module's `mcpServerName`/`mcpToolName`. The registry then leaves that MCP tool
    /// out and passes its approval class on (`Snapshot::build`).
    fn wraps_mcp_tool(&self) -> Option<(&str, &str)> {
        None
    }
    /// Whether the tool runs a program confined by the call's sandbox (`bash`, custom
    /// tools), so sandbox approval rules apply to it.
    fn sandboxed(&self) -> bool {
        false
    }
    /// The one workspace whose sessions list this tool (a custom tool found in a
    /// session's workspace); `None`: every session's.
    fn workspace_scope(&self) -> Option<&std::path::Path> {
        None
    }
    /// Whether `call` itself ends at the call's deadline (`ctx.timeout_ms`, counted from
    /// the start of `call`) with [`ToolError::timed_out`] and at `ctx.cancel` with
    /// [`ToolError::cancelled`], so the pipeline arms no timer of its own. MCP tools do:
    /// their idle timeout and the deadline share one timer, and each armed timer costs
    /// the event loop a wake-up per call.
    fn keeps_deadline(&self) -> bool {
        false
    }
    /// Whether the tool is a JS/TS module's (listed with a custom tool's source), so that
    /// a guard's `sources: ["module"]` can tell the two apart.
    fn is_module(&self) -> bool {
        false
    }
    /// The code tool (proto-docs/code-mode.md), whose calls the pipeline runs itself: its
    /// program's tool calls go back through the pipeline, which a tool cannot reach.
    /// (`Some(self)`, for the pipeline to downcast; the registry knows nothing of it.)
    fn code_mode(&self) -> Option<&dyn std::any::Any> {
        None
    }
    /// The description listed to a caller served the tools of `served` (each with whether
    /// it is deferred), for a tool that declares the others (the code tool); `None`: the
    /// spec's, the same for everyone.
    fn described_among(
        &self,
        _served: &mut dyn Iterator<Item = (&super::Entry, bool)>,
    ) -> Option<String> {
        None
    }
}

impl From<crate::sandbox::Refusal> for ToolError {
    fn from(r: crate::sandbox::Refusal) -> Self {
        let e = ToolError::new(ErrorKind::SandboxUnavailable, r.message);
        match r.note {
            Some(note) => e.with_field("sandbox", note),
            None => e,
        }
    }
}

/// A tool's definition in OpenAI format, as `list_tools` lists it (and as the catalog's
/// token budget measures it).
pub fn openai_definition(tool: &dyn Tool) -> OpenAiTool {
    let spec = tool.spec();
    OpenAiTool {
        kind: OpenAiToolType::Function,
        function: OpenAiFunction {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters: spec.parameters.clone(),
            strict: tool.strict().then_some(true),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_tool_with_a_timeout_of_its_own_takes_the_smaller_with_a_margin() {
        let within = |own_ms, call_ms| {
            let mut ctx = super::CallContext::for_test(std::path::Path::new("/"));
            ctx.timeout_ms = call_ms;
            ctx.own_timeout(own_ms)
        };
        assert_eq!(within(1000, None), Duration::from_millis(1000));
        assert_eq!(within(1000, Some(500)), Duration::from_millis(450));
        assert_eq!(within(1000, Some(100_000)), Duration::from_millis(1000));
        assert_eq!(within(5_000, Some(10_000)), Duration::from_millis(5_000));
        assert_eq!(within(120_000, Some(10_000)), Duration::from_millis(9_750));
        assert_eq!(within(120_000, Some(300)), Duration::from_millis(270));
        assert_eq!(within(0, None), Duration::from_millis(1));
    }
}
