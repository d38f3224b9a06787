//! The shared state handle: one cheap clone of [`Host`] per task, owning the live config,
//! the registry, the session store, the MCP servers, the calls in flight and the daemon's
//! processes. Nothing of one daemon is process-wide, so several can run in one process.
//!
//! The host only holds state. Starting and stopping it is [`crate::daemon`]'s job, changing
//! its config is [`crate::reload`]'s, and answering clients is [`crate::rpc`]'s.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::calls::CallTable;
use crate::config::{self, Config};
use crate::lock;
use crate::mcp::McpManager;
use crate::now_ms;
use crate::process::Processes;
use crate::registry::{Change, Registry, SourceKey};
use crate::session::Sessions;
use crate::source::{Apply, Configure, Contribution, Source, Start};

/// Where the host keeps its files and roots its tools; fixed for the daemon's life.
#[derive(Debug, Clone)]
pub struct Dirs {
    /// config.json (it may not exist).
    pub config_path: PathBuf,
    /// Root of built-in tool paths for calls without a session (canonical).
    pub workspace: PathBuf,
    /// Sessions, spilled outputs and the process ledger.
    pub data_dir: PathBuf,
}

/// `config` with the daemon's own files in `sandbox.hidden`: config.json, the secrets file
/// beside it, the data dir (sessions, pins, checkpoints, audit log) and `listen.token_file`,
/// which a confined program must not read — the token would let it in over TCP,
/// config.json names every secret's variable and `secrets.env` holds their values.
fn hide_own_files(dirs: &Dirs, mut config: Config) -> Config {
    let mut hidden = vec![
        dirs.config_path.clone(),
        crate::secrets::file_for(&dirs.config_path),
        dirs.data_dir.clone(),
    ];
    hidden.extend(config.listen.token_file.clone());
    hidden.extend(config.listen.tokens.values().cloned());
    config.sandbox.hidden = hidden;
    config
}

#[derive(Clone)]
pub struct Host(Arc<Inner>);

struct Inner {
    dirs: Dirs,
    /// The config in force; swapped whole by a reload, read lock-free by every call.
    config: ArcSwap<Config>,
    /// The config the daemon started with: restart-only settings (listeners, dirs) keep its
    /// values until a restart, whatever reloads apply since.
    started_with: Arc<Config>,
    /// What `config.status` reports, and what the reload path needs to remember.
    config_state: Mutex<ConfigState>,
    /// One reload at a time (an async lock: held across the wait for servers to connect,
    /// so two reloads never interleave their diffs).
    reload_lock: tokio::sync::Mutex<()>,
    registry: Registry,
    /// The one way the sources' contributions reach the registry.
    apply: Apply,
    builtins: Builtins,
    mcp: McpManager,
    custom: crate::custom::CustomTools,
    skills: crate::skills::Skills,
    commands: crate::commands::Commands,
    /// The workspace-trust gate every file-defined source of a workspace passes.
    trust: crate::trust::Trust,
    sessions: Sessions,
    /// Which workspace each live session is in (`reload::place_sessions` keeps it).
    session_workspaces: Mutex<crate::session::SessionWorkspaces>,
    calls: Arc<CallTable>,
    /// Calls waiting for an operator's approval.
    approvals: Arc<crate::approvals::Approvals>,
    /// What the host knows of the frontends its sessions belong to.
    frontends: crate::frontends::Frontends,
    /// Event counters for `GET /metrics`.
    metrics: Arc<crate::metrics::Metrics>,
    /// One line per finished call in the data dir.
    audit: crate::audit::AuditLog,
    /// Each workspace's timeline of changes (`<data_dir>/checkpoints`).
    checkpoints: crate::checkpoint::Checkpoints,
    /// Rate limits, budgets and loop breakers, and their counters.
    guards: Arc<crate::guards::Guards>,
    /// Fleet mode's membership (set once at start; none with a sled store).
    fleet: std::sync::OnceLock<crate::fleet::Fleet>,
    started: Instant,
    /// Cancelled at shutdown; every call's token is a child of it.
    shutdown: CancellationToken,
    /// Every task the host spawns, so shutdown can wait for them.
    tracker: TaskTracker,
    /// The daemon's children: its cookie, their environment, its ledger and watchdog.
    processes: Processes,
}

