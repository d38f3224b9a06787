//! The instances of a scoped MCP server (`"scope": "per_workspace"` or `"per_session"`).
//!
//! A scoped server is the [`Server`] the manager knows — the daemon's own instance, run in
//! the daemon's workspace from the start: it lists the tools, prompts and resources,
//! published once under the usual names, and serves calls without a session or from that
//! workspace — plus a set of instances, each an ordinary `Server` of its own (its own
//! supervisor, process group and reconnects, publishing nothing), run in a session's
//! workspace and keyed by that workspace or by the session. A call routes itself to its
//! instance ([`Instances::route`]), which starts on the first call that needs it. At most
//! `max_instances` live beside the daemon's own: a new one stops the least recently used
//! idle one first, and a call that finds every one busy waits, under its own deadline, for
//! one to become idle. An instance unused for the idle time is stopped by the set's one
//! reaper task; a per-session one also when its session is deleted.
//!
//! Prompts, resources and completions carry no session, so they go to the daemon's own
//! instance.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Runtime, Server};
use crate::config::{McpServer, ServerScope, Start, WORKSPACE_VAR};
use crate::protocol::{ErrorKind, McpInstanceStatus, McpServerState};
use crate::registry::{CallContext, Registry, ToolError};
use crate::{lock, now_ms};

/// How long an instance may go unused when the server sets no `idle_stop_s`.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// A scoped server's instances beside the daemon's own.
pub struct Instances {
    scope: ServerScope,
    /// The daemon's workspace, canonical: calls from there go to the server itself.
    home: PathBuf,
    /// What a new instance is made of.
    registry: Registry,
    tracker: TaskTracker,
    runtime: Runtime,
    live: Mutex<Vec<Arc<Instance>>>,
    /// Set when the server is retired: no instance starts any more.
    closed: AtomicBool,
    /// Woken when an instance becomes idle or leaves: calls waiting for room look again.
    freed: Notify,
    /// Woken when an instance starts: the reaper may have had nothing to wait for.
    started: Notify,
    /// Calls waiting for room for a new instance.
    waiting: AtomicUsize,
    /// When a call last used the daemon's own instance (ms since the epoch; 0: never).
    home_used: AtomicU64,
}

/// What an instance is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Workspace(PathBuf),
    Session(String),
}

struct Instance {
    key: Key,
    /// Where it runs: its `cwd` and `${WORKSPACE}`.
    workspace: PathBuf,
    server: Arc<Server>,
    /// Calls routed to it that have not ended; an instance with none is idle.
    busy: AtomicUsize,
    /// When a call last started or ended on it (ms since the epoch).
    last_used: AtomicU64,
    /// Its session was deleted while a call ran on it: it stops when the last one ends.
    ended: AtomicBool,
    /// The workspace directory it started in (device, inode): when the path is gone or
    /// names another directory (deleted and made again), the instance is stopped.
    dir: Option<DirId>,
}

/// A directory's identity: the same path made again is another directory (its inode
/// number may be reused at once, its birth time is new).
fn dir_id(path: &Path) -> Option<DirId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.created().ok()))
}

type DirId = (u64, u64, Option<std::time::SystemTime>);

impl Instance {
    /// Whether its workspace was deleted (or replaced) since it started.
    fn orphaned(&self) -> bool {
        dir_id(&self.workspace) != self.dir
    }
}

/// How often the reaper looks for instances whose workspace was deleted, while any runs.
const WORKSPACE_CHECK: Duration = Duration::from_secs(30);

/// A call's hold on its instance: the instance is busy (never stopped for room or idleness)
/// until the lease is dropped with the call.
pub struct Lease {
    set: Arc<Instances>,
    instance: Arc<Instance>,
}

impl Lease {
    fn new(set: &Arc<Instances>, instance: &Arc<Instance>) -> Lease {
        instance.busy.fetch_add(1, Ordering::SeqCst);
        instance.last_used.store(now_ms(), Ordering::Relaxed);
        Lease {
            set: set.clone(),
            instance: instance.clone(),
        }
    }

