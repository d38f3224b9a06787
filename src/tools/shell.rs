//! The `bash` tool: runs one shell command in the workspace, in its own process group.
//!
//! The command runs as `bash -c <command>` (or `sh -c` where bash is absent) with stdin
//! closed and a scrubbed environment, through the shared process runner: stdout and stderr
//! are each kept within a memory cap (head and tail; the middle is counted and dropped) and
//! the process group is killed on timeout, on cancel, when the future is dropped, and once
//! the command has finished (background processes do not outlive their call — see the
//! process module's invariant).

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::paths::{resolve, shown, workspace_root};
use super::{int_arg, object_schema, opt_str_arg, str_arg};
use crate::catalog::ToolSpec;
use crate::process::runner::{self, Capture, End, Outcome, Sink, Spec, Stream};
use crate::protocol::{ApprovalClass, ContentBlock, ErrorKind, ToolOutput};
use crate::registry::{CallContext, Tool, ToolError, ToolResult, ToolUpdate, UpdateSink};
use crate::sandbox::{self, Plan};

/// `timeout_ms` when the call does not give one.
pub const BASH_DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The largest `timeout_ms` accepted (10 minutes).
pub const BASH_MAX_TIMEOUT_MS: u64 = 600_000;
/// How much of each of stdout and stderr is kept in memory (half head, half tail).
pub const BASH_OUTPUT_CAP_BYTES: usize = 4 * 1024 * 1024;
/// After the command exits, how long background processes may keep its pipes open before
/// the group is killed.
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// At most one streamed update per stream per this interval.
const UPDATE_INTERVAL: Duration = Duration::from_millis(100);
/// A partial line is streamed anyway once this much is pending.
const UPDATE_MAX_PENDING: usize = 16 * 1024;

/// Runs shell commands.
pub struct Bash {
    spec: ToolSpec,
    /// `bash` found on the daemon's PATH, else `sh`.
    shell: PathBuf,
    /// Per-stream memory cap; [`BASH_OUTPUT_CAP_BYTES`] except in tests.
    output_cap: usize,
}

impl Default for Bash {
    fn default() -> Self {
        Self::new()
    }
}

impl Bash {
    pub fn new() -> Self {
        let description = format!(
            "- Runs a shell command with `bash -c` in the workspace (or in cwd, a directory inside it), stdin closed; use it to build, test, run git and other programs.\n\
             - Returns exit_code, stdout and stderr. A non-zero exit_code is still ok: true (the command ran; read exit_code and stderr); ok: false means it could not start, timed out (error_kind \"timeout\", partial stdout/stderr included) or was cancelled.\n\
             - Times out after timeout_ms (default {BASH_DEFAULT_TIMEOUT_MS}, at most {BASH_MAX_TIMEOUT_MS}); on timeout the whole process group is killed.\n\
             - Background processes do not outlive the call: the process group is killed when the command exits. Do not start servers or watchers expecting them to keep running.\n\
             - The session may run commands in a sandbox (writes limited to the workspace and $TMPDIR, maybe no network); a result field `sandbox` says when it probably refused something.\n\
             - Output beyond {} MiB per stream keeps its beginning and end (stdout_truncated/stderr_truncated: true); prefer quiet flags and filters (| tail, | grep) for long outputs.",
            BASH_OUTPUT_CAP_BYTES / (1024 * 1024)
        );
        let parameters = object_schema(
            json!({
                "command": {
                    "type": "string",
                    "description": "The command line, run as `bash -c <command>`.",
                    "minLength": 1
                },
                "timeout_ms": {
                    "type": "integer",
                    "description": "Kill the command after this many milliseconds.",
                    "minimum": 1,
                    "maximum": BASH_MAX_TIMEOUT_MS,
                    "default": BASH_DEFAULT_TIMEOUT_MS
                },
                "cwd": {
                    "type": "string",
                    "description": "Working directory, relative to the workspace or absolute inside it; default: the workspace."
                }
            }),
            &["command"],
        );
        Bash {
            spec: ToolSpec::builtin("bash", &description, parameters, ApprovalClass::Command),
            shell: find_shell(),
            output_cap: BASH_OUTPUT_CAP_BYTES,
        }
    }
}

/// `bash` from the daemon's PATH, or `sh` when there is none.
fn find_shell() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("bash"))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| PathBuf::from("sh"))
}

