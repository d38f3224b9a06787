//! `toolhost doctor`: every frontend's `toolhost` entry, started the way that frontend
//! starts it, and whether it reaches this daemon.
//!
//! The entries come from the same reader as `toolhost import` ([`crate::import`]). Each is
//! run as its frontend would: its command and args, the environment that frontend gives
//! a stdio server ([`EnvRule`]) plus the entry's own `env`, in the directory the frontend
//! starts it in (the entry's `cwd`, else [`start_dir`]). The doctor then speaks MCP to it
//! (`initialize`, `tools/list`) as client `toolhost-doctor` with a version of its own, and
//! finds the session that made in this daemon's `session.list`: so "reaches this daemon"
//! is seen, not guessed, and the session says in which workspace it works.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::render::{emit, say, say_err};
use super::Globals;
use crate::client::Client;
use crate::import::{self, Frontend};
use crate::protocol::SessionListParams;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The project whose `.mcp.json`, `.cursor/mcp.json` and `.vscode/mcp.json` are checked,
    /// and where the frontends are taken to be started (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

/// The client name the doctor gives itself in `initialize`.
const CLIENT: &str = "toolhost-doctor";

/// The longest one entry may take to answer `initialize` and `tools/list`.
const PER_ENTRY: Duration = Duration::from_secs(15);

/// What `toolhost doctor` found (also its `--json` shape).
#[derive(Debug, Serialize)]
struct Report {
    /// The socket this daemon answers on, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<String>,
    /// Why no daemon answers, when none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    no_daemon: Option<String>,
    /// Whether a bridge started with no environment at all finds that socket by itself
    /// (else every entry should name it with `--socket`).
    found_without_environment: bool,
    entries: Vec<Checked>,
    /// Frontend files that hold MCP servers but no toolhost entry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    without_toolhost: Vec<Missing>,
    /// Files that could not be read or parsed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

/// One toolhost entry, as run.
#[derive(Debug, Serialize)]
struct Checked {
    frontend: Frontend,
    file: PathBuf,
    /// Where in the file (`mcpServers.toolhost`).
    at: String,
    /// The command line run (command first).
    command: Vec<String>,
    cwd: PathBuf,
    /// The environment rule of the frontend.
    env: EnvRule,
    /// A stdio entry (an HTTP one is listed, not checked).
    stdio: bool,
    /// It answered `tools/list` with a session in this daemon.
    reached: bool,
    /// How many tools it listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<usize>,
    /// The session's workspace, and how it was chosen (`roots`, `flag`, `cwd`, `daemon`).
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace_from: Option<String>,
    /// What went wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// What to change (a failure), or what to know (a session without a project).
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Debug, Serialize)]
struct Missing {
    frontend: Frontend,
    file: PathBuf,
    servers: usize,
    fix: String,
}

/// The environment a frontend gives the stdio servers it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum EnvRule {
    /// Its own environment (Claude Code, Cursor, VS Code, Gemini CLI).
    Inherited,
    /// The MCP SDKs' default (`getDefaultEnvironment`): Claude Desktop.
    SdkDefault,
    /// Codex's allow-list, plus the names in the entry's `env_vars`.
    CodexAllowList,
}

impl EnvRule {
    fn of(frontend: Frontend) -> EnvRule {
        match frontend {
            Frontend::ClaudeDesktop => EnvRule::SdkDefault,
            Frontend::Codex => EnvRule::CodexAllowList,
            Frontend::ClaudeCode | Frontend::Cursor | Frontend::VsCode | Frontend::Gemini => {
                EnvRule::Inherited
            }
        }
    }

    /// The variables kept from the frontend's environment (`None`: all of them).
    fn kept(self) -> Option<&'static [&'static str]> {
        match self {
            EnvRule::Inherited => None,
            // The TypeScript and Python SDKs' DEFAULT_INHERITED_ENV_VARS on Unix.
            EnvRule::SdkDefault => Some(&["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"]),
            // codex-rs rmcp-client DEFAULT_ENV_VARS on Unix.
            EnvRule::CodexAllowList => Some(&[
                "HOME",
                "LOGNAME",
                "PATH",
                "SHELL",
                "USER",
                "__CF_USER_TEXT_ENCODING",
                "LANG",
                "LC_ALL",
                "TERM",
                "TMPDIR",
                "TZ",
            ]),
        }
    }

    fn label(self) -> &'static str {
        match self {
            EnvRule::Inherited => "its whole environment",
            EnvRule::SdkDefault => "the MCP SDK's default environment",
            EnvRule::CodexAllowList => "Codex's variable allow-list",
        }
    }
}

