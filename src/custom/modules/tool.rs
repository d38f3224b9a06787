//! One tool of a loaded module as a registry [`Tool`]: a call is one `call` request to the
//! module host, its `update` lines are the call's updates, its `result` or `error` line
//! the call's end. Dropping the call (cancel, timeout, the caller leaving) cancels the
//! request, which aborts the tool's `signal`, and kills the process groups its `pi.exec`
//! children run in, which the daemon owns as it owns the groups it spawns (ledger,
//! watchdog) from the moment the host names them.

use std::path::PathBuf;
use std::sync::Weak;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::host::{Live, ModuleHost};
use crate::catalog::{ToolSource, ToolSpec};
use crate::process::GroupGuard;
use crate::protocol::{
    blocks_text, first_image, ApprovalClass, ContentBlock, Control, ErrorKind, InputKind,
    ToolOutput,
};
use crate::registry::{CallContext, Tool, ToolError, ToolResult, ToolUpdate};

/// How long the host has to acknowledge a cancel before it counts as stuck and is
/// restarted (a tool looping in synchronous code never reads its stdin).
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How long a tool's `formatApprovalDetails` may take before the user is asked with the
/// generic summary instead (the host bounds it a little tighter, so it answers first).
const APPROVAL_DETAILS_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest approval summary a module gives that is shown whole (in characters).
const APPROVAL_DETAILS_MAX: usize = 2000;

/// A tool as the module host describes it after a load.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    pub index: u64,
    pub name: String,
    pub label: Option<String>,
    #[serde(default)]
    pub description: String,
    pub parameters: Value,
    #[serde(default)]
    pub strict: bool,
    #[serde(default)]
    pub hidden: bool,
    #[serde(default)]
    pub deferrable: bool,
    pub approval: Option<String>,
    #[serde(default)]
    pub session_events: bool,
    /// The tool has a `formatApprovalDetails`.
    #[serde(default)]
    pub approval_details: bool,
    /// `mcpServerName` and `mcpToolName`: the MCP tool this one stands in for.
    pub mcp_server: Option<String>,
    pub mcp_tool: Option<String>,
}

/// Which instance of a module a tool belongs to: the host process and its load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    pub generation: u64,
    pub load: u64,
    pub index: u64,
}

pub struct ModuleTool {
    spec: ToolSpec,
    label: Option<String>,
    strict: bool,
    pub session_events: bool,
    approval_details: bool,
    /// (server, tool on that server) this tool stands in for.
    wraps: Option<(String, String)>,
    pub file: PathBuf,
    pub digest: String,
    pub handle: Handle,
    scope: Option<PathBuf>,
    modules: Weak<super::Inner>,
}

/// The approval class a module names (`read_only`, `readOnly`, `read-only`, `write`,
/// `command`).
pub fn approval_class(name: &str) -> Result<ApprovalClass, String> {
    match name {
        "read_only" | "readOnly" | "read-only" | "read" => Ok(ApprovalClass::ReadOnly),
        "write" => Ok(ApprovalClass::Write),
        "command" => Ok(ApprovalClass::Command),
        other => Err(format!(
            "approval \"{other}\" is not one of \"read_only\", \"write\", \"command\""
        )),
    }
}