    /// The instance's server, to call on.
    pub fn server(&self) -> &Arc<Server> {
        &self.instance.server
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let instance = &self.instance;
        instance.last_used.store(now_ms(), Ordering::Relaxed);
        if instance.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            if instance.ended.load(Ordering::SeqCst) {
                instance.server.retire();
            }
            self.set.freed.notify_waiters();
        }
    }
}

/// `cfg` as an instance in `workspace` runs it: `${WORKSPACE}` in its args, env and roots
/// is the workspace, and so is its `cwd`.
///
/// The path reaches the program inside the argument that names it, never through a shell —
/// except where the config itself is a shell line (`sh -c "…"`, [`shell_script`]): a
/// session's workspace is a name anyone who can make a directory chooses, and
/// `$(touch pwned)` pasted into a shell line runs. There it goes in double quotes (which
/// also join it to the words around it inside a quoted string), and a path holding what a
/// shell reads even inside them — `$`, a backtick, a quote, a backslash, a newline — is
/// refused.
pub fn for_workspace(cfg: &McpServer, workspace: &Path) -> Result<McpServer, String> {
    let var = format!("${{{WORKSPACE_VAR}}}");
    let dir = workspace.display().to_string();
    let expand = |s: &String| s.replace(&var, &dir);
    let command = cfg.command.as_deref().unwrap_or_default();
    let script = shell_script(command, &cfg.args);
    let mut args = Vec::with_capacity(cfg.args.len());
    for (i, arg) in cfg.args.iter().enumerate() {
        if script != Some(i) || !arg.contains(&var) {
            args.push(expand(arg));
            continue;
        }
        if let Some(c) = dir.chars().find(|c| SHELL_QUOTED_SPECIAL.contains(*c)) {
            return Err(format!(
                "its args[{i}] is a shell line (run by {command}) and the workspace path {dir:?} holds {c:?}, \
                 which a shell reads even in quotes: a path with $, `, \", ', \\ or a newline is \
                 not expanded into a shell line (pass it as an argument of its own: \
                 sh -c '... \"$1\" ...' sh ${{WORKSPACE}})"
            ));
        }
        args.push(arg.replace(&var, &format!("\"{dir}\"")));
    }
    Ok(McpServer {
        args,
        env: cfg
            .env
            .iter()
            .map(|(k, v)| (k.clone(), expand(v)))
            .collect(),
        roots: cfg.roots.iter().map(expand).collect(),
        cwd: Some(workspace.to_path_buf()),
        ..cfg.clone()
    })
}

/// What a shell reads inside double quotes, and a single quote and a newline besides.
const SHELL_QUOTED_SPECIAL: &str = "$`\"'\\\n";

/// The shells whose `-c` takes a script.
const SHELLS: [&str; 9] = [
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish",
];

/// Which of `args` is a shell's script, when the command line runs a shell with `-c`
/// (`sh -c SCRIPT`, `bash -lc SCRIPT`, `env X=1 sh -e -o pipefail -c SCRIPT`): the first
/// operand after the shell's options, one of which holds `c`.
pub(crate) fn shell_script(command: &str, args: &[String]) -> Option<usize> {
    let is_shell = |s: &str| {
        let name = Path::new(s)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(s);
        SHELLS.contains(&name)
    };
    // Index -1 is the command itself.
    let mut tokens = std::iter::once(command).chain(args.iter().map(String::as_str));
    let mut at: Option<usize> = None;
    if !is_shell(tokens.next()?) {
        at = Some(args.iter().position(|a| is_shell(a))?);
    }
    let start = at.map_or(0, |i| i + 1);
    let mut c_given = false;
    let mut skip_next = false;
    for (i, tok) in args.iter().enumerate().skip(start) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if tok == "--" {
            return c_given.then_some(i + 1).filter(|&n| n < args.len());
        }
        let is_option = tok.len() > 1 && (tok.starts_with('-') || tok.starts_with('+'));
        if !is_option {
            return c_given.then_some(i);
        }
        if tok.starts_with('-') && !tok.starts_with("--") && tok.contains('c') {
            c_given = true;
        }
        // `-o NAME`, `+o NAME`, `-O NAME`: the option's value is the next word.
        skip_next = !tok.starts_with("--") && (tok.ends_with('o') || tok.ends_with('O'));
    }
    None
}