impl Tool for Bash {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: CallContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let command = str_arg(&args, "command")?;
            if command.trim().is_empty() {
                return Err(ToolError::invalid("command must not be empty"));
            }
            let own = int_arg(
                &args,
                "timeout_ms",
                BASH_DEFAULT_TIMEOUT_MS,
                1,
                BASH_MAX_TIMEOUT_MS,
            )?;
            let timeout = ctx.own_timeout(own);
            let root = workspace_root(&ctx.workspace)?;
            let cwd = match opt_str_arg(&args, "cwd")? {
                None => root.clone(),
                Some(raw) => {
                    let p = resolve(&root, &[], raw)?;
                    if !p.is_dir() {
                        return Err(ToolError::failed(format!(
                            "cwd {} is not an existing directory",
                            shown(&root, &p)
                        )));
                    }
                    p
                }
            };
            let mut spec = Spec::new(&self.shell, &cwd);
            spec.args = vec!["-c".into(), command.into()];
            spec.env = vec![
                ("TOOLHOST_CALL_ID".into(), ctx.call_id.clone().into()),
                ("TOOLHOST_WORKSPACE".into(), root.clone().into()),
                (
                    "TOOLHOST_SESSION_ID".into(),
                    ctx.session_id.clone().unwrap_or_default().into(),
                ),
                (
                    "TOOLHOST_SESSION_META".into(),
                    ctx.session_meta.to_string().into(),
                ),
            ];
            spec.timeout = Some(timeout);
            spec.output_cap = self.output_cap;
            spec.exit_grace = EXIT_GRACE;
            let plan = sandbox::plan(&ctx.sandbox, &root, &sandbox::Extras::default())?;
            if let Plan::Confined(c) = &plan {
                spec.confine = Some(c.clone());
            }
            let mut batcher = UpdateBatcher::new(&ctx.updates);
            let outcome = runner::run(&ctx.processes, spec, &ctx.cancel, &mut batcher)
                .await
                .map_err(|e| {
                    ToolError::failed(format!("could not start {}: {e}", self.shell.display()))
                })?;
            if ctx.updates.is_active() {
                batcher.flush_all(true);
            }
            let failed =
                !matches!(outcome.end, End::Exited(s) | End::ExitedPipesHeld(s) if s.success());
            let note = plan.result_note(failed, &outcome.stderr.text());
            match (result(outcome, timeout), note) {
                (Ok(mut ok), Some(n)) => {
                    ok.insert("sandbox", n);
                    Ok(ok)
                }
                (Err(e), Some(n)) => Err(e.with_field("sandbox", n)),
                (r, None) => r,
            }
        })
    }

    fn sandboxed(&self) -> bool {
        true
    }
}

/// Streams each output as updates: complete lines at most every [`UPDATE_INTERVAL`], or
/// everything pending once [`UPDATE_MAX_PENDING`] bytes wait. Holds data only while
/// somebody listens.
struct UpdateBatcher<'a> {
    updates: &'a UpdateSink,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    last_flush: Instant,
}

impl<'a> UpdateBatcher<'a> {
    fn new(updates: &'a UpdateSink) -> Self {
        UpdateBatcher {
            updates,
            stdout: Vec::new(),
            stderr: Vec::new(),
            last_flush: Instant::now() - UPDATE_INTERVAL,
        }
    }

    /// Sends the complete lines pending (or everything, once a lot is pending).
    fn flush_stream(pending: &mut Vec<u8>, stream: &str, updates: &UpdateSink, all: bool) {
        let cut = if all || pending.len() >= UPDATE_MAX_PENDING {
            pending.len()
        } else {
            match pending.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => return,
            }
        };
        if cut == 0 {
            return;
        }
        let chunk: Vec<u8> = pending.drain(..cut).collect();
        updates.send(ToolUpdate {
            content: vec![ContentBlock::text(String::from_utf8_lossy(&chunk))],
            details: Some(json!({"stream": stream})),
            progress: None,
        });
    }

    fn flush_all(&mut self, all: bool) {
        Self::flush_stream(&mut self.stdout, "stdout", self.updates, all);
        Self::flush_stream(&mut self.stderr, "stderr", self.updates, all);
    }
}

impl Sink for UpdateBatcher<'_> {
    fn output(&mut self, stream: Stream, data: &[u8]) {
        if !self.updates.is_active() {
            return;
        }
        match stream {
            Stream::Stdout => self.stdout.extend_from_slice(data),
            Stream::Stderr => self.stderr.extend_from_slice(data),
        }
    }

    fn next_flush(&self) -> Option<Instant> {
        let pending = !self.stdout.is_empty() || !self.stderr.is_empty();
        pending.then_some(self.last_flush + UPDATE_INTERVAL)
    }

    fn flush(&mut self) {
        self.flush_all(false);
        self.last_flush = Instant::now();
    }
}