impl ModuleTool {
    /// `workspace`: the module came from a workspace folder (pinned with its digest).
    pub(super) fn new(
        entry: Entry,
        found: &super::discover::Found,
        handle: Handle,
        modules: Weak<super::Inner>,
    ) -> Result<Self, String> {
        crate::registry::check_tool_name(&entry.name)?;
        crate::registry::check_schema_size(&entry.parameters)
            .map_err(|e| format!("tool '{}': its parameters schema {e}", entry.name))?;
        let approval = entry
            .approval
            .as_deref()
            .map(approval_class)
            .transpose()
            .map_err(|e| format!("tool '{}': {e}", entry.name))?;
        let wraps = match (entry.mcp_server, entry.mcp_tool) {
            (Some(server), Some(tool)) => Some((server, tool)),
            (None, None) => None,
            _ => {
                return Err(format!(
                    "tool '{}': mcpServerName and mcpToolName name the wrapped MCP tool together; one of them is missing",
                    entry.name
                ))
            }
        };
        let spec = ToolSpec {
            name: entry.name,
            description: entry.description,
            parameters: entry.parameters,
            approval,
            source: ToolSource::Custom {
                dir: found.file.clone(),
                workspace_digest: found.workspace.then(|| found.digest.clone()),
            },
            hidden: entry.hidden,
            deferrable: entry.deferrable,
            annotations: None,
        };
        Ok(ModuleTool {
            spec,
            label: entry.label,
            strict: entry.strict,
            session_events: entry.session_events,
            approval_details: entry.approval_details,
            wraps,
            file: found.file.clone(),
            digest: found.digest.clone(),
            handle,
            scope: found.scope.clone(),
            modules,
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    async fn run(&self, args: Map<String, Value>, ctx: CallContext) -> ToolResult {
        let modules = self.modules.upgrade().ok_or_else(|| {
            ToolError::new(ErrorKind::Unavailable, "the module host is shutting down")
        })?;
        // `ctx.sessionManager`: the calls of the session that ended before this one.
        let history = ctx
            .session_id
            .as_deref()
            .map(|s| modules.history.recent(s))
            .unwrap_or_default();
        let pool = super::Pool(modules);
        let (host, live, handle) = pool.handle_of(self).await?;
        let (id, mut replies) = host.request(
            &live,
            json!({
                "op": "call",
                "load": handle.load,
                "index": handle.index,
                "params": args,
                "ctx": {
                    "call_id": ctx.call_id,
                    "session_id": ctx.session_id,
                    "meta": ctx.session_meta,
                    "cwd": ctx.workspace,
                    "ui": ctx.inputs.accepts(InputKind::Elicitation),
                    "history": history,
                },
            }),
        );
        let mut running = Running {
            host,
            live,
            id,
            groups: Vec::new(),
            answered: false,
        };
        // The questions its `ctx.ui` asked, waiting for the frontend; dropped with the call.
        let mut asking = FuturesUnordered::new();
        loop {
            let line = tokio::select! {
                line = replies.recv() => line,
                Some(answer) = asking.next() => {
                    running.host.tell(
                        &running.live,
                        &json!({"op": "input_response", "id": id, "input_response": answer}),
                    );
                    continue;
                }
            };
            let Some(line) = line else { break };
            if let Some(update) = line.get("update") {
                if ctx.updates.is_active() {
                    ctx.updates.send(to_update(update));
                }
                continue;
            }
            if let Some(question) = line.get("input_request") {
                let (inputs, question) = (ctx.inputs.clone(), question.clone());
                asking.push(async move { inputs.answer_written(question).await });
                continue;
            }
            if let Some(pgid) = line.get("pgid").and_then(Value::as_i64) {
                let host_pid = i32::try_from(running.live.pid).unwrap_or(0);
                let group = i32::try_from(pgid)
                    .ok()
                    .and_then(|pgid| ctx.processes.adopt_group(pgid, host_pid));
                running.groups.extend(group);
                continue;
            }
            running.answered = true;
            if let Some(result) = line.get("result") {
                return Ok(to_output(result));
            }
            return Err(self.failure(&line, &ctx.call_id));
        }
        // The process ended: nothing is left to cancel.
        running.answered = true;
        if let Some(why) = running.live.killed_for() {
            pool.name_memory_hog(&self.file, &self.digest, &self.spec.name, &why);
            return Err(ToolError::new(
                ErrorKind::Failed,
                format!("the module host running '{}' {why}", self.spec.name),
            ));
        }
        Err(ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "the module host ended during the call to '{}'; it is restarted, so a new call can work",
                self.spec.name
            ),
        ))
    }

    /// The tool's `formatApprovalDetails(params)`, bounded; `None` (logged) when it has
    /// none, fails, or does not answer in time, so the user sees the generic summary.
    async fn approval_text(&self, args: &Map<String, Value>) -> Option<String> {
        if !self.approval_details {
            return None;
        }
        let asked = tokio::time::timeout(APPROVAL_DETAILS_TIMEOUT, self.ask_approval_details(args));
        let failure = match asked.await {
            Ok(Ok(text)) => return Some(text),
            Ok(Err(e)) => e,
            Err(_) => format!(
                "no answer within {} ms",
                APPROVAL_DETAILS_TIMEOUT.as_millis()
            ),
        };
        tracing::warn!(tool = %self.spec.name, file = %self.file.display(), "formatApprovalDetails failed, the generic approval summary is shown: {failure}");
        None
    }

    async fn ask_approval_details(&self, args: &Map<String, Value>) -> Result<String, String> {
        let modules = self
            .modules
            .upgrade()
            .ok_or("the module host is shutting down")?;
        let (host, live, handle) = super::Pool(modules)
            .handle_of(self)
            .await
            .map_err(|e| e.message)?;
        let (_, mut replies) = host.request(
            &live,
            json!({"op": "approval_details", "load": handle.load, "index": handle.index, "params": args}),
        );
        let reply = replies
            .recv()
            .await
            .ok_or("the module host ended before it answered")?;
        match reply.get("result").and_then(Value::as_str) {
            Some(text) if text.chars().count() > APPROVAL_DETAILS_MAX => {
                let cut: String = text.chars().take(APPROVAL_DETAILS_MAX).collect();
                Ok(format!("{cut}…"))
            }
            Some(text) => Ok(text.to_owned()),
            None => Err(reply["error"]
                .as_str()
                .unwrap_or("the module host answered oddly")
                .to_owned()),
        }
    }

    /// The call's `error` line as its error; the stack goes to the log only.
    fn failure(&self, line: &Value, call_id: &str) -> ToolError {
        let message = line["error"]
            .as_str()
            .unwrap_or("the tool failed")
            .to_owned();
        if let Some(stack) = line.get("stack").and_then(Value::as_str) {
            tracing::info!(tool = %self.spec.name, call_id, file = %self.file.display(), "module tool threw: {stack}");
        }
        let kind = match line.get("kind").and_then(Value::as_str) {
            Some("invalid_arguments") => ErrorKind::InvalidArguments,
            Some("unavailable") => ErrorKind::Unavailable,
            _ => ErrorKind::Failed,
        };
        ToolError::new(kind, message)
    }
}

/// A call in the module host: when dropped before its answer, the call is cancelled there;
/// either way the process groups its `pi.exec` children started are killed (their guards).
struct Running {
    host: ModuleHost,
    live: Live,
    id: u64,
    groups: Vec<GroupGuard>,
    answered: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.answered {
            self.host.cancel(&self.live, self.id, CANCEL_GRACE);
        }
    }
}

