//! One custom tool as a host [`Tool`]: runs its program through the shared process runner
//! and speaks the stdout line protocol (`update` / `result` / `error`, other lines are
//! plain output).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::manifest::{provider_env_name, Manifest};
use crate::catalog::{ToolSource, ToolSpec};
use crate::config::Provider;
use crate::process::runner::{self, Capture, End, Sink, Spec, Stream};
use crate::protocol::{
    blocks_text, first_image, ContentBlock, Control, ErrorKind, Progress, ToolOutput,
};
use crate::registry::{CallContext, Tool, ToolError, ToolResult, ToolUpdate, UpdateSink};
use crate::sandbox::{self, Plan};

/// The tool's own timeout when its manifest names none.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Memory kept of stderr and of plain stdout (half head, half tail); the pipeline's
/// `limits.max_output_bytes` then cuts and spills what is returned.
const OUTPUT_CAP: usize = 4 * 1024 * 1024;
/// The longest protocol line read whole (a result with an embedded image fits).
const MAX_LINE: usize = 16 * 1024 * 1024;
/// Lines of stderr quoted in a failure.
const STDERR_TAIL_LINES: usize = 20;
/// After the program exits, how long children may hold its pipes before the group goes.
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// The tool's folder, as its program sees it.
const TOOL_DIR_VAR: &str = "TOOLHOST_TOOL_DIR";

/// Provider credentials of the live config, swapped by each reload and read at call time.
pub type Providers = Arc<ArcSwap<BTreeMap<String, Provider>>>;

pub struct CustomTool {
    spec: ToolSpec,
    pub manifest: Manifest,
    pub dir: PathBuf,
    providers: Providers,
    /// The session workspace it was found in, when it came from one.
    scope: Option<PathBuf>,
}