/// What the checkpoint tools reach of the host (they cannot import it).
impl crate::checkpoint::Reach for Inner {
    fn checkpoints(&self) -> &crate::checkpoint::Checkpoints {
        &self.checkpoints
    }
    fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }
}

/// The config's lifecycle as the reload path records it.
#[derive(Debug, Clone)]
pub struct ConfigState {
    /// Milliseconds since the epoch of the last successful apply.
    pub loaded_at: u64,
    /// Applies since start (1 = the config read at start).
    pub revision: u64,
    pub last_error: Option<String>,
    pub warnings: Vec<String>,
    /// Hash of the config file as last read, good or bad: the watcher skips events that
    /// leave it unchanged. `None` forces the next read to apply (after an error, so that
    /// the next good file clears it even when identical to the live config).
    pub last_read: Option<config::ContentHash>,
    /// Whether the live config came from a file (false: the defaults of a missing file).
    pub from_file: bool,
    /// What the config watcher watches; `None` before it is armed or when it cannot be.
    pub watching: config::Watching,
}

impl Host {
    /// Opens the store and builds the registry from a loaded config; nothing is served yet.
    /// Every program the host starts is one of `processes`.
    /// In fleet mode (`fleet`) the session store is the fleet's database, not sled.
    pub fn new(
        dirs: Dirs,
        loaded: config::Loaded,
        processes: Processes,
        fleet: Option<crate::fleet::Fleet>,
    ) -> anyhow::Result<Host> {
        for w in &loaded.warnings {
            tracing::warn!("config: {w}");
        }
        std::fs::create_dir_all(&dirs.data_dir)
            .with_context(|| format!("cannot create data dir {}", dirs.data_dir.display()))?;
        let (sessions, pins) = match &fleet {
            Some(f) => {
                let (sessions, pins) = f.stores()?;
                (
                    Sessions::with_store(sessions)?,
                    crate::catalog::Pins::shared(pins),
                )
            }
            None => (
                Sessions::open(&dirs.data_dir.join("sessions"))?,
                crate::catalog::Pins::open(&dirs.data_dir.join("pins.json")),
            ),
        };
        let registry = Registry::new();
        registry.set_pins(pins);
        let trust = crate::trust::Trust::open(&dirs.data_dir.join("trust.json"));
        registry.set_catalog_policy(crate::catalog::Policy::from_config(&loaded.config));
        let tracker = TaskTracker::new();
        let from_file = dirs.config_path.exists();
        let cfg = Arc::new(hide_own_files(&dirs, loaded.config));
        let approval_overrides = cfg.approval.tools.clone();
        let guards =
            crate::guards::Guards::new(&cfg.guards, sessions.counters().map_err(|e| e.to_string()));
        let audit = crate::audit::AuditLog::start(&dirs.data_dir);
        let shutdown = CancellationToken::new();
        let modules = crate::custom::modules::Modules::new(
            processes.clone(),
            tracker.clone(),
            shutdown.clone(),
            dirs.data_dir.join("modules"),
            sessions.history().clone(),
        );
        let apply = Apply::new(registry.clone());
        let builtins = Builtins {
            outputs_dir: dirs.data_dir.join("outputs"),
            processes: processes.clone(),
            code_mode: cfg.code_mode.clone(),
            reach: std::sync::OnceLock::new(),
        };
        let host = Host(Arc::new(Inner {
            config: ArcSwap::new(cfg.clone()),
            started_with: cfg,
            config_state: Mutex::new(ConfigState {
                loaded_at: now_ms(),
                revision: 1,
                last_error: None,
                warnings: loaded.warnings,
                last_read: Some(loaded.content_hash),
                from_file,
                watching: config::Watching::default(),
            }),
            mcp: McpManager::new(
                registry.clone(),
                tracker.clone(),
                &dirs.workspace,
                &dirs.data_dir,
                processes.clone(),
            ),
            checkpoints: crate::checkpoint::Checkpoints::new(&dirs.data_dir),
            dirs,
            custom: crate::custom::CustomTools::new(
                registry.clone(),
                processes.clone(),
                modules,
                trust.clone(),
                apply.clone(),
            ),
            skills: crate::skills::Skills::new(trust.clone()),
            commands: crate::commands::Commands::new(trust.clone()),
            trust,
            reload_lock: tokio::sync::Mutex::new(()),
            registry,
            apply,
            builtins,
            sessions,
            session_workspaces: Mutex::default(),
            calls: Arc::default(),
            approvals: Arc::default(),
            frontends: Default::default(),
            metrics: Arc::default(),
            audit,
            guards: Arc::new(guards),
            fleet: std::sync::OnceLock::new(),
            started: Instant::now(),
            shutdown,
            tracker,
            processes,
        }));
        if let Some(fleet) = fleet {
            host.join_fleet(fleet);
        }
        let reach: std::sync::Weak<dyn crate::checkpoint::Reach> = Arc::downgrade(&host.0) as _;
        let _ = host.0.builtins.reach.set(reach);
        let builtins = host.0.builtins.tools(&host.config());
        host.registry().apply(Change {
            sources: vec![(SourceKey::Builtin, Some(builtins))],
            approval_overrides: Some(approval_overrides),
        });
        Ok(host)
    }