fn blocks_of(value: &Value) -> Vec<ContentBlock> {
    value
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| ContentBlock::deserialize(b).ok())
                .collect()
        })
        .unwrap_or_default()
}

fn to_update(update: &Value) -> ToolUpdate {
    ToolUpdate {
        content: blocks_of(update),
        details: update.get("details").filter(|d| !d.is_null()).cloned(),
        progress: None,
    }
}

/// `{content, details}` as the call's output: the blocks pass through (their text, by the
/// one rule of [`blocks_text`], is the `output` field), an object `details` is the
/// structured content, any other the `details` field.
fn to_output(result: &Value) -> ToolOutput {
    let mut out = ToolOutput::default();
    let blocks = result.get("content").and_then(Value::as_array);
    out.insert("output", blocks.map(|b| blocks_text(b)).unwrap_or_default());
    if let Some(url) = blocks.and_then(|b| first_image(b)) {
        out.control = Control::image(url);
    }
    out.content = blocks.cloned();
    match result.get("details") {
        Some(Value::Object(details)) => out.structured_content = Some(details.clone()),
        None | Some(Value::Null) => {}
        Some(other) => out.insert("details", other.clone()),
    }
    out
}

impl Tool for ModuleTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn is_module(&self) -> bool {
        true
    }
    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(self.run(args, ctx))
    }
    fn title(&self) -> Option<&str> {
        self.label.as_deref()
    }
    fn strict(&self) -> bool {
        self.strict
    }
    fn workspace_scope(&self) -> Option<&std::path::Path> {
        self.scope.as_deref()
    }
    fn approval_details<'a>(
        &'a self,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(self.approval_text(args))
    }
    fn wraps_mcp_tool(&self) -> Option<(&str, &str)> {
        self.wraps.as_ref().map(|(s, t)| (s.as_str(), t.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_passes_its_blocks_and_details_through() {
        let out = to_output(&json!({
            "content": [{"type": "text", "text": "Found 3 files"}, {"type": "text", "text": "done"}],
            "details": {"count": 3},
        }));
        assert_eq!(out.fields["output"], "Found 3 files\ndone");
        assert_eq!(out.content.as_ref().map(Vec::len), Some(2));
        assert_eq!(
            Value::Object(out.structured_content.unwrap()),
            json!({"count": 3})
        );
        let plain = to_output(&json!({"details": [1, 2]}));
        assert_eq!(plain.fields["output"], "");
        assert_eq!(plain.fields["details"], json!([1, 2]));
        assert!(plain.structured_content.is_none());
    }

    #[test]
    fn approval_classes_are_read_in_either_spelling() {
        assert_eq!(approval_class("readOnly"), Ok(ApprovalClass::ReadOnly));
        assert_eq!(approval_class("read_only"), Ok(ApprovalClass::ReadOnly));
        assert_eq!(approval_class("command"), Ok(ApprovalClass::Command));
        assert!(approval_class("root").is_err());
    }
}
