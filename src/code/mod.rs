//! Code mode (proto-docs/code-mode.md): one tool, `run_code`, whose argument is a
//! JavaScript or TypeScript program in which every tool the session sees is an async
//! function. The program loops, filters and joins; only what it prints and returns goes
//! back to the model.
//!
//! - [`runner`]: the Node process a program runs in (one per run, a spare kept warm),
//!   confined, and the line protocol on its pipes;
//! - [`api`]: the tools as TypeScript declarations, for the model;
//! - [`surface`]: which tools a session's program sees, and the declarations as the
//!   `toolhost://code/tools.d.ts` resource.
//!
//! The program's tool calls are not made here: every one goes back through the pipeline
//! ([`Pipeline`], implemented by `crate::invoke`), with its validation, approval, guards,
//! audit (the code call as `parent`), checkpoints and cancellation.

pub mod api;
mod runner;
pub mod surface;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use crate::catalog::ToolSpec;
use crate::config::CodeMode;
use crate::protocol::{ApprovalClass, ErrorKind, InvokeResult, Progress, ToolOutput};
use crate::registry::{CallContext, Tool, ToolError, ToolResult, ToolUpdate};

pub use runner::RunnerKey;

/// How the code tool reaches the pipeline for a program's calls: `crate::invoke` implements
/// it (this module imports neither the pipeline nor the host).
pub trait Pipeline: Send + Sync {
    /// One call of the program's, as the call's own session would make it.
    fn call(&self, tool: String, args: Map<String, Value>) -> BoxFuture<'_, InvokeResult>;
}

/// What one run needs to know besides its program: the settings in force, the tools the
/// session sees, and where Node is.
pub struct Run {
    pub settings: CodeMode,
    /// Public names of the tools the program may call (never the code tool itself).
    pub tools: Vec<String>,
    /// What the runner process must be started with.
    pub key: RunnerKey,
}

/// The code tool. Its calls are run by the pipeline ([`CodeTool::run`]), which has the
/// session's tools at hand; `call` alone only says so.
pub struct CodeTool {
    spec: ToolSpec,
    /// `code_mode.max_description_bytes` at start: the declarations listed, at most.
    max_description_bytes: usize,
    /// `None`: this is `code_api`, which only describes the tools.
    runners: Option<runner::Runners>,
}

/// The public name of the tool that gives the typed declarations.
pub const API_TOOL: &str = "code_api";