/// Where a frontend starts a stdio server that names no `cwd`: the project it runs in
/// (`workspace`; a Claude Code project entry: that project), except Claude Desktop, an
/// application started from the desktop, in no project (`/`).
fn start_dir(frontend: Frontend, at: &[String], workspace: &Path) -> PathBuf {
    match (frontend, at) {
        (Frontend::ClaudeDesktop, _) => PathBuf::from("/"),
        (Frontend::ClaudeCode, [projects, path, _]) if projects == "projects" => {
            PathBuf::from(path)
        }
        _ => workspace.to_path_buf(),
    }
}

/// The frontend's own command that adds a stdio server named toolhost, up to its command
/// (for the frontends that have one).
fn add_command(frontend: Frontend) -> Option<&'static str> {
    match frontend {
        Frontend::ClaudeCode => Some("claude mcp add toolhost --"),
        Frontend::Codex => Some("codex mcp add toolhost --"),
        Frontend::Gemini => Some("gemini mcp add toolhost"),
        Frontend::ClaudeDesktop | Frontend::Cursor | Frontend::VsCode => None,
    }
}

pub async fn run(g: &Globals, a: DoctorArgs) -> ExitCode {
    let Some(home) = crate::protocol::home_dir() else {
        say_err!("toolhost: no home directory, so the frontends' files cannot be found");
        return ExitCode::from(2);
    };
    let workspace = match a.workspace.map_or_else(std::env::current_dir, Ok) {
        Ok(w) => w,
        Err(e) => {
            say_err!("toolhost: no current directory: {e}");
            return ExitCode::from(2);
        }
    };
    let codex_home = std::env::var_os("CODEX_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let sources = import::sources(&home, &workspace, codex_home);

    let sockets = g.socket_paths();
    let socket = super::locate::answering(&sockets).await;
    let (client, no_daemon) = match Client::connect_first(&sockets).await {
        Ok(c) => (Some(c.with_timeout(PER_ENTRY)), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let itself = import::Itself {
        listen_tcp: None,
        exe: std::env::current_exe().and_then(std::fs::canonicalize).ok(),
    };
    let mut report = Report {
        found_without_environment: socket
            .as_deref()
            .is_some_and(crate::protocol::found_without_environment),
        socket: socket.as_ref().map(|s| s.display().to_string()),
        no_daemon,
        entries: Vec::new(),
        without_toolhost: Vec::new(),
        errors: Vec::new(),
    };
    let mut n = 0;
    for source in &sources {
        let entries = match import::read(source) {
            Ok(Some((entries, _))) => entries,
            Ok(None) => continue,
            Err(e) => {
                report.errors.push(e);
                continue;
            }
        };
        let (ours, others): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|e| import::is_toolhost(e, &itself));
        if ours.is_empty() && !others.is_empty() {
            report.without_toolhost.push(Missing {
                frontend: source.frontend,
                file: source.file.clone(),
                servers: others.len(),
                fix: "`toolhost import --apply --rewrite` moves its servers into toolhost and \
                      adds the toolhost entry"
                    .to_owned(),
            });
        }
        for entry in ours {
            n += 1;
            let checked = check(
                source.frontend,
                &source.file,
                &entry,
                &workspace,
                client.as_ref(),
                socket.as_deref(),
                n,
            )
            .await;
            report.entries.push(checked);
        }
    }
    let ok = report.entries.iter().all(|c| c.reached || !c.stdio)
        && report.entries.iter().any(|c| c.stdio)
        && report.errors.is_empty();
    if g.out.json {
        emit(g.out, &report);
    } else {
        print(&report);
    }
    super::success_if(ok)
}

/// Runs one entry as its frontend would and sees where it lands.
async fn check(
    frontend: Frontend,
    file: &Path,
    entry: &import::Entry,
    workspace: &Path,
    client: Option<&Client>,
    socket: Option<&Path>,
    n: usize,
) -> Checked {
    let raw = &entry.raw;
    let strings = |key: &str| -> Vec<String> {
        raw.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let command: Vec<String> = raw
        .get("command")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .into_iter()
        .chain(strings("args"))
        .collect();
    let rule = EnvRule::of(frontend);
    let cwd = raw
        .get("cwd")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map_or_else(|| start_dir(frontend, &entry.at, workspace), PathBuf::from);
    let at = entry
        .at
        .iter()
        .chain([&entry.name])
        .cloned()
        .collect::<Vec<_>>()
        .join(".");
    let mut out = Checked {
        frontend,
        file: file.to_path_buf(),
        at,
        command: command.clone(),
        cwd: cwd.clone(),
        env: rule,
        stdio: !command.is_empty(),
        reached: false,
        tools: None,
        workspace: None,
        workspace_from: None,
        error: None,
        fix: None,
    };
    let Some((program, args)) = command.split_first() else {
        out.fix = Some("an HTTP entry: the doctor starts stdio entries only".to_owned());
        return out;
    };
    // As the frontend's own environment holds them: bytes, not necessarily UTF-8.
    let named =
        |k: &std::ffi::OsStr, names: &[&str]| k.to_str().is_some_and(|k| names.contains(&k));
    let more = strings("env_vars");
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| match rule.kept() {
            None => true,
            Some(kept) => named(k, kept) || (rule == EnvRule::CodexAllowList && named(k, &more)),
        })
        .collect();
    for (k, v) in raw
        .get("env")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(v) = v.as_str() {
            env.retain(|(have, _)| have.to_str() != Some(k.as_str()));
            env.push((k.into(), v.into()));
        }
    }
    let path_seen = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce = format!("{}-{n}", std::process::id());
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env)
        .current_dir(&cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            out.error = Some(format!("cannot start {program} in {}: {e}", cwd.display()));
            out.fix = Some(
                if e.kind() == std::io::ErrorKind::NotFound && !cwd.is_dir() {
                    format!(
                        "{} does not exist: this entry starts nowhere",
                        cwd.display()
                    )
                } else if e.kind() == std::io::ErrorKind::NotFound {
                    let exe = std::env::current_exe()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|_| "toolhost".into());
                    format!(
                        "{program} is not on this frontend's PATH ({path_seen}): use the absolute \
                     path {exe} as its command"
                    )
                } else {
                    format!("make {program} runnable")
                },
            );
            return out;
        }
    };
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let talked = tokio::time::timeout(PER_ENTRY, talk(&mut child, &nonce, client)).await;
    // Its input is closed (as a frontend that is done closes it): a moment to end on its
    // own, then the group goes as a frontend's would.
    let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    if let Some(pgid) = pgid {
        // The bridge and anything it started: the frontend would end them too.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.wait().await;
    let socket_fix = |what: &str| match socket {
        Some(s) => {
            let args = super::import::bridge_args(Some(s)).join(" ");
            let snippet = add_command(frontend)
                .map(|add| format!(", e.g. `{add} {program} {args}`"))
                .unwrap_or_default();
            format!("{what}: make its args `{args}`{snippet}")
        }
        None => format!("{what}: start the daemon (`toolhost serve`), then run the doctor again"),
    };
    match talked {
        Err(_) => {
            out.error = Some(format!("no answer within {}s", PER_ENTRY.as_secs()));
            out.fix = Some("run its command by hand to see what it waits for".to_owned());
        }
        Ok(Err(e)) => {
            out.error = Some(e);
            out.fix = Some(socket_fix(&format!(
                "started with {}, it finds no daemon",
                rule.label()
            )));
        }
        Ok(Ok(Talked { tools, session })) => {
            out.tools = Some(tools);
            match session {
                Some(s) => {
                    out.reached = true;
                    out.workspace = Some(s.workspace.clone());
                    let from = s
                        .meta
                        .get(crate::protocol::META_WORKSPACE_FROM)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    if from == "daemon" {
                        out.fix = Some(format!(
                            "started in {} (no project), its session works in the daemon's \
                             workspace unless the frontend sends roots: add `--workspace DIR` \
                             to its args to name a project",
                            cwd.display()
                        ));
                    }
                    out.workspace_from = Some(from);
                }
                None if client.is_none() => {
                    out.fix = Some(
                        "it reaches a daemon, but this shell's toolhost finds none: run the \
                         doctor with the same --socket"
                            .to_owned(),
                    );
                }
                None => {
                    out.error = Some("it reaches another daemon, not this one".to_owned());
                    out.fix = Some(socket_fix("it reaches another daemon"));
                }
            }
        }
    }
    if out.error.is_some() {
        if let Some(mut stderr) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let mut text = String::new();
            let _ =
                tokio::time::timeout(Duration::from_millis(200), stderr.read_to_string(&mut text))
                    .await;
            if let Some(last) = text.lines().rev().find(|l| !l.trim().is_empty()) {
                let e = out.error.take().unwrap_or_default();
                out.error = Some(format!("{e} (its last words: {})", last.trim()));
            }
        }
    }
    out
}

