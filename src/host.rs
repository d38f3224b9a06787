//! The daemon: builds the parts, serves until a signal, and shuts down in order.
//!
//! [`Host`] is the cheap-clone handle every RPC handler gets; it owns the live config, the
//! registry, the session store and the calls in flight.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{self, Config};
use crate::invoke::CallTable;
use crate::lock;
use crate::mcp::McpManager;
use crate::protocol::{ConfigReloadResult, ConfigStatusResult, HealthResult};
use crate::registry::{Change, Registry, SourceKey};
use crate::session::Sessions;

/// How long in-flight calls get to finish after SIGTERM before they are cancelled.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What `toolhost serve` was asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
}

impl ServeOptions {
    /// config.json: `--config`, else the default resolution of config.md.
    pub fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(config::default_path)
    }
}

#[derive(Clone)]
pub struct Host(Arc<Inner>);

struct Inner {
    config_path: PathBuf,
    config: ArcSwap<Config>,
    config_state: Mutex<ConfigState>,
    /// Hash of the config file as last read (good or bad): the watcher skips events that
    /// leave the content unchanged, yet a good file after a bad one is always applied.
    last_read: Mutex<config::ContentHash>,
    /// Root of built-in tool paths for calls without a session.
    workspace: PathBuf,
    /// Sessions and spilled outputs; fixed for the daemon's life.
    data_dir: PathBuf,
    registry: Registry,
    mcp: McpManager,
    /// One reload at a time (an async lock: held across the wait for servers to connect).
    reload_lock: tokio::sync::Mutex<()>,
    sessions: Sessions,
    calls: Arc<CallTable>,
    started: Instant,
    /// Cancelled at shutdown; every call's token is a child of it.
    shutdown: CancellationToken,
    /// Every task the host spawns, so shutdown can wait for them.
    tracker: TaskTracker,
}

/// What `config.status` reports.
#[derive(Debug, Clone, Default)]
struct ConfigState {
    loaded_at: u64,
    revision: u64,
    last_error: Option<String>,
    warnings: Vec<String>,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Host {
    /// Loads config.json (all defaults when it does not exist).
    pub fn load_config(opts: &ServeOptions) -> anyhow::Result<config::Loaded> {
        let path = opts.config_path();
        config::load(&path).with_context(|| format!("invalid config {}", path.display()))
    }

    /// Opens the store and builds the registry from a loaded config; nothing is served yet.
    pub fn new(opts: &ServeOptions, loaded: config::Loaded) -> anyhow::Result<Host> {
        let config_path = opts.config_path();
        for w in &loaded.warnings {
            tracing::warn!("config: {w}");
        }
        let cfg = loaded.config.clone();
        let workspace = match opts.workspace.clone().or_else(|| cfg.workspace.clone()) {
            Some(w) => w,
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let workspace = workspace
            .canonicalize()
            .with_context(|| format!("workspace {} is not accessible", workspace.display()))?;
        let data_dir = opts
            .data_dir
            .clone()
            .or_else(|| cfg.data_dir.clone())
            .or_else(|| std::env::var_os("STATE_DIRECTORY").map(PathBuf::from))
            .unwrap_or_else(|| config::xdg_dir("XDG_STATE_HOME", ".local/state").join("toolhost"));
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
        let sessions = Sessions::open(&data_dir.join("sessions"))?;
        let registry = Registry::new();
        let tracker = TaskTracker::new();
        let host = Host(Arc::new(Inner {
            config_path,
            config: ArcSwap::from_pointee(cfg.clone()),
            config_state: Mutex::new(ConfigState {
                loaded_at: now_ms(),
                revision: 1,
                last_error: None,
                warnings: loaded.warnings.clone(),
            }),
            last_read: Mutex::new(loaded.content_hash),
            workspace,
            data_dir,
            mcp: McpManager::new(registry.clone(), tracker.clone()),
            reload_lock: tokio::sync::Mutex::new(()),
            registry,
            sessions,
            calls: Arc::default(),
            started: Instant::now(),
            shutdown: CancellationToken::new(),
            tracker,
        }));
        host.registry().apply(Change {
            sources: vec![(
                SourceKey::Builtin,
                Some(crate::tools::builtins(&host.outputs_dir())),
            )],
            approval_overrides: Some(cfg.approval.tools.clone()),
        });
        Ok(host)
    }

    pub fn config(&self) -> Arc<Config> {
        self.0.config.load_full()
    }
    pub fn config_path(&self) -> &Path {
        &self.0.config_path
    }
    pub fn workspace(&self) -> &Path {
        &self.0.workspace
    }
    pub fn data_dir(&self) -> &Path {
        &self.0.data_dir
    }
    /// Where oversized outputs are saved (readable by `read_file`).
    pub fn outputs_dir(&self) -> PathBuf {
        self.0.data_dir.join("outputs")
    }
    pub fn registry(&self) -> &Registry {
        &self.0.registry
    }
    pub fn mcp(&self) -> &McpManager {
        &self.0.mcp
    }
    pub fn sessions(&self) -> &Sessions {
        &self.0.sessions
    }
    pub fn calls(&self) -> &Arc<CallTable> {
        &self.0.calls
    }
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.0.shutdown
    }
    pub fn tracker(&self) -> &TaskTracker {
        &self.0.tracker
    }

    pub fn health(&self) -> HealthResult {
        let snapshot = self.registry().snapshot();
        let config_error = self.config_state().last_error;
        let collisions: Vec<String> = snapshot
            .collisions()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let degraded = config_error.is_some() || !collisions.is_empty();
        HealthResult {
            status: if degraded { "degraded" } else { "ok" },
            version: env!("CARGO_PKG_VERSION"),
            uptime_s: self.0.started.elapsed().as_secs(),
            tools: snapshot.len(),
            sessions: self.sessions().count(),
            mcp: self.mcp().counts(),
            config_error,
            collisions,
        }
    }

    fn config_state(&self) -> ConfigState {
        lock(&self.0.config_state).clone()
    }

    pub fn config_status(&self) -> ConfigStatusResult {
        let s = self.config_state();
        ConfigStatusResult {
            path: self.0.config_path.display().to_string(),
            loaded_at: s.loaded_at,
            revision: s.revision,
            last_error: s.last_error,
            warnings: s.warnings,
        }
    }
}

impl Host {
    /// Starts every configured MCP server; their tools arrive as each connects.
    fn start_servers(&self) {
        for (name, cfg) in &self.config().mcp_servers {
            self.mcp().start(name, cfg.clone(), true);
        }
    }