impl CustomTool {
    /// `workspace_digest` is `Some` for a tool from the workspace folder (see
    /// [`super::trust`]).
    pub fn new(
        manifest: Manifest,
        dir: PathBuf,
        providers: Providers,
        workspace_digest: Option<String>,
        scope: Option<PathBuf>,
    ) -> Self {
        let spec = ToolSpec {
            name: manifest.name.clone(),
            description: manifest.description.clone(),
            parameters: manifest.parameters.clone(),
            approval: manifest.approval,
            source: ToolSource::Custom {
                dir: dir.clone(),
                workspace_digest,
            },
            hidden: manifest.hidden,
            deferrable: manifest.deferrable,
            annotations: None,
        };
        CustomTool {
            spec,
            manifest,
            dir,
            providers,
            scope,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The digest its folder was pinned with, for a tool from the workspace folder.
    pub fn workspace_digest(&self) -> Option<&str> {
        match &self.spec.source {
            ToolSource::Custom {
                workspace_digest, ..
            } => workspace_digest.as_deref(),
            _ => None,
        }
    }

    /// Makes `spec` (its sandbox set) run a workspace tool from the bytes that were approved:
    /// its folder is copied to a private folder while it is hashed, the copy is kept only
    /// if its digest is the approved one, and the program, the arguments naming files of the
    /// folder and `TOOLHOST_TOOL_DIR` name the copy's. A file swapped in the folder after
    /// this (before the exec, or before an interpreter reads its script) is never run; a
    /// changed folder is refused (the watcher's rescan quarantines it). The copy lies in the
    /// confined run's temp dir, or in the returned one, which the caller keeps for the run.
    /// A tool of the user's own folders runs in place (`None`).
    pub async fn pin_to_approved(
        &self,
        spec: &mut Spec,
    ) -> Result<Option<tempfile::TempDir>, ToolError> {
        let Some(pinned) = self.workspace_digest().map(str::to_owned) else {
            return Ok(None);
        };
        let failed =
            |e: String| ToolError::failed(format!("could not copy the tool's folder: {e}"));
        let (root, own) = match &spec.confine {
            Some(c) => (c.tmpdir().to_path_buf(), None),
            None => {
                let own = sandbox::call_dir().map_err(|e| failed(e.to_string()))?;
                (own.path().to_path_buf(), Some(own))
            }
        };
        let copy = root.join("approved-tool");
        let (dir, into) = (self.dir.clone(), copy.clone());
        let copied =
            tokio::task::spawn_blocking(move || crate::trust::folder_digest_copying(&dir, &into))
                .await
                .map_err(|e| failed(e.to_string()))?;
        if copied.as_deref() != Ok(pinned.as_str()) {
            return Err(ToolError::failed(format!(
                "Tool '{}' is a workspace tool whose files changed since it was approved; it is quarantined until `toolhost tools approve {}`",
                self.spec.name, self.spec.name
            )));
        }
        let in_copy =
            |p: &std::path::Path| p.strip_prefix(&self.dir).ok().map(|rel| copy.join(rel));
        if let Some(p) = in_copy(&spec.program) {
            spec.program = p;
        }
        for arg in &mut spec.args {
            if let Some(p) = in_copy(std::path::Path::new(arg.as_os_str())) {
                *arg = p.into_os_string();
            }
        }
        for (name, value) in &mut spec.env {
            if name == TOOL_DIR_VAR {
                *value = copy.clone().into_os_string();
            }
        }
        test_gate().await;
        Ok(own)
    }

    /// The process spec shared by calls and session events.
    pub fn process_spec(&self, ctx_env: Vec<(OsString, OsString)>, stdin: Vec<u8>) -> Spec {
        let cwd_default = self.dir.clone();
        let mut spec = Spec::new(self.manifest.program(&self.dir), cwd_default);
        spec.args = self.manifest.args(&self.dir);
        spec.env = vec![(TOOL_DIR_VAR.into(), self.dir.clone().into())];
        spec.env.extend(ctx_env);
        spec.env.extend(self.provider_env());
        spec.stdin = Some(stdin);
        spec.output_cap = OUTPUT_CAP;
        spec.stdout_lines = Some(MAX_LINE);
        spec.exit_grace = EXIT_GRACE;
        spec
    }

    /// `TOOLHOST_PROVIDER_<NAME>_BASE_URL` / `_API_KEY` for the providers this tool lists,
    /// from the config in force now (so a reload rotates keys for the next call).
    fn provider_env(&self) -> Vec<(OsString, OsString)> {
        let providers = self.providers.load();
        let mut env = Vec::new();
        for name in &self.manifest.providers {
            let Some(p) = providers.get(name) else {
                continue;
            };
            let prefix = format!("TOOLHOST_PROVIDER_{}", provider_env_name(name));
            if let Some(url) = &p.base_url {
                env.push((format!("{prefix}_BASE_URL").into(), url.into()));
            }
            if let Some(key) = &p.api_key {
                env.push((format!("{prefix}_API_KEY").into(), key.into()));
            }
        }
        env
    }

    async fn run(&self, args: Map<String, Value>, ctx: CallContext) -> ToolResult {
        let own = self.manifest.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        let timeout = ctx.own_timeout(own);
        let mut stdin = Value::Object(args).to_string().into_bytes();
        stdin.push(b'\n');
        let env: Vec<(OsString, OsString)> = vec![
            ("TOOLHOST_CALL_ID".into(), ctx.call_id.clone().into()),
            (
                "TOOLHOST_SESSION_ID".into(),
                ctx.session_id.clone().unwrap_or_default().into(),
            ),
            ("TOOLHOST_WORKSPACE".into(), ctx.workspace.clone().into()),
            (
                "TOOLHOST_SESSION_META".into(),
                ctx.session_meta.to_string().into(),
            ),
        ];
        let mut spec = self.process_spec(env, stdin);
        spec.cwd = ctx.workspace.clone();
        spec.timeout = Some(timeout);
        let plan = sandbox::plan(
            &ctx.sandbox,
            &ctx.workspace,
            &self.sandbox_extras(&ctx.sandbox.config),
        )?;
        if let Plan::Confined(c) = &plan {
            spec.confine = Some(c.clone());
        }
        let program = spec.program.clone();
        let _copy = self.pin_to_approved(&mut spec).await?;
        let mut lines = LineSink::new(&ctx.updates);
        if self.manifest.asks {
            lines = lines.asking(ctx.inputs.clone());
        }
        let outcome = runner::run(&ctx.processes, spec, &ctx.cancel, &mut lines)
            .await
            .map_err(|e| {
                ToolError::failed(format!(
                    "could not start {} (command[0] of {}/tool.json): {e}",
                    program.display(),
                    self.dir.display()
                ))
            })?;
        let stderr_tail = outcome.stderr.tail_lines(STDERR_TAIL_LINES);
        let failed = match outcome.end {
            End::Exited(s) | End::ExitedPipesHeld(s) => !s.success(),
            End::Answered => false,
            End::TimedOut | End::Cancelled => true,
        };
        let note = plan.result_note(failed, &outcome.stderr.text());
        let result = self.outcome(outcome, lines, timeout, &stderr_tail);
        match (result, note) {
            (Ok(mut ok), Some(n)) => {
                ok.insert("sandbox", n);
                Ok(ok)
            }
            (Err(e), Some(n)) => Err(e.with_field("sandbox", n)),
            (r, None) => r,
        }
    }

    /// What the manifest asks of the sandbox, as far as config `sandbox.tools` grants it —
    /// the grant of this tool's own source ([`grant_key`]).
    pub fn sandbox_extras(&self, config: &crate::config::SandboxConfig) -> sandbox::Extras {
        let key = grant_key(&self.spec.name, self.workspace_digest().is_some());
        let grant = config.tools.get(&key).copied().unwrap_or_default();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        sandbox::Extras {
            network: grant.network && self.manifest.sandbox.network,
            writable: if grant.writable {
                self.manifest.sandbox.writable_paths(home.as_deref())
            } else {
                Vec::new()
            },
        }
    }

    /// The call's result from how the program ended and what it printed.
    fn outcome(
        &self,
        outcome: runner::Outcome,
        mut lines: LineSink<'_>,
        timeout: Duration,
        stderr_tail: &str,
    ) -> ToolResult {
        match outcome.end {
            End::TimedOut => {
                return Err(with_stderr(
                    ToolError::new(
                        ErrorKind::Timeout,
                        format!(
                            "Tool '{}' timed out after {} ms; its process group was killed",
                            self.spec.name,
                            timeout.as_millis()
                        ),
                    ),
                    stderr_tail,
                ))
            }
            End::Cancelled => return Err(ToolError::cancelled(&self.spec.name)),
            End::Exited(_) | End::ExitedPipesHeld(_) | End::Answered => {}
        }
        if let Some(answer) = lines.answer.take() {
            return self.finish(answer);
        }
        let status = match outcome.end {
            End::Exited(s) | End::ExitedPipesHeld(s) => s,
            _ => return Err(ToolError::failed("the program ended without a status")),
        };
        if status.success() {
            let mut ok = ToolOutput::default();
            ok.insert("output", lines.plain.text());
            return Ok(ok);
        }
        let how = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "abnormal exit".to_owned(),
        };
        let message = if stderr_tail.is_empty() {
            format!("Tool '{}' failed: {how}", self.spec.name)
        } else {
            format!("Tool '{}' failed: {how}: {stderr_tail}", self.spec.name)
        };
        let mut e = ToolError::failed(message);
        if let Some(c) = status.code() {
            e = e.with_field("exit_code", c);
        }
        let plain = lines.plain.text();
        if !plain.is_empty() {
            e = e.with_field("output", plain);
        }
        Err(e)
    }

    /// Turns the program's `result` or `error` line into the call's outcome.
    fn finish(&self, answer: Answer) -> ToolResult {
        let mut result = match answer {
            Answer::Error(message) => return Err(ToolError::failed(message)),
            Answer::Result(r) => r,
        };
        let mut out = ToolOutput::default();
        let dropped = out.control.split_from(&mut result);
        if !dropped.is_empty() {
            tracing::warn!(
                tool = %self.spec.name,
                fields = ?dropped,
                "control fields dropped from the result: the contract defines no such field, or not of this type"
            );
        }
        if result.remove("ok") == Some(Value::Bool(false)) {
            let message = match result.remove("error") {
                Some(Value::String(s)) => s,
                Some(v) => v.to_string(),
                None => format!("Tool '{}' reported a failure", self.spec.name),
            };
            let mut e = ToolError::failed(message);
            out.content = match result.remove("content") {
                Some(Value::Array(blocks)) => Some(blocks),
                Some(other) => {
                    result.insert("content".into(), other);
                    None
                }
                None => None,
            };
            out.fields = result;
            e.output = Box::new(out);
            return Err(e);
        }
        if let Some(content) = result.remove("content") {
            if let Err(e) = Vec::<ContentBlock>::deserialize(&content) {
                return Err(ToolError::failed(format!(
                    "the result's content is not a list of MCP content blocks: {e}"
                )));
            }
            let blocks = match content {
                Value::Array(blocks) => blocks,
                _ => Vec::new(),
            };
            // The program's own `output` wins; else the blocks' text, by the one rule.
            if !result.contains_key("output") {
                result.insert("output".into(), Value::String(blocks_text(&blocks)));
            }
            // Like MCP tool results: the first image also travels as control fields, for
            // frontends that attach images to the next model turn.
            if let Some(url) = first_image(&blocks) {
                out.control = Control::image(url);
            }
            out.content = Some(blocks);
        }
        if let Some(structured) = result.remove("structured") {
            if !structured.is_object() {
                return Err(ToolError::failed(
                    "the result's structured output must be a JSON object",
                ));
            }
            if let Some(schema) = &self.manifest.output_schema {
                let validator = crate::registry::compile_schema(schema)
                    .map_err(|e| ToolError::failed(format!("output_schema is invalid: {e}")))?;
                let problem = validator.iter_errors(&structured).next().map(|err| {
                    format!(
                        "structured{}: {err}",
                        err.instance_path().to_string().replace('/', ".")
                    )
                });
                if let Some(problem) = problem {
                    return Err(ToolError::failed(format!(
                        "Tool '{}' returned structured output that does not match its output_schema: {problem}",
                        self.spec.name
                    )));
                }
            }
            if let Value::Object(structured) = structured {
                out.structured_content = Some(structured);
                result.shift_remove("structured_content");
            }
        }
        out.fields = result;
        Ok(out)
    }
}

fn with_stderr(mut e: ToolError, tail: &str) -> ToolError {
    if !tail.is_empty() {
        e.message = format!("{}: {tail}", e.message);
    }
    e
}

impl Tool for CustomTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn workspace_scope(&self) -> Option<&std::path::Path> {
        self.scope.as_deref()
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(self.run(args, ctx))
    }