/// What the entry answered.
struct Talked {
    tools: usize,
    /// The session it made in this daemon, when it reached this daemon.
    session: Option<crate::protocol::Session>,
}

/// The child's stdio, spoken as an MCP client.
struct Peer {
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl Peer {
    async fn send(&mut self, line: &Value) -> Result<(), String> {
        let mut text = line.to_string();
        text.push('\n');
        self.stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|e| format!("it closed its input: {e}"))
    }

    /// One request's result; an error answer is `Err` with its message.
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let Some(text) = self.lines.next_line().await.map_err(|e| e.to_string())? else {
                return Err(format!("it exited before answering {method}"));
            };
            let Ok(msg) = serde_json::from_str::<Value>(&text) else {
                return Err(format!(
                    "it wrote something that is not JSON-RPC: {text:.120}"
                ));
            };
            if msg.get("id") != Some(&id) || msg.get("method").is_some() {
                continue;
            }
            if let Some(e) = msg.get("error") {
                let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                return Err(format!("{method}: {message}"));
            }
            return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
        }
    }
}

/// `initialize`, `initialized`, `tools/list` (every page) over the child's stdio, then the
/// session it made, looked up in this daemon while the child still runs.
async fn talk(
    child: &mut tokio::process::Child,
    nonce: &str,
    client: Option<&Client>,
) -> Result<Talked, String> {
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("no pipes to the child".to_owned());
    };
    let mut peer = Peer {
        stdin,
        lines: BufReader::new(stdout).lines(),
        next_id: 0,
    };
    peer.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": CLIENT, "version": nonce}}),
    )
    .await?;
    peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    let mut tools = 0;
    let mut cursor: Option<Value> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = peer.request("tools/list", params).await?;
        tools += page
            .get("tools")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match page.get("nextCursor") {
            Some(c) if !c.is_null() => cursor = Some(c.clone()),
            _ => break,
        }
    }
    let session = match client {
        Some(c) => session_of(c, nonce).await,
        None => None,
    };
    Ok(Talked { tools, session })
}

