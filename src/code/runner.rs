//! The process a program runs in: `node` running `runner.mjs`, one program per process,
//! so a program that never yields, eats memory or calls `process.exit` harms nothing
//! else. Starting Node costs ~200 ms, so a spare is started ahead and kept warm (a fresh
//! one after each run); a run then starts in a few milliseconds.
//!
//! Confinement, whatever the session's policy: the sandbox at `read-only` (its writes go
//! through tools) with the session's network; a seccomp filter refusing Unix sockets, so
//! no route leads to the daemon's socket; Node's permission model (no child processes,
//! workers, addons or file writes); `--max-old-space-size` and `RLIMIT_DATA`. Its only
//! channel to the daemon is its stdin/stdout pipes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::config::SandboxConfig;
use crate::process::{GroupGuard, Processes};
use crate::protocol::{Network, Progress, SandboxPolicy};
use crate::sandbox::{self, CallSandbox, Confinement, Plan};

/// The runner, embedded; passed to `node -e` (no file to write or to hide).
const SCRIPT: &str = include_str!("runner.mjs");
/// How long a fresh runner has to say it is ready.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest line the runner may send: output, result and JSON escaping of both, with
/// room for the envelope.
const MAX_LINE: usize = 4 * 1024 * 1024;
/// Bytes of the runner's stderr kept, to say why it died.
const STDERR_TAIL: usize = 4096;

/// What a runner process is started for: runs with another key need another process.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerKey {
    pub node: Option<PathBuf>,
    pub network: Network,
    pub sandbox: SandboxConfig,
    pub max_memory_mb: u64,
}

/// The spare, shared with the task that starts it.
#[derive(Clone)]
pub struct Runners {
    processes: Processes,
    spare: Arc<Mutex<Option<Process>>>,
    /// One spare start at a time, held while it starts.
    starting: Arc<tokio::sync::Mutex<()>>,
    /// The key of the spare starting, if one is.
    starting_key: Arc<Mutex<Option<RunnerKey>>>,
}

impl Runners {
    pub fn new(processes: Processes) -> Self {
        Runners {
            processes,
            spare: Arc::default(),
            starting: Arc::default(),
            starting_key: Arc::default(),
        }
    }

    /// Starts a spare for `key` in the background, unless one is there.
    fn prepare(&self, key: RunnerKey) {
        if crate::lock(&self.spare)
            .as_ref()
            .is_some_and(|p| p.key == key)
        {
            return;
        }
        let me = self.clone();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let _one = me.starting.lock().await;
            if crate::lock(&me.spare)
                .as_ref()
                .is_some_and(|p| p.key == key)
            {
                return;
            }
            *crate::lock(&me.starting_key) = Some(key.clone());
            let started = Process::spawn(&me.processes, key).await;
            *crate::lock(&me.starting_key) = None;
            match started {
                Ok(p) => *crate::lock(&me.spare) = Some(p),
                Err(e) => tracing::warn!("code mode: could not start a spare runner: {e}"),
            }
        });
    }

    /// A ready process for `run`: the spare when it fits; else the spare starting for its
    /// key (further along than a new process would be); else a new one.
    pub async fn take(
        &self,
        run: &super::Run,
        ctx: &crate::registry::CallContext,
    ) -> Result<Process, String> {
        if let Some(p) = self.spare_for(&run.key) {
            return Ok(p);
        }
        if crate::lock(&self.starting_key).as_ref() == Some(&run.key) {
            tokio::select! {
                _ = self.starting.lock() => {}
                _ = ctx.cancel.cancelled() => return Err("cancelled before the program started".into()),
            }
            if let Some(p) = self.spare_for(&run.key) {
                return Ok(p);
            }
        }
        tokio::select! {
            p = Process::spawn(&self.processes, run.key.clone()) => p,
            _ = ctx.cancel.cancelled() => Err("cancelled before the program started".into()),
        }
    }

    /// Ends a run's `process`, then starts the spare for the next run, in the background:
    /// the process is killed and reaped (so its group's guard finds nothing left to sweep),
    /// and only then a Node starts. Not while the program runs, nor in its answer's way: a
    /// Node starting takes a core for ~200 ms, which the program, its calls and the answer
    /// would wait for on a busy machine.
    pub fn retire(&self, mut process: Process) {
        process.kill();
        let me = self.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(super::KILL_WAIT, process.child.wait()).await;
            let key = process.key.clone();
            drop(process);
            me.prepare(key);
        });
    }

    /// The spare, if it is there, alive and started for `key`.
    fn spare_for(&self, key: &RunnerKey) -> Option<Process> {
        let mut p = crate::lock(&self.spare).take()?;
        (p.key == *key && p.alive()).then_some(p)
    }
}