    fn title(&self) -> Option<&str> {
        self.manifest.label.as_deref()
    }

    fn output_schema(&self) -> Option<&Value> {
        self.manifest.output_schema.as_ref()
    }

    fn strict(&self) -> bool {
        self.manifest.strict
    }

    fn approval_details<'a>(
        &'a self,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(self.manifest.approval_text(args)))
    }

    fn sandboxed(&self) -> bool {
        true
    }
}

/// The program's final word.
#[derive(Debug)]
pub enum Answer {
    Result(Map<String, Value>),
    Error(String),
}

/// Reads stdout one line at a time: protocol lines are acted on at once (updates go to the
/// caller as they are written), anything else is kept as plain output.
pub struct LineSink<'a> {
    updates: &'a UpdateSink,
    pub answer: Option<Answer>,
    pub plain: Capture,
    /// A program that asks (manifest `asks`): where its questions go, and the feed of its
    /// stdin that carries the answers back.
    asking: Option<Asking>,
}

/// The questions of a program that asks, and the way their answers reach its stdin.
struct Asking {
    inputs: std::sync::Arc<crate::inputs::CallInputs>,
    stdin: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    feed: Option<tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>>,
}

impl<'a> LineSink<'a> {
    pub fn new(updates: &'a UpdateSink) -> Self {
        LineSink {
            updates,
            answer: None,
            plain: Capture::new(OUTPUT_CAP),
            asking: None,
        }
    }