impl Instances {
    /// The instances of the server `config`, whose own instance runs in `home`; `None` for
    /// a shared server.
    pub fn of(
        config: &McpServer,
        home: &Path,
        registry: &Registry,
        tracker: &TaskTracker,
        runtime: &Runtime,
    ) -> Option<Arc<Instances>> {
        // Only stdio servers have instances (config validation refuses the rest).
        if !config.scope.is_scoped() || config.url.is_some() || !config.enabled {
            return None;
        }
        Some(Arc::new(Instances {
            scope: config.scope,
            home: home.canonicalize().unwrap_or_else(|_| home.to_path_buf()),
            registry: registry.clone(),
            tracker: tracker.clone(),
            runtime: runtime.clone(),
            live: Mutex::default(),
            closed: AtomicBool::new(false),
            freed: Notify::new(),
            started: Notify::new(),
            waiting: AtomicUsize::new(0),
            home_used: AtomicU64::new(0),
        }))
    }

    /// The daemon's workspace, where the server's own instance runs.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Where a call of the tool `remote` (the server's own name for it) of `server` (the
    /// daemon's own instance) runs: `None` for the server itself, else a lease on the
    /// caller's instance, started if need be. Waits while every instance is busy and there
    /// is no room for another; the caller bounds the wait.
    pub async fn route(
        self: &Arc<Self>,
        server: &Arc<Server>,
        remote: &str,
        ctx: &CallContext,
    ) -> Result<Option<Lease>, ToolError> {
        let Some((key, workspace)) = self.key_of(server, ctx)? else {
            self.home_used.store(now_ms(), Ordering::Relaxed);
            return Ok(None);
        };
        let (lease, started) = loop {
            // Armed before looking, so an instance freed meanwhile is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(claimed) = self.claim(server, &key, &workspace)? {
                break claimed;
            }
            let _waiting = Waiting::enter(&self.waiting);
            freed.await;
        };
        // An instance still starting (this call's, or an earlier one's that gave up
        // waiting): its first attempt to connect. A new one that failed it leaves, so the
        // next call tries afresh and says why again.
        let instance = lease.server().clone();
        instance.first_attempt_done().await;
        if started && instance.state() != McpServerState::Ready {
            let why = instance.status(Vec::new()).last_error.unwrap_or_default();
            self.forget(&lease.instance);
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "MCP server '{}' did not start for workspace {}: {why}",
                    server.name(),
                    workspace.display()
                ),
            ));
        }
        // The tools listed are the daemon's own instance's: one in another workspace may
        // lack one of them (a server whose tools depend on its directory), which its own
        // answer would not make clear.
        if instance.lists_tool(remote) == Some(false) {
            return Err(ToolError::new(
                ErrorKind::UnknownTool,
                format!(
                    "MCP server '{}' has no tool '{remote}' in its instance for workspace {} \
                     (the tools listed are those of its instance for {})",
                    server.name(),
                    lease.instance.workspace.display(),
                    self.home.display()
                ),
            ));
        }
        Ok(Some(lease))
    }

    /// What the caller's instance is for and where it runs; `None`: the daemon's own.
    fn key_of(
        &self,
        server: &Server,
        ctx: &CallContext,
    ) -> Result<Option<(Key, PathBuf)>, ToolError> {
        if self.scope == ServerScope::PerSession && ctx.session_id.is_none() {
            return Ok(None);
        }
        // Canonical, so sessions naming one directory differently share its instance; a
        // workspace deleted since the session named it starts nothing.
        let workspace = ctx.workspace.canonicalize().map_err(|e| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "MCP server '{}' cannot start for workspace {}: {e}",
                    server.name(),
                    ctx.workspace.display()
                ),
            )
        })?;
        if !workspace.is_dir() {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "MCP server '{}' cannot start for workspace {}: not a directory",
                    server.name(),
                    workspace.display()
                ),
            ));
        }
        if let Err(e) = for_workspace(&server.config(), &workspace) {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "MCP server '{}' cannot start for workspace {}: {e}",
                    server.name(),
                    workspace.display()
                ),
            ));
        }
        Ok(match (&ctx.session_id, self.scope) {
            (Some(id), ServerScope::PerSession) => Some((Key::Session(id.clone()), workspace)),
            _ if workspace == self.home => None,
            _ => Some((Key::Workspace(workspace.clone()), workspace)),
        })
    }

    /// A lease on the instance for `key`, started now (`true`) if there is none and there
    /// is room (made by stopping the least recently used idle instance); `None`: no room.
    fn claim(
        self: &Arc<Self>,
        server: &Server,
        key: &Key,
        workspace: &Path,
    ) -> Result<Option<(Lease, bool)>, ToolError> {
        let mut live = lock(&self.live);
        if self.closed.load(Ordering::SeqCst) {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("MCP server '{}' was removed", server.name()),
            ));
        }
        if let Some(at) = live.iter().position(|i| i.key == *key) {
            if live[at].workspace == workspace && !live[at].orphaned() {
                return Ok(Some((Lease::new(self, &live[at]), false)));
            }
            // The session moved to another workspace, or its workspace was deleted and made
            // again: a new instance replaces this one.
            let moved = live.swap_remove(at);
            moved.ended.store(true, Ordering::SeqCst);
            if moved.busy.load(Ordering::SeqCst) == 0 {
                moved.server.retire();
            }
        }
        let cfg = server.config();
        if live.len() >= cfg.max_instances.max(1) {
            let idle = live
                .iter()
                .enumerate()
                .filter(|(_, i)| i.busy.load(Ordering::SeqCst) == 0)
                .min_by_key(|(_, i)| i.last_used.load(Ordering::Relaxed))
                .map(|(at, _)| at);
            let Some(at) = idle else { return Ok(None) };
            let old = live.swap_remove(at);
            tracing::info!(server = %server.name(), workspace = %old.workspace.display(), "stopping the least recently used idle instance to make room");
            old.server.retire();
        }
        tracing::info!(server = %server.name(), workspace = %workspace.display(), "starting an instance");
        let instance = Arc::new(Instance {
            key: key.clone(),
            workspace: workspace.to_path_buf(),
            server: self.spawn(server.name(), &cfg, workspace),
            busy: AtomicUsize::new(0),
            last_used: AtomicU64::new(now_ms()),
            ended: AtomicBool::new(false),
            dir: dir_id(workspace),
        });
        let lease = Lease::new(self, &instance);
        live.push(instance);
        self.started.notify_one();
        Ok(Some((lease, true)))
    }

    /// A new instance of the server `name` in `workspace`: an ordinary server of its own
    /// that publishes nothing and keeps no listing, whose prompts and resources go to a hub
    /// of its own (the daemon's own instance lists them for everyone).
    fn spawn(&self, name: &str, cfg: &McpServer, workspace: &Path) -> Arc<Server> {
        let runtime = Runtime {
            surface: Arc::default(),
            ..self.runtime.clone()
        };
        let dir = Some(workspace.to_path_buf());
        // The set's reaper stops idle instances: the server's own idle stop is not theirs;
        // and an instance starts with the call that needs it, so never lazily again.
        let cfg = McpServer {
            idle_stop_s: None,
            start: Start::Eager,
            ..cfg.clone()
        };
        let server = Server::build(
            name,
            cfg,
            self.registry.clone(),
            false,
            workspace,
            dir,
            runtime,
        );
        Arc::new(server.into_instance()).supervise(&self.tracker)
    }

    /// Takes `instance` out of the set and stops it (once no call is on it).
    fn forget(&self, instance: &Arc<Instance>) {
        let mut live = lock(&self.live);
        let Some(at) = live.iter().position(|i| Arc::ptr_eq(i, instance)) else {
            return;
        };
        live.swap_remove(at);
        drop(live);
        instance.ended.store(true, Ordering::SeqCst);
        if instance.busy.load(Ordering::SeqCst) == 0 {
            instance.server.retire();
        }
        self.freed.notify_waiters();
    }

    /// The session `id` was deleted: its instance stops (after the calls still on it).
    pub fn session_ended(&self, id: &str) {
        if self.scope != ServerScope::PerSession {
            return;
        }
        let key = Key::Session(id.to_owned());
        let found = lock(&self.live).iter().find(|i| i.key == key).cloned();
        if let Some(instance) = found {
            self.forget(&instance);
        }
    }

    /// Asks every instance for a new connection (`mcp.reconnect`).
    pub fn reconnect(&self) {
        for instance in lock(&self.live).iter() {
            instance.server.reconnect();
        }
    }

    /// Stops every instance for good (the server itself is being retired).
    pub fn retire(&self) {
        let gone = {
            let mut live = lock(&self.live);
            self.closed.store(true, Ordering::SeqCst);
            std::mem::take(&mut *live)
        };
        for instance in gone {
            instance.server.retire();
        }
        self.freed.notify_waiters();
    }

    /// Calls waiting for room for a new instance.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Every instance for `mcp.status`, the daemon's own (`server`) first.
    pub fn status(&self, server: &Server) -> Vec<McpInstanceStatus> {
        let entry = |s: &Server, workspace: &Path, session_id: Option<String>, in_flight, used| {
            let pid = s.pid();
            McpInstanceStatus {
                workspace: workspace.display().to_string(),
                session_id,
                default: std::ptr::eq(s, server),
                state: s.state(),
                pid,
                rss_bytes: pid.and_then(crate::procfs::rss_kib).map(|kib| kib * 1024),
                in_flight,
                last_used: (used != 0).then_some(used),
            }
        };
        let own = entry(
            server,
            &self.home,
            None,
            server.in_flight(),
            self.home_used.load(Ordering::Relaxed),
        );
        let live = lock(&self.live);
        let others = live.iter().map(|i| {
            let session_id = match &i.key {
                Key::Session(id) => Some(id.clone()),
                Key::Workspace(_) => None,
            };
            entry(
                &i.server,
                &i.workspace,
                session_id,
                i.busy.load(Ordering::SeqCst),
                i.last_used.load(Ordering::Relaxed),
            )
        });
        std::iter::once(own).chain(others).collect()
    }
}