/// One runner process, ready for its program.
pub struct Process {
    key: RunnerKey,
    child: Child,
    /// Kills the process group when dropped.
    _group: GroupGuard,
    stdin: ChildStdin,
    /// Its lines; a frame's buffer outlives a `next` dropped midway (`serve` selects on it
    /// beside the calls), so a line arriving in parts is never cut.
    stdout: FramedRead<ChildStdout, LinesCodec>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The sandbox's temp dir lives as long as the process.
    _confinement: Option<Confinement>,
}

/// How long the calls in flight of a stopped program have to end.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a program did not finish.
#[derive(Debug)]
pub enum Ended<W> {
    /// The process failed or died (the reason).
    Failed(String),
    /// The caller's `stop` fired.
    Stopped(W),
}

/// How a program ended.
#[derive(Debug)]
pub struct Done {
    pub output: String,
    pub truncated: bool,
    pub result: Option<Value>,
    /// Why it failed (a syntax error with its line, an exception, `process.exit`).
    pub error: Option<String>,
    /// Tool calls it made.
    pub calls: u64,
    /// When its first call's line arrived (the overhead figure: `CodeTool::run`'s log).
    pub first_call: Option<std::time::Instant>,
}

impl Process {
    async fn spawn(processes: &Processes, key: RunnerKey) -> Result<Process, String> {
        let node = crate::process::node::find_node(key.node.clone())?;
        let call = CallSandbox {
            policy: SandboxPolicy::ReadOnly,
            network: key.network,
            left: None,
            config: key.sandbox.clone(),
        };
        let confinement = match sandbox::plan(&call, Path::new("/"), &sandbox::Extras::default()) {
            Ok(Plan::Confined(c)) => Some(
                c.without_unix_sockets()
                    .map_err(|e| format!("could not set up the code runner's sandbox: {e}"))?,
            ),
            Ok(Plan::Off { .. }) => None,
            Ok(Plan::Unenforced { reason, .. }) => {
                tracing::warn!("code mode: the runner runs unconfined: {reason}");
                None
            }
            Err(refused) => return Err(refused.message),
        };
        let mut cmd = tokio::process::Command::new(&node);
        cmd.args([
            "--permission",
            "--allow-fs-read=*",
            "--disable-warning=ExperimentalWarning",
            &format!("--max-old-space-size={}", key.max_memory_mb),
            "--input-type=module",
            "-e",
            SCRIPT,
        ]);
        processes.scrub_env(&mut cmd, &globset::GlobSet::empty());
        cmd.current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(c) = &confinement {
            cmd.env("TMPDIR", c.tmpdir());
            sandbox::install(&mut cmd, c);
        }
        // The heap limit does not cover buffers outside it; the data limit does. Room for
        // Node itself on top of the program's share.
        let data = (key.max_memory_mb.saturating_add(256)).saturating_mul(1 << 20);
        // SAFETY: one setrlimit syscall between fork and exec; nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: data,
                    rlim_max: data,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (mut child, group) = processes
            .spawn_group(cmd)
            .await
            .map_err(|e| format!("cannot start {}: {e}", node.display()))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the code runner started without its pipes".into());
        };
        let tail = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(keep_tail(stderr, tail.clone()));
        let mut p = Process {
            key,
            child,
            _group: group,
            stdin,
            stdout: FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE)),
            stderr: tail,
            _confinement: confinement,
        };
        let ready = tokio::time::timeout(READY_TIMEOUT, p.read()).await;
        match ready {
            Ok(Ok(Some(v))) if v["op"] == "ready" => Ok(p),
            Ok(Ok(_)) | Ok(Err(_)) => Err(format!(
                "{} ended before the code runner was ready: {}",
                node.display(),
                p.stderr_tail()
            )),
            Err(_) => Err(format!(
                "the code runner was not ready within {} s",
                READY_TIMEOUT.as_secs()
            )),
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends the program.
    pub async fn send_program(
        &mut self,
        code: &str,
        tools: &[String],
        cwd: &Path,
        settings: &crate::config::CodeMode,
    ) -> Result<(), String> {
        let run = json!({"op": "run", "code": code, "tools": tools, "cwd": cwd,
                         "max_output": settings.max_output_bytes, "max_calls": settings.max_inner_calls});
        self.send(&run)
            .await
            .map_err(|e| format!("the code runner did not take the program: {e}"))
    }

    async fn send(&mut self, v: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(v)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await
    }

    /// The next line as JSON (`None` at the end); an unreadable line is an error.
    async fn read(&mut self) -> Result<Option<Value>, String> {
        match self.stdout.next().await {
            None => Ok(None),
            Some(Ok(line)) => serde_json::from_str(&line)
                .map(Some)
                .map_err(|_| "the code runner sent an unreadable line".to_owned()),
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => Err(format!(
                "the program sent more than {MAX_LINE} bytes at once (output and result are bounded by code_mode.max_output_bytes)"
            )),
            Some(Err(LinesCodecError::Io(e))) => Err(e.to_string()),
        }
    }

    /// Serves the program's calls (through `call`, all at once as it makes them) and
    /// progress until it ends, or until `stop` fires: then the process is killed and the
    /// calls in flight (cancelled by the caller's token) are let finish, so each still
    /// ends through the pipeline and has its audit line.
    pub async fn serve<F, Fut, S>(
        &mut self,
        call: F,
        progress: impl Fn(Progress),
        stop: S,
    ) -> Result<Done, Ended<S::Output>>
    where
        F: Fn(u64, String, Value) -> Fut,
        Fut: std::future::Future<Output = Value>,
        S: std::future::Future,
    {
        let mut running = FuturesUnordered::new();
        let mut calls = 0u64;
        let mut first_call = None;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                why = &mut stop => {
                    self.kill();
                    let drain = async { while running.next().await.is_some() {} };
                    let _ = tokio::time::timeout(DRAIN, drain).await;
                    return Err(Ended::Stopped(why));
                }
                Some(reply) = running.next(), if !running.is_empty() => {
                    // A runner that stopped reading ends below, when its stdout closes.
                    let _ = self.send(&reply).await;
                }
                line = self.read() => {
                    let Some(msg) = line.map_err(Ended::Failed)? else {
                        return Err(Ended::Failed(self.died().await));
                    };
                    match msg["op"].as_str() {
                        Some("call") => {
                            first_call.get_or_insert_with(std::time::Instant::now);
                            calls += 1;
                            let id = msg["id"].as_u64().unwrap_or(0);
                            let tool = msg["tool"].as_str().unwrap_or_default().to_owned();
                            running.push(call(id, tool, msg["args"].clone()));
                        }
                        Some("progress") => progress(Progress {
                            progress: msg["progress"].as_f64().unwrap_or(calls as f64),
                            total: msg["total"].as_f64(),
                            message: msg["message"].as_str().map(str::to_owned),
                        }),
                        Some("done") => return Ok(done(msg, calls, first_call)),
                        _ => {}
                    }
                }
            }
        }
    }

    /// Why the process ended without finishing its program.
    async fn died(&mut self) -> String {
        let status = tokio::time::timeout(super::KILL_WAIT, self.child.wait()).await;
        // Let the stderr reader catch up with the last lines.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let tail = self.stderr_tail();
        let oom = [
            "heap out of memory",
            "Allocation failed",
            "allocation failed",
        ]
        .iter()
        .any(|m| tail.contains(m));
        let status = match status {
            Ok(Ok(s)) => s.to_string(),
            _ => "an unknown status".into(),
        };
        if oom {
            format!(
                "the program ran out of memory (code_mode.max_memory_mb is {} MB) and was ended ({status})",
                self.key.max_memory_mb
            )
        } else {
            format!("the program's process ended before the program finished ({status}): {tail}")
        }
    }

    fn stderr_tail(&self) -> String {
        let tail = crate::lock(&self.stderr);
        String::from_utf8_lossy(&tail).trim().to_owned()
    }

    /// Ends the process at once (its group is killed when it is dropped too).
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The `done` line as a [`Done`].
fn done(msg: Value, calls: u64, first_call: Option<std::time::Instant>) -> Done {
    let error = (msg["ok"] != true).then(|| {
        msg["error"]
            .as_str()
            .unwrap_or("the program failed")
            .to_owned()
    });
    Done {
        output: msg["output"].as_str().unwrap_or_default().to_owned(),
        truncated: msg["truncated"] == true,
        result: msg.get("result").filter(|v| !v.is_null()).cloned(),
        error,
        calls,
        first_call,
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes the runner writes to stderr.
async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut t = crate::lock(&tail);
        t.extend_from_slice(&buf[..n]);
        let over = t.len().saturating_sub(STDERR_TAIL);
        t.drain(..over);
    }
}