    /// The program may ask the call's frontend (`input_request` lines).
    fn asking(mut self, inputs: std::sync::Arc<crate::inputs::CallInputs>) -> Self {
        let (stdin, feed) = tokio::sync::mpsc::unbounded_channel();
        self.asking = Some(Asking {
            inputs,
            stdin,
            feed: Some(feed),
        });
        self
    }

    /// An `input_request` line: `{"id", "kind", "params"}`. The question goes to the call's
    /// frontend from a task of its own (the program keeps running meanwhile, and may ask
    /// more); the answer, or the error, comes back as one `input_response` line on stdin.
    /// A question the program may not ask (no `asks` in its manifest) or cannot be read is
    /// answered with an error at once, when the program can hear it.
    fn input_request(&mut self, request: Value) {
        let Some(asking) = &self.asking else {
            return;
        };
        let inputs = asking.inputs.clone();
        let stdin = asking.stdin.clone();
        tokio::spawn(async move {
            let response =
                serde_json::json!({"input_response": inputs.answer_written(request).await});
            let mut line = response.to_string().into_bytes();
            line.push(b'\n');
            let _ = stdin.send(line);
        });
    }

    fn line(&mut self, line: &[u8]) {
        let trimmed = line.strip_suffix(b"\n").unwrap_or(line);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        if trimmed.first() == Some(&b'{') {
            if let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(trimmed) {
                if obj.len() == 1 {
                    if let Some(u) = obj.remove("update") {
                        self.update(u);
                        return;
                    }
                    if self.asking.is_some() {
                        if let Some(q) = obj.remove("input_request") {
                            self.input_request(q);
                            return;
                        }
                    }
                    // The first result or error is the answer; later ones are ignored.
                    if let Some(r) = obj.remove("result") {
                        if self.answer.is_none() {
                            self.answer = Some(match r {
                                Value::Object(m) => Answer::Result(m),
                                other => Answer::Error(format!(
                                    "the program's result must be a JSON object, got {other}"
                                )),
                            });
                        }
                        return;
                    }
                    if let Some(e) = obj.remove("error") {
                        if self.answer.is_none() {
                            self.answer = Some(Answer::Error(match e {
                                Value::String(s) => s,
                                other => other.to_string(),
                            }));
                        }
                        return;
                    }
                }
            }
        }
        self.plain.push(trimmed);
        self.plain.push(b"\n");
    }

