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
}

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
pub fn for_workspace(cfg: &McpServer, workspace: &Path) -> McpServer {
    let var = format!("${{{WORKSPACE_VAR}}}");
    let dir = workspace.display().to_string();
    let expand = |s: &String| s.replace(&var, &dir);
    McpServer {
        args: cfg.args.iter().map(expand).collect(),
        env: cfg
            .env
            .iter()
            .map(|(k, v)| (k.clone(), expand(v)))
            .collect(),
        roots: cfg.roots.iter().map(expand).collect(),
        cwd: Some(workspace.to_path_buf()),
        ..cfg.clone()
    }
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
            if live[at].workspace == workspace {
                return Ok(Some((Lease::new(self, &live[at]), false)));
            }
            // The session moved to another workspace: its instance there replaces this one.
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
                rss_bytes: pid
                    .and_then(crate::process::procfs::rss_kib)
                    .map(|kib| kib * 1024),
                in_flight,
                last_used: (used != 0).then_some(used),
            }
        };
        let own = entry(
            server,
            &self.home,
            None,
            server.in_flight.load(Ordering::Relaxed),
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
                .partition(|i| due(i) <= now);
            *live = kept;
            (gone, live.iter().map(|i| due(i)).min())
        };
        for instance in &expired {
            tracing::info!(server = %instance.server.name(), workspace = %instance.workspace.display(), "stopping an instance unused for {} s", idle.as_secs());
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
        let got = for_workspace(&cfg, Path::new("/w/a b"));
        assert_eq!(got.args, ["--root", "/w/a b/src", "x"]);
        assert_eq!(got.env["W"], "/w/a b");
        assert_eq!(got.roots, ["/w/a b"]);
        assert_eq!(got.cwd.as_deref(), Some(Path::new("/w/a b")));
        assert_eq!(got.command, cfg.command);
    }
}