    /// Reloads when the watched file's content differs from the last file read.
    async fn reload_if_changed(&self) {
        let path = self.config_path().to_path_buf();
        let hash = tokio::task::spawn_blocking(move || config::ContentHash::of_file(&path)).await;
        match hash {
            Ok(Ok(h)) if h == *lock(&self.0.last_read) => {}
            _ => {
                self.reload().await;
            }
        }
    }

    /// Adds (`Some`) or removes (`None`) an MCP server by editing config.json atomically,
    /// then applies the file through the normal reload path (the watcher's own event for
    /// the same content is then skipped), so file and daemon never disagree.
    pub async fn edit_mcp_server(
        &self,
        name: String,
        server: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> crate::error::Result<bool> {
        use crate::error::Error;
        let path = self.config_path().to_path_buf();
        let edit = tokio::task::spawn_blocking(move || match server {
            Some(block) => config::add_mcp_server(&path, &name, &block).map(|()| true),
            None => config::remove_mcp_server(&path, &name),
        })
        .await
        .map_err(Error::server)?;
        let changed = edit.map_err(|e| match e.kind {
            config::ConfigErrorKind::Io => Error::Server(e.to_string()),
            _ => Error::InvalidParams(e.to_string()),
        })?;
        if changed {
            let host = self.clone();
            self.tracker().spawn(async move { host.reload().await });
        }
        Ok(changed)
    }

    fn set_config_error(&self, error: String) {
        tracing::error!("config not applied: {error}");
        let mut s = lock(&self.0.config_state);
        s.last_error = Some(error);
    }

    /// Reads config.json and applies it as a diff: the single reload path behind the file
    /// watcher, SIGHUP and `config.reload`. A bad file leaves the live config in place.
    pub async fn reload(&self) -> ConfigReloadResult {
        let _one_at_a_time = self.0.reload_lock.lock().await;
        let loaded = match config::load(self.config_path()) {
            Ok(l) => l,
            Err(e) => {
                if let Some(hash) = e.content_hash {
                    *lock(&self.0.last_read) = hash;
                }
                let error = e.to_string();
                self.set_config_error(error.clone());
                return ConfigReloadResult {
                    applied: false,
                    error: Some(error),
                    status: self.config_status(),
                };
            }
        };
        *lock(&self.0.last_read) = loaded.content_hash;
        let old = self.config();
        let new = loaded.config;
        let mut warnings = loaded.warnings;
        let diff = config::diff(&old, &new);
        warnings.extend(diff.needs_restart);

        let mut sources = Vec::new();
        // Filters and approval classes apply to the live connection; unchanged servers are
        // not touched at all.
        for name in &diff.servers_updated {
            if let (Some(server), Some(cfg)) = (self.mcp().get(name), new.mcp_servers.get(name)) {
                server.update_config(cfg.clone());
                sources.push((SourceKey::Mcp(name.clone()), Some(server.tools())));
            }
        }
        let started: Vec<_> = diff
            .servers_added
            .iter()
            .chain(&diff.servers_restart)
            .filter_map(|name| {
                Some(
                    self.mcp()
                        .start(name, new.mcp_servers.get(name)?.clone(), false),
                )
            })
            .collect();
        for name in &diff.servers_removed {
            self.mcp().remove(name);
            sources.push((SourceKey::Mcp(name.clone()), None));
        }
        sources.extend(McpManager::collect_tools(&started).await);
        self.0.config.store(Arc::new(new.clone()));
        let note = self.registry().apply(Change {
            sources,
            approval_overrides: Some(new.approval.tools.clone()),
        });
        for s in &started {
            s.start_publishing();
        }
        {
            let mut s = lock(&self.0.config_state);
            s.loaded_at = now_ms();
            s.revision += 1;
            s.last_error = None;
            s.warnings = warnings;
        }
        tracing::info!(changed = note.is_some(), "config applied");
        ConfigReloadResult {
            applied: true,
            error: None,
            status: self.config_status(),
        }
    }
}

/// Runs the daemon until SIGTERM/SIGINT: the entry point of `toolhost serve`.
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    // Signal handlers first: a SIGTERM that arrives once the socket answers must be ours.
    let stop_signal = stop_signal()?;
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let loaded = Host::load_config(&opts)?;
    // The socket first: a second daemon must fail on the live socket, not on the store lock.
    let listeners = crate::rpc::Listeners::bind(&opts, &loaded.config).await?;
    let host = match Host::new(&opts, loaded) {
        Ok(h) => h,
        Err(e) => {
            if let Some(p) = &listeners.owned_path {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    // Owns every child (subreaper, adopted-zombie reaper, ledger sweep); dropped when serve returns, it kills what is left.
    let _processes = crate::process::init_daemon(host.data_dir());
    tracing::info!(socket = %listeners.describe(), workspace = %host.workspace().display(), data_dir = %host.data_dir().display(), "toolhost serving");
    let server = crate::rpc::start(host.clone(), listeners)?;
    host.start_servers();
    host.tracker().spawn(reload_on_sighup(host.clone(), hangup));
    let _watcher = watch_config(&host);
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);

    stop_signal.await;
    tracing::info!("shutting down");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    server.stop_accepting();
    // In-flight calls get a grace to finish; then their tokens are cancelled.
    if tokio::time::timeout(SHUTDOWN_GRACE, wait_idle(&host))
        .await
        .is_err()
    {
        tracing::warn!(
            calls = host.calls().in_flight(),
            "cancelling calls still running"
        );
    }
    host.shutdown_token().cancel();
    host.mcp().stop_all();
    server.stopped(SHUTDOWN_GRACE).await;
    host.tracker().close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, host.tracker().wait()).await;
    Ok(())
}

/// Watches config.json; the returned guard keeps the watch alive. Without a watch (the
/// directory is missing) the daemon still serves and SIGHUP / `config.reload` still work.
fn watch_config(host: &Host) -> Option<config::ConfigWatcher> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = match config::watch(host.config_path(), tx) {
        Ok(w) => w,
        Err(e) => {
            // With no config directory at all the daemon runs on defaults: say so quietly.
            let defaults = host.config_path().parent().is_some_and(|d| !d.exists());
            if defaults {
                tracing::info!(path = %host.config_path().display(), "no config directory; running on defaults, not watching: {e:#}");
            } else {
                tracing::warn!(path = %host.config_path().display(), "not watching config.json: {e:#}");
            }
            return None;
        }
    };
    let host = host.clone();
    let h = host.clone();
    host.tracker().spawn(async move {
        loop {
            tokio::select! {
                Some(()) = rx.recv() => {
                    while rx.try_recv().is_ok() {}
                    h.reload_if_changed().await;
                }
                _ = h.shutdown_token().cancelled() => return,
            }
        }
    });
    Some(watcher)
}

async fn reload_on_sighup(host: Host, mut hup: tokio::signal::unix::Signal) {
    loop {
        tokio::select! {
            _ = hup.recv() => { host.reload().await; }
            _ = host.shutdown_token().cancelled() => return,
        }
    }
}

async fn wait_idle(host: &Host) {
    while host.calls().in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Installs the SIGTERM/SIGINT handlers now; the future resolves on the first signal.
fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