/// The set's one timer: stops instances unused for the server's idle time (`idle_stop_s`,
/// else [`DEFAULT_IDLE`]). It sleeps until the earliest time an instance could be due: an
/// idle one's last use plus the idle time, a busy one's no earlier than now plus the idle
/// time. A use only moves a deadline later, so calls never wake it; it wakes early at
/// worst, and looks again. Ends with `stop` (the server retired) or with the server.
pub async fn reap(set: Arc<Instances>, server: Weak<Server>, stop: CancellationToken) {
    loop {
        let Some(idle) = server.upgrade().map(|s| idle_time(&s.config())) else {
            return;
        };
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let now = now_ms();
        let due = |i: &Instance| match i.busy.load(Ordering::SeqCst) {
            0 => i.last_used.load(Ordering::Relaxed).saturating_add(idle_ms),
            _ => now.saturating_add(idle_ms),
        };
        let (expired, next) = {
            let mut live = lock(&set.live);
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *live)
                .into_iter()
                .partition(|i| due(i) <= now || i.orphaned() && i.busy.load(Ordering::SeqCst) == 0);
            *live = kept;
            // While instances run, look again for deleted workspaces now and then.
            let check =
                now.saturating_add(u64::try_from(WORKSPACE_CHECK.as_millis()).unwrap_or(u64::MAX));
            (gone, live.iter().map(|i| due(i).min(check)).min())
        };
        for instance in &expired {
            if instance.orphaned() {
                tracing::info!(server = %instance.server.name(), workspace = %instance.workspace.display(), "stopping an instance whose workspace was deleted");
            } else {
                tracing::info!(server = %instance.server.name(), workspace = %instance.workspace.display(), "stopping an instance unused for {} s", idle.as_secs());
            }
            instance.server.retire();
        }
        if !expired.is_empty() {
            set.freed.notify_waiters();
        }
        let sleep = async {
            match next {
                Some(due) => {
                    tokio::time::sleep(Duration::from_millis(due.saturating_sub(now))).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = set.started.notified() => {}
            _ = sleep => {}
        }
    }
}

fn idle_time(cfg: &McpServer) -> Duration {
    cfg.idle_stop_s.map_or(DEFAULT_IDLE, Duration::from_secs)
}

/// Counts a call among the waiting while it waits, also when the wait is given up.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_runs_its_config_in_its_workspace() {
        let cfg = McpServer {
            command: Some("srv".into()),
            args: vec!["--root".into(), "${WORKSPACE}/src".into(), "x".into()],
            env: [("W".to_owned(), "${WORKSPACE}".to_owned())].into(),
            roots: vec!["${WORKSPACE}".into()],
            scope: ServerScope::PerWorkspace,
            ..McpServer::default()
        };
        let got = for_workspace(&cfg, Path::new("/w/a b")).unwrap();
        assert_eq!(got.args, ["--root", "/w/a b/src", "x"]);
        assert_eq!(got.env["W"], "/w/a b");
        assert_eq!(got.roots, ["/w/a b"]);
        assert_eq!(got.cwd.as_deref(), Some(Path::new("/w/a b")));
        assert_eq!(got.command, cfg.command);
    }

    #[test]
    fn a_workspace_goes_into_a_shell_line_quoted_or_not_at_all() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shell_script("sh", &args(&["-c", "x"])), Some(1));
        assert_eq!(
            shell_script(
                "/bin/bash",
                &args(&["-e", "-o", "pipefail", "-lc", "x", "a"])
            ),
            Some(4)
        );
        assert_eq!(
            shell_script("env", &args(&["A=1", "dash", "-c", "--", "x"])),
            Some(4)
        );
        assert_eq!(shell_script("sh", &args(&["script.sh", "-c"])), None);
        assert_eq!(shell_script("srv", &args(&["-c", "x"])), None);
        let cfg = McpServer {
            command: Some("sh".into()),
            args: args(&[
                "-c",
                "exec srv --root ${WORKSPACE}/src \"at ${WORKSPACE}\"",
                "sh",
                "${WORKSPACE}",
            ]),
            scope: ServerScope::PerWorkspace,
            ..McpServer::default()
        };
        let got = for_workspace(&cfg, Path::new("/w/a b;c")).unwrap();
        assert_eq!(
            got.args,
            [
                "-c",
                "exec srv --root \"/w/a b;c\"/src \"at \"/w/a b;c\"\"",
                "sh",
                "/w/a b;c"
            ]
        );
        for bad in [
            "/w/$(touch x)",
            "/w/`x`",
            "/w/a\"b",
            "/w/a'b",
            "/w/a\\b",
            "/w/a\nb",
        ] {
            let e = for_workspace(&cfg, Path::new(bad)).unwrap_err();
            assert!(e.contains("args[1] is a shell line"), "{e}");
        }
    }
}