/// The session the doctor's connection `nonce` made in the daemon.
async fn session_of(client: &Client, nonce: &str) -> Option<crate::protocol::Session> {
    let mut after = None;
    loop {
        let page = client
            .session_list(&SessionListParams {
                limit: Some(1000),
                after: after.take(),
            })
            .await
            .ok()?;
        let found = page.sessions.into_iter().find(|s| {
            let c = s.meta.get("mcp_client");
            c.and_then(|c| c.get("name")) == Some(&json!(CLIENT))
                && c.and_then(|c| c.get("version")) == Some(&json!(nonce))
        });
        if found.is_some() {
            return found;
        }
        after = Some(page.next?);
    }
}

fn print(r: &Report) {
    match (&r.socket, &r.no_daemon) {
        (Some(s), _) => {
            let found = if r.found_without_environment {
                "a bridge finds it in any environment"
            } else {
                "not a default path: a frontend that empties the environment needs --socket"
            };
            say!("daemon    answering on {s} ({found})");
        }
        (None, Some(e)) => say!("daemon    none answering: {e}"),
        (None, None) => say!("daemon    none answering"),
    }
    if r.entries.is_empty() {
        say!("no frontend has a toolhost entry: `toolhost import --apply --rewrite` adds one");
    }
    for c in &r.entries {
        say!("");
        say!("{:<15} {} {}", c.frontend.label(), c.file.display(), c.at);
        say!(
            "  runs    {} (in {}, {})",
            c.command.join(" "),
            c.cwd.display(),
            c.env.label()
        );
        if !c.stdio {
            say!("  skip    not a stdio entry");
        } else if c.reached {
            say!(
                "  ok      reaches this daemon: {} tools, workspace {} ({})",
                c.tools.unwrap_or(0),
                c.workspace.as_deref().unwrap_or("?"),
                c.workspace_from.as_deref().unwrap_or("?")
            );
        } else if let Some(e) = &c.error {
            say!("  FAIL    {e}");
        } else {
            say!("  FAIL    does not reach this daemon");
        }
        if let Some(f) = &c.fix {
            say!("  fix     {f}");
        }
    }
    for m in &r.without_toolhost {
        say!("");
        say!(
            "{:<15} {}: {} MCP servers, no toolhost entry: {}",
            m.frontend.label(),
            m.file.display(),
            m.servers,
            m.fix
        );
    }
    for e in &r.errors {
        say_err!("toolhost: cannot read {e}");
    }
}