    pub fn config(&self) -> Arc<Config> {
        self.0.config.load_full()
    }
    /// The config the daemon started with (what its restart-only settings still run on).
    pub fn started_with(&self) -> &Config {
        &self.0.started_with
    }
    pub(crate) fn set_config(&self, config: Config) {
        self.0.config.store(Arc::new(self.hide_own_files(config)));
    }
    /// `config` as the daemon runs it: its own files in `sandbox.hidden` (see
    /// [`hide_own_files`]). A reload hands this to the sources, so the sandbox they compare
    /// is the one in force (else every first reload restarted the module hosts).
    pub(crate) fn hide_own_files(&self, config: Config) -> Config {
        hide_own_files(&self.0.dirs, config)
    }
    pub fn config_path(&self) -> &Path {
        &self.0.dirs.config_path
    }
    pub fn workspace(&self) -> &Path {
        &self.0.dirs.workspace
    }
    pub fn data_dir(&self) -> &Path {
        &self.0.dirs.data_dir
    }
    /// Where oversized outputs are saved (readable by `read_file`).
    pub fn outputs_dir(&self) -> PathBuf {
        self.0.dirs.data_dir.join("outputs")
    }
    pub fn registry(&self) -> &Registry {
        &self.0.registry
    }
    /// Where every source's contribution is applied (one lock, one swap each).
    pub fn apply(&self) -> &Apply {
        &self.0.apply
    }
    /// Every source of tools, prompts and resources, in the order a reload configures them
    /// (MCP servers first: a reload waits a moment for new ones to connect).
    pub fn sources(&self) -> [&dyn Source; 5] {
        [
            &self.0.builtins,
            &self.0.mcp,
            &self.0.custom,
            &self.0.skills,
            &self.0.commands,
        ]
    }
    pub fn mcp(&self) -> &McpManager {
        &self.0.mcp
    }
    pub fn custom(&self) -> &crate::custom::CustomTools {
        &self.0.custom
    }
    pub fn skills(&self) -> &crate::skills::Skills {
        &self.0.skills
    }
    /// The workspace-trust gate (what waits, and the user's decisions).
    pub fn trust(&self) -> &crate::trust::Trust {
        &self.0.trust
    }
    pub fn commands(&self) -> &crate::commands::Commands {
        &self.0.commands
    }
    /// Which workspace each live session is in; changed only by `reload::place_sessions`.
    pub fn session_workspaces(&self) -> &Mutex<crate::session::SessionWorkspaces> {
        &self.0.session_workspaces
    }
    pub fn sessions(&self) -> &Sessions {
        &self.0.sessions
    }
    pub fn calls(&self) -> &Arc<CallTable> {
        &self.0.calls
    }
    pub fn approvals(&self) -> &Arc<crate::approvals::Approvals> {
        &self.0.approvals
    }
    pub fn frontends(&self) -> &crate::frontends::Frontends {
        &self.0.frontends
    }
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.0.metrics
    }
    pub fn checkpoints(&self) -> &crate::checkpoint::Checkpoints {
        &self.0.checkpoints
    }
    pub fn audit(&self) -> &crate::audit::AuditLog {
        &self.0.audit
    }
    pub fn guards(&self) -> &Arc<crate::guards::Guards> {
        &self.0.guards
    }
    /// This daemon's membership of a fleet, in fleet mode.
    pub fn fleet(&self) -> Option<&crate::fleet::Fleet> {
        self.0.fleet.get()
    }
    /// Makes the host a member of `fleet` (once, before anything is served): its approval
    /// queue and audit log get their shared side.
    fn join_fleet(&self, fleet: crate::fleet::Fleet) {
        fleet.attach(self.approvals(), self.audit());
        let _ = self.0.fleet.set(fleet);
    }
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.0.shutdown
    }
    pub fn tracker(&self) -> &TaskTracker {
        &self.0.tracker
    }
    pub fn processes(&self) -> &Processes {
        &self.0.processes
    }
    pub fn uptime(&self) -> Duration {
        self.0.started.elapsed()
    }

    /// A copy of the config's lifecycle state.
    pub fn config_state(&self) -> ConfigState {
        lock(&self.0.config_state).clone()
    }
    /// Changes the config's lifecycle state in one step.
    pub(crate) fn update_config_state(&self, f: impl FnOnce(&mut ConfigState)) {
        f(&mut lock(&self.0.config_state));
        crate::notice::changed();
    }
    /// Held for the whole of one reload.
    pub(crate) async fn reload_guard(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.0.reload_lock.lock().await
    }

    /// What the session operations need of the host.
    pub fn session_scope(&self) -> crate::session::Scope<'_> {
        crate::session::Scope {
            sessions: &self.0.sessions,
            registry: &self.0.registry,
            workspace: &self.0.dirs.workspace,
            default_approval: self.0.config.load().approval.mode,
            config: self.0.config.load_full(),
        }
    }
}