fn put(capture: &Capture, out: &mut Map<String, Value>, stream: &str) {
    out.insert(stream.into(), json!(capture.text()));
    if capture.dropped() > 0 {
        out.insert(format!("{stream}_truncated"), json!(true));
        out.insert(format!("{stream}_omitted_bytes"), json!(capture.dropped()));
    }
}

/// Turns the runner's outcome into the tool's result.
fn result(outcome: Outcome, timeout: Duration) -> ToolResult {
    let mut fields = Map::new();
    put(&outcome.stdout, &mut fields, "stdout");
    put(&outcome.stderr, &mut fields, "stderr");
    match outcome.end {
        End::Exited(s) | End::ExitedPipesHeld(s) => {
            let mut ok = Map::new();
            let (code, signal) = match (s.code(), s.signal()) {
                (Some(c), _) => (c, None),
                (None, Some(sig)) => (128 + sig, Some(sig)),
                (None, None) => (-1, None),
            };
            ok.insert("exit_code".into(), json!(code));
            if let Some(sig) = signal {
                ok.insert("signal".into(), json!(sig));
            }
            ok.extend(fields);
            if matches!(outcome.end, End::ExitedPipesHeld(_)) {
                ok.insert(
                    "note".into(),
                    json!(format!(
                        "the command exited but background processes kept its output open; they were killed after {} ms",
                        EXIT_GRACE.as_millis()
                    )),
                );
            }
            Ok(ToolOutput::from_fields(ok))
        }
        End::TimedOut => {
            let mut e = ToolError::new(
                ErrorKind::Timeout,
                format!(
                    "command timed out after {} ms; its process group was killed (partial output in stdout/stderr)",
                    timeout.as_millis()
                ),
            );
            e.output = Box::new(ToolOutput::from_fields(fields));
            Err(e.with_field(
                "timeout_ms",
                json!(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            ))
        }
        // bash's sink never answers, so only a cancel ends a run early.
        End::Cancelled | End::Answered => {
            let mut e = ToolError::new(
                ErrorKind::Cancelled,
                "command cancelled; its process group was killed",
            );
            e.output = Box::new(ToolOutput::from_fields(fields));
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::process::group_exists;
    use crate::tools::test_support::{args, ctx};

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        (dir, root)
    }

    /// A `bash` call's fields (or its error).
    async fn bash(root: &std::path::Path, a: Value) -> Result<Map<String, Value>, ToolError> {
        Bash::new().call(args(a), ctx(root)).await.map(|o| o.fields)
    }

    /// Members of the group that are alive (not zombies), from /proc.
    fn live_members(pgid: i32) -> Vec<String> {
        let mut live = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid pgrp ...; comm may contain spaces, so split after ')'.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.get(2) == Some(&pgid.to_string().as_str()) && fields[0] != "Z" {
                live.push(stat);
            }
        }
        live
    }

    /// Waits until the group is gone. Its members die at once, but they are orphans reaped
    /// by PID 1, which in some containers does so only every second or so; zombies are
    /// dead, so a group of zombies counts as gone.
    async fn wait_group_gone(pgid: i32) {
        for _ in 0..150 {
            if !group_exists(pgid) || live_members(pgid).is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("process group {pgid} survived: {:?}", live_members(pgid));
    }

    #[tokio::test]
    async fn bash_returns_exit_code_stdout_and_stderr() {
        let (_d, root) = ws();
        let r = bash(&root, json!({"command": "echo out; echo err >&2; exit 3"}))
            .await
            .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"exit_code": 3, "stdout": "out\n", "stderr": "err\n"})
        );
    }

    #[tokio::test]
    async fn bash_runs_in_workspace_or_cwd_with_call_env() {
        let (_d, root) = ws();
        std::fs::create_dir(root.join("sub")).unwrap();
        let r = bash(
            &root,
            json!({"command": "pwd; echo $TOOLHOST_CALL_ID; echo $TOOLHOST_WORKSPACE"}),
        )
        .await
        .unwrap();
        let ws = root.display();
        assert_eq!(r["stdout"], format!("{ws}\ncall_test\n{ws}\n"));
        let r = bash(&root, json!({"command": "pwd", "cwd": "sub"}))
            .await
            .unwrap();
        assert_eq!(r["stdout"], format!("{ws}/sub\n"));
    }

    #[tokio::test]
    async fn bash_refuses_cwd_outside_the_workspace() {
        let (_d, root) = ws();
        for cwd in ["..", "/tmp"] {
            let e = bash(&root, json!({"command": "pwd", "cwd": cwd}))
                .await
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArguments);
            assert!(
                e.message
                    .starts_with(&format!("path escapes the workspace: {cwd} ")),
                "{}",
                e.message
            );
        }
        let e = bash(&root, json!({"command": "pwd", "cwd": "missing"}))
            .await
            .unwrap_err();
        assert_eq!(e.message, "cwd missing is not an existing directory");
    }

    #[tokio::test]
    async fn bash_timeout_kills_the_whole_group_and_keeps_partial_output() {
        let (_d, root) = ws();
        let started = StdInstant::now();
        let e = bash(
            &root,
            json!({"command": "echo $$; sleep 30 & sleep 30", "timeout_ms": 300}),
        )
        .await
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert!(
            e.message.starts_with("command timed out after 300 ms"),
            "{}",
            e.message
        );
        assert_eq!(e.output.fields["timeout_ms"], 300);
        let pgid: i32 = e.output.fields["stdout"]
            .as_str()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn bash_takes_the_smaller_of_its_own_and_the_call_timeout() {
        let (_d, root) = ws();
        let mut c = ctx(&root);
        c.timeout_ms = Some(300);
        let started = StdInstant::now();
        let e = Bash::new()
            .call(args(json!({"command": "sleep 30"})), c)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn bash_does_not_hang_on_background_children_holding_the_pipes() {
        let (_d, root) = ws();
        let started = StdInstant::now();
        let r = bash(&root, json!({"command": "sleep 30 & echo $$; echo done"}))
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(r["exit_code"], 0);
        let stdout = r["stdout"].as_str().unwrap();
        assert!(stdout.ends_with("\ndone\n"), "{stdout}");
        assert!(r["note"].as_str().unwrap().contains("background processes"));
        let pgid: i32 = stdout.lines().next().unwrap().parse().unwrap();
        wait_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn bash_caps_output_keeping_head_and_tail() {
        let (_d, root) = ws();
        let tool = Bash {
            output_cap: 1000,
            ..Bash::new()
        };
        let cmd = "printf 'HEAD'; head -c 5000 /dev/zero | tr '\\0' x; printf 'TAIL'";
        let r = tool
            .call(args(json!({"command": cmd})), ctx(&root))
            .await
            .unwrap()
            .fields;
        let out = r["stdout"].as_str().unwrap();
        assert!(out.starts_with("HEADxxx"), "{out}");
        assert!(out.ends_with("xxxTAIL"), "{out}");
        assert!(out.contains("\n…[4008 bytes omitted]…\n"), "{out}");
        assert_eq!(r["stdout_truncated"], true);
        assert_eq!(r["stdout_omitted_bytes"], 4008);
        assert!(r.get("stderr_truncated").is_none());
    }

    #[tokio::test]
    async fn bash_cancel_kills_and_returns_quickly() {
        let (_d, root) = ws();
        let c = ctx(&root);
        let cancel = c.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        let started = StdInstant::now();
        let e = Bash::new()
            .call(args(json!({"command": "echo $$; sleep 30"})), c)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(e.kind, ErrorKind::Cancelled);
        let pgid: i32 = e.output.fields["stdout"]
            .as_str()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_group() {
        let (_d, root) = ws();
        let marker = root.join("pid");
        let cmd = format!("echo $$ > {}; sleep 30", marker.display());
        let tool = Bash::new();
        let call = tool.call(args(json!({"command": cmd})), ctx(&root));
        let _ = tokio::time::timeout(Duration::from_millis(300), call).await;
        let pgid: i32 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn bash_streams_output_lines_as_updates() {
        let (_d, root) = ws();
        let (tx, mut rx) = mpsc::channel(64);
        let mut c = ctx(&root);
        c.updates = UpdateSink::new(tx);
        let r = Bash::new()
            .call(
                args(json!({"command": "echo first; sleep 0.3; echo second"})),
                c,
            )
            .await
            .unwrap();
        assert_eq!(r.fields["stdout"], "first\nsecond\n");
        let mut texts = Vec::new();
        while let Ok(u) = rx.try_recv() {
            assert_eq!(u.details, Some(json!({"stream": "stdout"})));
            match &u.content[0] {
                ContentBlock::Text { text } => texts.push(text.clone()),
                other => panic!("not text: {other:?}"),
            }
        }
        assert_eq!(texts, ["first\n", "second\n"]);
    }
}