    fn update(&mut self, u: Value) {
        if !self.updates.is_active() {
            return;
        }
        let content = u
            .get("content")
            .and_then(|c| serde_json::from_value::<Vec<ContentBlock>>(c.clone()).ok())
            .unwrap_or_default();
        let progress = u
            .get("progress")
            .and_then(|p| serde_json::from_value::<Progress>(p.clone()).ok());
        let details = u.get("details").filter(|d| !d.is_null()).cloned();
        self.updates.send(ToolUpdate {
            content,
            details,
            progress,
        });
    }
}

impl Sink for LineSink<'_> {
    fn output(&mut self, stream: Stream, data: &[u8]) {
        if stream == Stream::Stdout {
            self.line(data);
        }
    }

    /// The first `result` or `error` line is the answer: the call returns it at once, and
    /// the runner ends a program that keeps running after it.
    fn answered(&self) -> bool {
        self.answer.is_some()
    }

    fn stdin_feed(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>> {
        self.asking.as_mut().and_then(|a| a.feed.take())
    }
}

/// The key of a workspace tool's grant in config `sandbox.tools`. A bare name grants the
/// tool of that name from the user's or a configured folder only, so a workspace tool that
/// takes a user tool's name never inherits what the user granted their own tool.
pub fn grant_key(name: &str, from_workspace: bool) -> String {
    if from_workspace {
        format!("workspace:{name}")
    } else {
        name.to_owned()
    }
}

/// The test-only switch (like `TOOLHOST_TEST_MODULE_IDLE_MS`): a path. A workspace tool
/// pinned to its approved copy then creates `PATH.pinned` and waits (at most 10 s) for
/// `PATH` to exist before its program starts, so a test can swap the folder in between.
pub const EXEC_GATE_VAR: &str = "TOOLHOST_TEST_EXEC_GATE";

async fn test_gate() {
    let Some(gate) = std::env::var_os(EXEC_GATE_VAR).map(PathBuf::from) else {
        return;
    };
    let mut waiting = gate.clone().into_os_string();
    waiting.push(".pinned");
    let _ = std::fs::write(&waiting, "");
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !gate.exists() && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_grant_names_its_source() {
        assert_eq!(grant_key("cachetool", false), "cachetool");
        assert_eq!(grant_key("cachetool", true), "workspace:cachetool");
    }
    use serde_json::json;

    fn sink_lines(lines: &[&str]) -> (Option<Answer>, String, Vec<ToolUpdate>) {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let updates = UpdateSink::new(tx);
        let mut s = LineSink::new(&updates);
        for l in lines {
            s.output(Stream::Stdout, l.as_bytes());
        }
        let mut got = Vec::new();
        while let Ok(u) = rx.try_recv() {
            got.push(u);
        }
        (s.answer.take(), s.plain.text(), got)
    }

    #[test]
    fn protocol_lines_and_plain_lines_are_told_apart() {
        let (answer, plain, updates) = sink_lines(&[
            "hello\n",
            "{\"update\": {\"content\": [{\"type\": \"text\", \"text\": \"half\"}], \"progress\": {\"progress\": 1, \"total\": 2}}}\n",
            "{\"not\": \"protocol\"}\n",
            "{\"result\": {\"n\": 1}}\n",
            "{\"result\": {\"n\": 2}}\n",
        ]);
        assert_eq!(plain, "hello\n{\"not\": \"protocol\"}\n");
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].content, vec![ContentBlock::text("half")]);
        assert_eq!(
            updates[0].progress,
            Some(Progress {
                progress: 1.0,
                total: Some(2.0),
                message: None
            })
        );
        match answer {
            Some(Answer::Result(m)) => assert_eq!(Value::Object(m), json!({"n": 1})),
            other => panic!("{other:?}"),
        }
    }
}