impl CodeTool {
    /// The code tool named `name` (config `code_mode.tool_name`, read at start). Its
    /// description declares `builtins` (the same for every session; `code_api` has the
    /// session's own tools), within `max_description_bytes`.
    pub fn new(
        name: &str,
        processes: crate::process::Processes,
        builtins: &[Arc<dyn Tool>],
        max_description_bytes: usize,
    ) -> Self {
        let apis: Vec<api::ToolApi<'_>> = builtins
            .iter()
            .map(|t| api::ToolApi::of(t.as_ref()))
            .collect();
        // What a listing without a caller shows (a listing declares the caller's tools:
        // `described_among`).
        let description = describe(&apis, max_description_bytes);
        CodeTool {
            spec: ToolSpec::builtin(
                name,
                &description,
                json!({
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "minLength": 1, "maxLength": MAX_PROGRAM_BYTES, "description": "The program: the body of an async function, TypeScript or JavaScript. `await` works at top level; `return` a value to give it back."}
                    },
                    "required": ["code"],
                    "additionalProperties": false
                }),
                // The program writes nothing itself (it runs read-only); each of its calls
                // is classified, approved and checkpointed on its own.
                ApprovalClass::ReadOnly,
            ),
            max_description_bytes,
            runners: Some(runner::Runners::new(processes)),
        }
    }

    /// `code_api`: the typed declarations of the session's tools, filtered.
    pub fn new_api() -> Self {
        CodeTool {
            spec: ToolSpec::builtin(
                API_TOOL,
                "TypeScript declarations of the functions a code-mode program can call as `tools.<name>(args)`: argument types, result types where the tool declares them, and descriptions. Filter by words of the name or description.",
                json!({
                    "type": "object",
                    "properties": {
                        "filter": {"type": "string", "description": "Only tools whose name or description contains this (case-insensitive); all when absent."}
                    },
                    "additionalProperties": false
                }),
                ApprovalClass::ReadOnly,
            ),
            max_description_bytes: 0,
            runners: None,
        }
    }

    /// Whether this is `code_api`.
    pub fn is_api(&self) -> bool {
        self.runners.is_none()
    }

    /// A `code_api` call over the session's `tools`.
    pub fn api(&self, args: &Map<String, Value>, tools: &[api::ToolApi<'_>]) -> ToolResult {
        let filter = args
            .get("filter")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_lowercase();
        let owned: Vec<api::ToolApi<'_>> = tools
            .iter()
            .filter(|t| {
                filter.is_empty()
                    || t.name.to_lowercase().contains(&filter)
                    || t.description.to_lowercase().contains(&filter)
            })
            .cloned()
            .collect();
        let mut out = ToolOutput::default();
        out.insert("output", api::declarations(&owned, true, API_MAX_BYTES));
        out.insert("tools", owned.len());
        Ok(out)
    }

    /// Runs one program. Ends with the call's cancellation (the process is killed and the
    /// calls in flight are cancelled with the call's token).
    pub async fn run(
        &self,
        args: Map<String, Value>,
        ctx: &CallContext,
        run: Run,
        pipeline: &dyn Pipeline,
    ) -> ToolResult {
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            return Err(ToolError::invalid("arguments.code must be a string"));
        };
        let Some(runners) = &self.runners else {
            return Err(ToolError::failed("code_api runs no program"));
        };
        let start = std::time::Instant::now();
        let mut process = runners
            .take(&run, ctx)
            .await
            .map_err(|e| ToolError::new(ErrorKind::Unavailable, e))?;
        let started = process
            .send_program(code, &run.tools, &ctx.workspace, &run.settings)
            .await;
        if let Err(e) = started {
            runners.retire(process);
            return Err(ToolError::new(ErrorKind::Unavailable, e));
        }
        let allowed: std::collections::HashSet<&str> =
            run.tools.iter().map(String::as_str).collect();
        let calls = Mutex::new(0u64);
        let max_calls = run.settings.max_inner_calls;
        let inner = |id: u64, tool: String, args: Value| {
            let allowed = &allowed;
            let calls = &calls;
            async move {
                let reply = |value: Result<Value, ToolError>| match value {
                    Ok(v) => json!({"op": "reply", "id": id, "ok": true, "value": v}),
                    Err(e) => json!({"op": "reply", "id": id, "ok": false, "error": {
                        "kind": e.kind.as_str(), "message": e.message,
                        "details": Value::Object(e.output.fields.clone()),
                    }}),
                };
                let n = {
                    let mut n = crate::lock(calls);
                    *n += 1;
                    *n
                };
                if n > max_calls {
                    return reply(Err(ToolError::new(
                        ErrorKind::Limited,
                        format!("the program made more than code_mode.max_inner_calls ({max_calls}) tool calls"),
                    )));
                }
                if !allowed.contains(tool.as_str()) {
                    return reply(Err(ToolError::new(
                        ErrorKind::UnknownTool,
                        format!("No tool '{tool}' is available to this program"),
                    )));
                }
                let Value::Object(args) = args else {
                    return reply(Err(ToolError::invalid(format!(
                        "the arguments of {tool} must be an object"
                    ))));
                };
                reply(program_value(pipeline.call(tool, args).await))
            }
        };
        let progress = |p: Progress| {
            ctx.updates.send(ToolUpdate {
                content: Vec::new(),
                details: None,
                progress: Some(p),
            });
        };
        // The code tool keeps its own deadline (`keeps_deadline`): at the deadline or a
        // cancel the program is killed and its calls in flight end through the pipeline.
        let timeout_ms = ctx.timeout_ms.unwrap_or(run.settings.timeout_ms);
        let stop = async {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
                    ctx.cancel.cancel();
                    ToolError::timed_out(&self.spec.name, timeout_ms)
                }
                _ = ctx.cancel.cancelled() => ToolError::cancelled(&self.spec.name),
            }
        };
        let done = process.serve(inner, progress, stop).await;
        runners.retire(process);
        let done = match done {
            Ok(done) => {
                // The overhead figure of issue 44 (the codemode bench reads it).
                let ms = |t: std::time::Instant| t.duration_since(start).as_secs_f64() * 1000.0;
                tracing::debug!(
                    call_id = %ctx.call_id,
                    first_call_ms = done.first_call.map(ms),
                    done_ms = ms(std::time::Instant::now()),
                    "code run timings"
                );
                done
            }
            Err(runner::Ended::Failed(why)) => return Err(ToolError::failed(why)),
            Err(runner::Ended::Stopped(e)) => return Err(e),
        };
        finished(done, &run.settings)
    }
}

/// The most `code_api` returns at once (a filter narrows it).
const API_MAX_BYTES: usize = 256 * 1024;

/// The longest program accepted.
const MAX_PROGRAM_BYTES: usize = 256 * 1024;