/// The built-in tools as a source: with the code tools while code mode is on for some view,
/// the checkpoint tools while checkpoints are
/// (`Config::code_mode_anywhere`; `session::serves` then decides per session). Their name
/// and description size are the start-up values (a restart applies a change).
struct Builtins {
    outputs_dir: PathBuf,
    processes: Processes,
    /// `code_mode` as the daemon started with it.
    code_mode: config::CodeMode,
    /// What the checkpoint tools reach of the daemon, set once the host exists.
    reach: std::sync::OnceLock<std::sync::Weak<dyn crate::checkpoint::Reach>>,
}

impl Builtins {
    fn tools(&self, config: &Config) -> Vec<Arc<dyn crate::registry::Tool>> {
        let mut builtins = crate::tools::builtins(&self.outputs_dir);
        if config.code_mode_anywhere() {
            let code = &self.code_mode;
            builtins.push(Arc::new(crate::code::CodeTool::new(
                &code.tool_name,
                self.processes.clone(),
                &builtins,
                code.max_description_bytes,
            )));
            builtins.push(Arc::new(crate::code::CodeTool::new_api()));
        }
        if let Some(reach) = self.reach.get() {
            builtins.extend(crate::checkpoint::tools(config, reach.clone()));
        }
        builtins
    }
}

#[async_trait::async_trait]
impl Source for Builtins {
    /// Registered by [`Host::new`], before anything else.
    async fn start(&self, _cx: &Start<'_>, _apply: &Apply) -> Contribution {
        Contribution::default()
    }

    /// The code tools come and go with code mode being on for some view, the checkpoint
    /// tools with checkpoints.
    async fn configure(&self, cx: &Configure<'_>) -> Contribution {
        if !cx.diff.builtins_changed {
            return Contribution::default();
        }
        Contribution::tools(vec![(SourceKey::Builtin, Some(self.tools(cx.config)))])
    }
}