/// The code tool's description: the calling convention, then `tools` declared within
/// `max_bytes` in all (the rest named by `code_api` and the resource).
fn describe(tools: &[api::ToolApi<'_>], max_bytes: usize) -> String {
    let head = format!(
        "{DESCRIPTION}\n\nYour tools (`{API_TOOL}` {{filter}} and the resource {} give full declarations with result types):\n",
        surface::RESOURCE_URI
    );
    let budget = max_bytes.saturating_sub(head.len());
    head + &api::declarations(tools, false, budget)
}

const DESCRIPTION: &str = "Run a short TypeScript/JavaScript program (the body of an async function) in which every tool you can use is an async function of `tools`, named by the tool's name and taking its arguments object: `const r = await tools.read_file({path: \"a.txt\"})`. Use it to chain, loop over and filter many tool calls in one step; only what the program prints (`console.log`) and returns comes back. A call returns the tool's structured result (else its text) and throws a `ToolError` (fields `tool`, `kind`, `message`) when the tool fails; `progress(message)` reports progress. The program itself cannot write files, start processes or open connections; do that through tools. Each call is approved, limited and logged like a direct call.";

impl Tool for CodeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _args: Map<String, Value>, _ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async {
            Err(ToolError::failed(
                "the code tool runs only through the call pipeline",
            ))
        })
    }
    fn code_mode(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    /// `run` ends the program at the deadline and at a cancel itself, after its calls in
    /// flight ended (else the pipeline would drop them before their audit lines).
    fn keeps_deadline(&self) -> bool {
        true
    }
    /// `run_code` declares the tools of the caller's view: the listed ones first, then the
    /// deferred (callable from a program all the same), within `max_description_bytes`.
    fn described_among(
        &self,
        served: &mut dyn Iterator<Item = (&crate::registry::Entry, bool)>,
    ) -> Option<String> {
        self.runners.as_ref()?;
        let (mut listed, mut deferred) = (Vec::new(), Vec::new());
        for (e, is_deferred) in served.filter(|(e, _)| surface::callable(&e.tool)) {
            let api = api::ToolApi::of(e.tool.as_ref());
            match is_deferred {
                true => deferred.push(api),
                false => listed.push(api),
            }
        }
        listed.append(&mut deferred);
        Some(describe(&listed, self.max_description_bytes))
    }
}

/// The code tool, if `tool` is it.
pub fn as_code_tool(tool: &Arc<dyn Tool>) -> Option<&CodeTool> {
    tool.code_mode()?.downcast_ref::<CodeTool>()
}

/// Whether the code tools are in `snapshot` (they are registered only while some view
/// serves them: `Config::code_mode_anywhere`). `code_api` always comes with the code tool.
pub fn registered(snapshot: &crate::registry::Snapshot) -> bool {
    snapshot
        .get(API_TOOL)
        .is_some_and(|e| e.tool.code_mode().is_some())
}

/// What a tool call gives the program: the structured result where the tool has one, else
/// its text when the result is nothing but text, else its fields; a failure is thrown as a
/// `ToolError`.
fn program_value(r: InvokeResult) -> Result<Value, ToolError> {
    let out = r.result.output;
    if !r.result.ok {
        let mut e = ToolError::new(
            r.result.error_kind.unwrap_or(ErrorKind::Failed),
            r.result.error.unwrap_or_default(),
        );
        e.output = Box::new(ToolOutput::from_fields(out.fields));
        return Err(e);
    }
    if let Some(s) = out.structured_content {
        return Ok(Value::Object(s));
    }
    if out.fields.len() == 1 {
        if let Some(Value::String(text)) = out.fields.get("output") {
            return Ok(Value::String(text.clone()));
        }
    }
    Ok(Value::Object(out.fields))
}

/// The program's end as the code call's result: `output` (what it printed), `result` (what
/// it returned), or the error with what it printed before.
fn finished(done: runner::Done, settings: &CodeMode) -> ToolResult {
    let mut out = ToolOutput::default();
    out.insert("output", done.output);
    if done.truncated {
        out.insert("truncated", true);
        out.insert(
            "note",
            format!(
                "output cut at code_mode.max_output_bytes ({} bytes)",
                settings.max_output_bytes
            ),
        );
    }
    if let Some(result) = done.result {
        // The returned value shares the output's bound: past it, its JSON text, cut.
        let text = result.to_string();
        if text.len() > settings.max_output_bytes {
            let mut cut = settings.max_output_bytes;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            out.insert("result", &text[..cut]);
            out.insert("truncated", true);
            out.insert(
                "note",
                format!(
                    "the returned value was cut at code_mode.max_output_bytes ({} bytes of its JSON)",
                    settings.max_output_bytes
                ),
            );
        } else {
            out.insert("result", result);
        }
    }
    out.insert("calls", done.calls);
    match done.error {
        None => Ok(out),
        Some(message) => {
            let mut e = ToolError::failed(message);
            e.output = Box::new(out);
            Err(e)
        }
    }
}

/// A program that ran past its deadline is killed (see `runner`); this bounds the wait for
/// a killed process's pipes.
const KILL_WAIT: Duration = Duration::from_millis(500);
