//! JS/TS tool modules (MusePi's custom tool modules) run as they are, beside the custom
//! tool programs: a module exports a factory that takes the host API (`pi`) and returns a
//! tool or a list of tools (proto-docs/modules.md).
//!
//! - [`discover`]: where modules are found and which files are modules;
//! - [`host`]: a long-lived Node process that loads them and runs their calls
//!   (`host.mjs`, embedded), supervised, restarted, stopped when idle; one per [`Domain`]
//!   (the user's modules, each workspace's), each in its domain's sandbox;
//! - [`tool`]: a module's tool as a registry [`Tool`](crate::registry::Tool);
//! - [`scaffold`]: `toolhost tool new --lang ts` and the module half of `tool check`.
//!
//! The custom tool source (`crate::custom`) owns the scan and the folder watch; it hands
//! the modules it found to [`Modules::tools`] and publishes them with its programs in one
//! registry swap. A module whose digest is unchanged keeps its tool objects, so a rescan
//! that changed nothing notifies nobody; an edited one is loaded again as a fresh module
//! instance, while a call already running finishes on the old one.
//!
//! Architecture Invariant: `custom::modules` imports nothing else of `custom`, nor `host`;
//! the rest of `custom` calls it. (It lives inside `custom` because the custom tool source
//! is one source of two kinds, programs and modules: one scan, one watch, one swap.)

pub mod discover;
pub mod host;
pub mod packages;
pub mod scaffold;
pub mod tool;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lock;
use crate::protocol::ErrorKind;
use crate::registry::{Tool, ToolError};
use discover::Found;
use host::{Live, ModuleHost};
use tool::{Entry, Handle, ModuleTool};

/// How long a module may take to load (import and factory) before the host counts as
/// stuck and is restarted; the module is then skipped until it changes.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the host has to run every `onSession` of one event (each is bounded there).
const SESSION_EVENT_TIMEOUT: Duration = Duration::from_secs(6);
/// How many tools one module may define; the rest are skipped and named (a module that
/// made a hundred thousand must not swell every tool list).
const MAX_TOOLS_PER_MODULE: usize = 256;
/// How many session-event failures `host.health` shows.
const EVENT_FAILURES_KEPT: usize = 20;
/// How often a module may end the host while loading alone (`process.exit` at its top
/// level, a crash of Node) before it is skipped until it changes.
const MAX_LOAD_CRASHES: u32 = 2;

/// Which module host a module runs in. Modules of different trust never share a process:
/// the user's own modules have one host, each workspace's approved modules another,
/// confined by that workspace's sandbox, so one cannot read or change another's calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Domain {
    /// The user's own folders (config `custom_tools.paths`, the user's tool folders,
    /// plugins).
    User,
    /// What one workspace brings (past the trust gate).
    Workspace(PathBuf),
}

impl Domain {
    pub fn of(found: &Found) -> Domain {
        if found.workspace {
            Domain::Workspace(crate::trust::workspace_of(&found.root).to_path_buf())
        } else {
            Domain::User
        }
    }
}

/// The modules of one daemon, in one [`Pool`] per [`Domain`] (cheap to clone).
#[derive(Clone)]
pub struct Modules(Arc<Shared>);

struct Shared {
    processes: crate::process::Processes,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Where the hosts' program is written.
    dir: PathBuf,
    settings: Arc<Settings>,
    /// Config `custom_tools.node`, resolved.
    node: Mutex<Option<PathBuf>>,
    /// Config `sandbox` and the daemon's workspace.
    sandbox: Mutex<Option<(crate::config::SandboxConfig, PathBuf)>>,
    /// Config `custom_tools.module_max_memory_mb`.
    max_memory_mb: AtomicU64,
    pools: Mutex<BTreeMap<Domain, Pool>>,
    on_restart: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    /// Where failed modules look for packages, watched (made at the first scan of a daemon,
    /// the one with an `on_restart`).
    packages: Mutex<Option<packages::PackageWatch>>,
    /// The shutdown event ran: hosts may stop.
    released: AtomicBool,
    /// What the last scan skipped, for `host.health`.
    problems: Mutex<Vec<String>>,
    /// One scan at a time.
    scan_lock: tokio::sync::Mutex<()>,
    history: crate::session::History,
}

/// What every pool reads of the config.
#[derive(Default)]
pub(crate) struct Settings {
    /// Config `custom_tools.node_modules`, resolved, then the host's own
    /// ([`packages::own_dirs`]).
    node_modules: ArcSwap<Vec<PathBuf>>,
    /// Where `pi.cwd` points for modules outside a workspace.
    workspace: ArcSwap<PathBuf>,
}

/// The modules of one domain and the host they run in (cheap to clone).
#[derive(Clone)]
pub(crate) struct Pool(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    domain: Domain,
    host: ModuleHost,
    settings: Arc<Settings>,
    state: Mutex<State>,
    /// One load pass at a time (a scan, or a call reloading after a restart).
    load_lock: tokio::sync::Mutex<()>,
    /// The sessions' recent calls: a call's `ctx.sessionManager`.
    pub(crate) history: crate::session::History,
}

#[derive(Default)]
struct State {
    loaded: HashMap<PathBuf, Loaded>,
    /// Modules that wedged or ended the host while loading alone, by file: their digest
    /// and why. Not tried again until they change.
    stuck: HashMap<PathBuf, (String, String)>,
    /// Modules that were loading when the host wedged or ended, by file: their digest and
    /// how often it happened while they loaded alone. They are loaded one at a time from
    /// then on, so the one to blame is found and an innocent one is never skipped with it.
    suspects: HashMap<PathBuf, (String, u32)>,
    /// Modules whose call was running when the host outgrew `module_max_memory_mb` and was
    /// killed, by file: their digest and what `host.health` names them with (until the
    /// module changes).
    memory_hogs: HashMap<PathBuf, (String, String)>,
    event_failures: Vec<String>,
}

/// One module as last loaded.
#[derive(Clone)]
struct Loaded {
    found: Found,
    generation: u64,
    load: u64,
    outcome: Result<Vec<Arc<ModuleTool>>, String>,
    /// The factory's results that are not tools, with why.
    skipped: Vec<String>,
    /// Whether the failure was the host's, not the module's (tried again at each scan).
    retry: bool,
}

/// What `host.health` says of the modules.
pub struct Health {
    /// The user's modules' host.
    pub host: host::Health,
    /// Each workspace's host, with its modules and tools.
    pub workspace_hosts: Vec<(PathBuf, host::Health, usize, usize)>,
    pub modules: usize,
    pub tools: usize,
    pub problems: Vec<String>,
    pub event_failures: Vec<String>,
}

impl Modules {
    /// `dir`: a private folder of the daemon's for the host program.
    pub fn new(
        processes: crate::process::Processes,
        tracker: TaskTracker,
        shutdown: CancellationToken,
        dir: PathBuf,
        history: crate::session::History,
    ) -> Self {
        Modules(Arc::new(Shared {
            processes,
            tracker,
            shutdown,
            dir,
            settings: Arc::default(),
            node: Mutex::new(None),
            sandbox: Mutex::new(None),
            max_memory_mb: AtomicU64::new(
                crate::config::CustomTools::default().module_max_memory_mb,
            ),
            pools: Mutex::default(),
            on_restart: Mutex::new(None),
            packages: Mutex::new(None),
            released: AtomicBool::new(false),
            problems: Mutex::default(),
            scan_lock: tokio::sync::Mutex::new(()),
            history,
        }))
    }

    /// The pools now, by domain.
    fn pools(&self) -> Vec<Pool> {
        lock(&self.0.pools).values().cloned().collect()
    }

    /// The pool of `domain`, made (its host not started) if there is none.
    fn pool(&self, domain: &Domain) -> Pool {
        let mut pools = lock(&self.0.pools);
        if let Some(p) = pools.get(domain) {
            return p.clone();
        }
        let host = ModuleHost::new(
            self.0.processes.clone(),
            self.0.tracker.clone(),
            self.0.shutdown.clone(),
            self.0.dir.clone(),
            matches!(domain, Domain::Workspace(_)),
        );
        host.set_node(lock(&self.0.node).clone());
        host.set_max_memory_mb(self.0.max_memory_mb.load(Ordering::Relaxed));
        if let Some((cfg, ws)) = lock(&self.0.sandbox).as_ref() {
            let (cfg, ws) = sandbox_of(domain, cfg, ws);
            host.set_sandbox(&cfg, &ws);
        }
        if let Some(f) = lock(&self.0.on_restart).clone() {
            host.on_restart(f);
        }
        if self.0.released.load(Ordering::Relaxed) {
            host.release();
        }
        let pool = Pool(Arc::new(Inner {
            domain: domain.clone(),
            host,
            settings: self.0.settings.clone(),
            state: Mutex::default(),
            load_lock: tokio::sync::Mutex::new(()),
            history: self.0.history.clone(),
        }));
        pools.insert(domain.clone(), pool.clone());
        pool
    }

    /// Applies config `custom_tools` (`node`, `node_modules`, `module_max_memory_mb`). A
    /// change of `node` or `node_modules` loads every module again at the next
    /// [`Modules::tools`].
    pub fn configure(
        &self,
        cfg: &crate::config::CustomTools,
        config_path: &Path,
        workspace: &Path,
    ) {
        let base = config_path.parent().unwrap_or(Path::new("/"));
        // The config's folders, then the host's own packages (`toolhost modules setup`).
        let node_modules: Vec<PathBuf> = cfg
            .node_modules
            .iter()
            .map(|p| base.join(p))
            .chain(
                packages::own_dirs()
                    .into_iter()
                    .map(|d| d.join("node_modules")),
            )
            .collect();
        let node = cfg.node.as_ref().map(|p| base.join(p));
        let settings = &self.0.settings;
        let changed = **settings.node_modules.load() != node_modules;
        settings.node_modules.store(Arc::new(node_modules));
        settings.workspace.store(Arc::new(workspace.to_path_buf()));
        *lock(&self.0.node) = node.clone();
        self.0
            .max_memory_mb
            .store(cfg.module_max_memory_mb, Ordering::Relaxed);
        for pool in self.pools() {
            pool.0.host.set_node(node.clone());
            pool.0.host.set_max_memory_mb(cfg.module_max_memory_mb);
            if changed {
                lock(&pool.0.state).loaded.clear();
            }
        }
    }

    /// Applies config `sandbox` to the hosts (see [`sandbox_of`]).
    pub fn set_sandbox(&self, sandbox: &crate::config::SandboxConfig, workspace: &Path) {
        *lock(&self.0.sandbox) = Some((sandbox.clone(), workspace.to_path_buf()));
        for pool in self.pools() {
            let (cfg, ws) = sandbox_of(&pool.0.domain, sandbox, workspace);
            pool.0.host.set_sandbox(&cfg, &ws);
        }
    }

    /// Runs `f` after each automatic restart of a host (the custom source rescans, which
    /// loads the modules into the new process).
    pub fn on_restart(&self, f: Arc<dyn Fn() + Send + Sync>) {
        *lock(&self.0.on_restart) = Some(f.clone());
        for pool in self.pools() {
            pool.0.host.on_restart(f.clone());
        }
    }

    /// The tools of `found` (in its order), loading what is new or changed, each module in
    /// the host of its domain; names in `taken` (the programs') and names an earlier module
    /// defined are skipped and reported, like everything that is not a tool. A domain left
    /// without modules has its host stopped.
    pub async fn tools(&self, found: Vec<Found>, taken: &HashSet<String>) -> Vec<Arc<dyn Tool>> {
        let _one = self.0.scan_lock.lock().await;
        let mut by_domain: BTreeMap<Domain, Vec<Found>> = BTreeMap::new();
        for f in &found {
            by_domain.entry(Domain::of(f)).or_default().push(f.clone());
        }
        let gone: Vec<Pool> = {
            let mut pools = lock(&self.0.pools);
            let dead: Vec<Domain> = pools
                .keys()
                .filter(|d| !by_domain.contains_key(*d))
                .cloned()
                .collect();
            dead.iter().filter_map(|d| pools.remove(d)).collect()
        };
        for pool in gone {
            pool.0.host.set_wanted(false);
        }
        let pools: BTreeMap<Domain, Pool> = by_domain
            .keys()
            .map(|d| (d.clone(), self.pool(d)))
            .collect();
        futures::future::join_all(
            by_domain
                .iter()
                .filter_map(|(d, f)| Some(pools.get(d)?.load_all(f))),
        )
        .await;
        let mut problems = Vec::new();
        let mut names: HashMap<String, PathBuf> = HashMap::new();
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for f in &found {
            let Some(pool) = pools.get(&Domain::of(f)) else {
                continue;
            };
            let st = lock(&pool.0.state);
            let Some(loaded) = st.loaded.get(&f.file) else {
                continue;
            };
            let file = f.file.display();
            problems.extend(loaded.skipped.iter().map(|s| format!("{file}: {s}")));
            match &loaded.outcome {
                Err(e) => problems.push(format!("{file}: {e}")),
                Ok(tools) => {
                    for t in tools {
                        if taken.contains(t.name()) {
                            problems.push(format!(
                                "{file}: tool '{}' skipped: a custom tool program already has that name",
                                t.name()
                            ));
                        } else if let Some(first) = names.get(t.name()) {
                            problems.push(format!(
                                "{file}: tool '{}' skipped: {} already defines it",
                                t.name(),
                                first.display()
                            ));
                        } else {
                            names.insert(t.name().to_owned(), f.file.clone());
                            out.push(t.clone() as Arc<dyn Tool>);
                        }
                    }
                }
            }
        }
        for p in &problems {
            tracing::warn!("tool module skipped: {p}");
        }
        *lock(&self.0.problems) = problems;
        for pool in pools.values() {
            let (wanted, listening) = {
                let st = lock(&pool.0.state);
                let ok = || st.loaded.values().filter_map(|l| l.outcome.as_ref().ok());
                (
                    ok().next().is_some(),
                    ok().flatten().any(|t| t.session_events),
                )
            };
            pool.0.host.set_wanted(wanted);
            pool.0.host.set_stay_up(listening);
        }
        self.watch_packages();
        out
    }

    /// Forgets every module whose load failed, so the next scan loads it again; true when
    /// there was one. For when its cause may be fixed: a config reload, a change where it
    /// looks for packages, `toolhost tool check`. A module that wedged or ended the host
    /// stays skipped until its file changes (trying it costs a host).
    pub fn forget_failed(&self) -> bool {
        let mut any = false;
        for pool in self.pools() {
            let mut st = lock(&pool.0.state);
            let State { loaded, stuck, .. } = &mut *st;
            let before = loaded.len();
            loaded.retain(|file, l| {
                l.outcome.is_ok() || stuck.get(file).is_some_and(|(d, _)| *d == l.found.digest)
            });
            any |= loaded.len() != before;
        }
        any
    }

    /// Watches where the failed modules look for packages ([`packages`]); a change there
    /// forgets them and rescans (the `on_restart` hook). Only in a daemon: a one-shot host
    /// (`tool check`'s) has no hook and watches nothing.
    fn watch_packages(&self) {
        let Some(rescan) = lock(&self.0.on_restart).clone() else {
            return;
        };
        let mut folders: Vec<PathBuf> = Vec::new();
        for pool in self.pools() {
            let st = lock(&pool.0.state);
            for l in st.loaded.values().filter(|l| l.outcome.is_err()) {
                folders.extend(packages::folders_of(&l.found.file));
            }
        }
        if !folders.is_empty() {
            folders.extend(self.0.settings.node_modules.load().iter().cloned());
        }
        folders.sort();
        folders.dedup();
        let mut slot = lock(&self.0.packages);
        if slot.is_none() {
            if folders.is_empty() {
                return;
            }
            let weak = Arc::downgrade(&self.0);
            let started = packages::PackageWatch::start(
                &self.0.tracker,
                self.0.shutdown.clone(),
                move || {
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
                    if Modules(shared).forget_failed() {
                        tracing::info!(
                            "a package folder changed: loading the failed tool modules again"
                        );
                        rescan();
                    }
                },
            );
            match started {
                Ok(w) => *slot = Some(w),
                Err(e) => {
                    tracing::warn!("not watching the tool modules' package folders: {e}");
                    return;
                }
            }
        }
        if let Some(w) = slot.as_mut() {
            w.set(folders);
        }
    }

    /// Tells the loaded tools with an `onSession` about a session event (`start`,
    /// `resume`, `delete`, `shutdown`), off the caller's path (on `tracker`), bounded: the
    /// user's modules hear every session's, a workspace's modules only the sessions of
    /// their workspace.
    pub fn session_event(&self, reason: &'static str, session_id: Option<&str>, workspace: &Path) {
        for pool in self.pools() {
            if matches!(&pool.0.domain, Domain::Workspace(w) if w != workspace) || !pool.listening()
            {
                continue;
            }
            let ctx = json!({"session_id": session_id, "meta": {}, "cwd": workspace});
            self.0.tracker.spawn(async move {
                pool.run_session_event(reason, ctx).await;
            });
        }
    }

    /// Runs the `shutdown` event in every host and waits for it (bounded), then lets the
    /// hosts stop.
    pub async fn shutdown_event(&self, workspace: &Path) {
        let ctx = json!({"session_id": null, "meta": {}, "cwd": workspace});
        let listening: Vec<Pool> = self.pools().into_iter().filter(Pool::listening).collect();
        futures::future::join_all(
            listening
                .iter()
                .map(|p| p.run_session_event("shutdown", ctx.clone())),
        )
        .await;
        self.release();
    }

    /// Lets the hosts stop at shutdown without waiting for a shutdown event (a one-shot
    /// host, such as `tool check`'s).
    pub fn release(&self) {
        self.0.released.store(true, Ordering::Relaxed);
        for pool in self.pools() {
            pool.0.host.release();
        }
    }

    pub fn health(&self) -> Health {
        let mut out = Health {
            host: host::Health::default(),
            workspace_hosts: Vec::new(),
            modules: 0,
            tools: 0,
            problems: lock(&self.0.problems).clone(),
            event_failures: Vec::new(),
        };
        for pool in self.pools() {
            let st = lock(&pool.0.state);
            let ok: Vec<&Vec<Arc<ModuleTool>>> = st
                .loaded
                .values()
                .filter_map(|l| l.outcome.as_ref().ok())
                .collect();
            let (modules, tools) = (ok.len(), ok.iter().map(|t| t.len()).sum::<usize>());
            out.modules += modules;
            out.tools += tools;
            out.problems
                .extend(st.memory_hogs.values().map(|(_, why)| why.clone()));
            out.event_failures.extend(st.event_failures.iter().cloned());
            match &pool.0.domain {
                Domain::User => out.host = pool.0.host.health(),
                Domain::Workspace(w) => {
                    out.workspace_hosts
                        .push((w.clone(), pool.0.host.health(), modules, tools));
                }
            }
        }
        out
    }
}

/// The sandbox a domain's host runs in: the user's modules under config `sandbox` with
/// the daemon's workspace, as a custom tool program without a session; a workspace's under
/// the same config made at least `workspace-write`, writing only that workspace (network
/// as config says).
fn sandbox_of(
    domain: &Domain,
    config: &crate::config::SandboxConfig,
    workspace: &Path,
) -> (crate::config::SandboxConfig, PathBuf) {
    match domain {
        Domain::User => (config.clone(), workspace.to_path_buf()),
        Domain::Workspace(w) => {
            let mut cfg = config.clone();
            if cfg.policy == crate::protocol::SandboxPolicy::Off {
                cfg.policy = crate::protocol::SandboxPolicy::WorkspaceWrite;
            }
            (cfg, w.clone())
        }
    }
}

impl Pool {
    /// Whether a loaded tool of this pool has an `onSession`.
    fn listening(&self) -> bool {
        lock(&self.0.state).loaded.values().any(|l| {
            l.outcome
                .as_ref()
                .is_ok_and(|t| t.iter().any(|t| t.session_events))
        })
    }

    /// Loads what of `found` (this domain's modules, in order) is new or changed into the
    /// host, and forgets what is gone.
    async fn load_all(&self, found: &[Found]) {
        let _one = self.0.load_lock.lock().await;
        let generation = self.0.host.generation();
        let (suspects, todo): (Vec<Found>, Vec<Found>) = {
            let st = lock(&self.0.state);
            found
                .iter()
                .filter(|f| match st.loaded.get(&f.file) {
                    // A host stopped while idle is not started for a scan: its modules are
                    // loaded again by the next call.
                    Some(l) if l.found == **f => {
                        l.retry
                            || (l.outcome.is_ok() && generation != 0 && l.generation != generation)
                    }
                    _ => true,
                })
                .cloned()
                .partition(|f| {
                    st.suspects
                        .get(&f.file)
                        .is_some_and(|(d, _)| *d == f.digest)
                })
        };
        // Suspects one at a time (each alone in the host while it loads), then the rest
        // together. What the host's end or wedge made a suspect goes round again, alone,
        // until it loads or is stuck (bounded): an innocent module that loaded beside the
        // culprit is loaded again at once, not left waiting for a file change.
        let mut loads = Vec::new();
        let (mut suspects, mut todo) = (suspects, todo);
        for _round in 0..MAX_LOAD_CRASHES + 2 {
            let mut done = Vec::new();
            for f in &suspects {
                done.push(self.load(f, true).await);
            }
            let alone = todo.len() == 1 && suspects.is_empty();
            done.extend(futures::future::join_all(todo.iter().map(|f| self.load(f, alone))).await);
            todo = Vec::new();
            let st = lock(&self.0.state);
            let again = |l: &Loaded| {
                l.retry
                    && st
                        .suspects
                        .get(&l.found.file)
                        .is_some_and(|(d, _)| *d == l.found.digest)
            };
            suspects = done
                .iter()
                .filter(|l| again(l))
                .map(|l| l.found.clone())
                .collect();
            let finished = suspects.is_empty();
            drop(st);
            loads.extend(done);
            if finished {
                break;
            }
        }
        let mut st = lock(&self.0.state);
        for loaded in loads {
            if let Some(old) = st.loaded.insert(loaded.found.file.clone(), loaded) {
                self.drop_load(&old);
            }
        }
        let keep: HashSet<&PathBuf> = found.iter().map(|f| &f.file).collect();
        let gone: Vec<PathBuf> = st
            .loaded
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        for file in gone {
            if let Some(old) = st.loaded.remove(&file) {
                self.drop_load(&old);
            }
        }
        st.stuck.retain(|file, _| keep.contains(file));
        st.suspects.retain(|file, _| keep.contains(file));
        st.memory_hogs
            .retain(|file, (d, _)| found.iter().any(|f| f.file == *file && f.digest == *d));
    }

    /// Tells the host to forget a load that was replaced (its calls still running keep
    /// their tool; the host just stops listing it).
    fn drop_load(&self, old: &Loaded) {
        if old.outcome.is_err() || old.generation != self.0.host.generation() {
            return;
        }
        if let Some(live) = self
            .0
            .host
            .current()
            .filter(|l| l.generation == old.generation)
        {
            self.0
                .host
                .tell(&live, &json!({"op": "drop", "load": old.load}));
        }
    }

    /// The host wedged or ended while `found` loaded. Loading alone, the module is to
    /// blame: after `limit` such times it is stuck, skipped until it changes (`Some(why)`).
    /// Not alone, it is a suspect (loaded alone from then on) and nothing more (`None`).
    fn blame(&self, found: &Found, alone: bool, limit: u32, why: String) -> Option<String> {
        let mut st = lock(&self.0.state);
        let entry = st
            .suspects
            .entry(found.file.clone())
            .or_insert_with(|| (found.digest.clone(), 0));
        if entry.0 != found.digest {
            *entry = (found.digest.clone(), 0);
        }
        if !alone {
            return None;
        }
        entry.1 += 1;
        if entry.1 < limit {
            return None;
        }
        st.suspects.remove(&found.file);
        st.stuck
            .insert(found.file.clone(), (found.digest.clone(), why.clone()));
        Some(why)
    }

    /// Loads one module into the running host (started if need be). `alone`: no other
    /// load is in flight, so a host that wedges or ends meanwhile is this module's doing.
    async fn load(&self, found: &Found, alone: bool) -> Loaded {
        let failed = |e: String, retry: bool| Loaded {
            found: found.clone(),
            generation: 0,
            load: 0,
            outcome: Err(e),
            skipped: Vec::new(),
            retry,
        };
        let stuck = lock(&self.0.state)
            .stuck
            .get(&found.file)
            .filter(|(d, _)| *d == found.digest)
            .map(|(_, why)| why.clone());
        if let Some(why) = stuck {
            return failed(why, false);
        }
        let live = match self.0.host.live().await {
            Ok(l) => l,
            Err(e) => return failed(e, true),
        };
        // `pi.cwd`: the session workspace the module came from, else the daemon's.
        let cwd = found
            .scope
            .clone()
            .unwrap_or_else(|| (**self.0.settings.workspace.load()).clone());
        let mut op = json!({
            "op": "load",
            "file": found.file,
            "version": found.digest,
            "cwd": cwd,
            "node_modules": **self.0.settings.node_modules.load(),
        });
        // A workspace module passed the trust gate by its digest: the host imports exactly
        // the bytes hashed for it (each file's SHA-256), never a file swapped since, nor
        // another file of the workspace (`host.mjs`, `approved`).
        if let Domain::Workspace(root) = &self.0.domain {
            let root = root.canonicalize().unwrap_or_else(|_| root.clone());
            let files: serde_json::Map<String, Value> = found
                .files
                .iter()
                .map(|(path, sha)| (path.display().to_string(), json!(sha)))
                .collect();
            op["approved"] = json!({"root": root, "files": files});
        }
        let (load, mut replies) = self.0.host.request(&live, op);
        let reply = match tokio::time::timeout(LOAD_TIMEOUT, replies.recv()).await {
            Ok(Some(reply)) => reply,
            Ok(None) => {
                let how = match live.killed_for() {
                    Some(_) => "outgrew custom_tools.module_max_memory_mb while loading (its module host was killed)",
                    None => "ended the module host while loading (process.exit or a crash at its top level or in its factory?)",
                };
                let why = format!("{how} {MAX_LOAD_CRASHES} times; skipped until the file changes");
                return match self.blame(found, alone, MAX_LOAD_CRASHES, why) {
                    Some(why) => failed(why, false),
                    None => failed("the module host ended while loading it".into(), true),
                };
            }
            Err(_) => {
                self.0
                    .host
                    .restart(&live, "a module did not finish loading");
                let why = format!("did not finish loading within {} s (a loop at its top level or in its factory?); the module host was restarted; skipped until the file changes", LOAD_TIMEOUT.as_secs());
                return match self.blame(found, alone, 1, why) {
                    Some(why) => failed(why, false),
                    None => failed(
                        "the module host was restarted while loading it (another module did not finish loading)".into(),
                        true,
                    ),
                };
            }
        };
        lock(&self.0.state).suspects.remove(&found.file);
        if let Some(error) = reply.get("error") {
            if let Some(stack) = reply.get("stack").and_then(Value::as_str) {
                tracing::debug!(file = %found.file.display(), "module load failed: {stack}");
            }
            // Refused for a file changed since its approval: the next scan sees the change
            // (the module waits again) or, swapped back, loads it again.
            let changed = reply["changed"] == true;
            return failed(
                error.as_str().unwrap_or("could not be loaded").to_owned(),
                changed,
            );
        }
        let mut skipped: Vec<String> = reply["skipped"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s["reason"].as_str().unwrap_or("not a tool").to_owned())
            .collect();
        let mut tools = Vec::new();
        let entries = reply["tools"].as_array().map_or(&[][..], Vec::as_slice);
        if entries.len() > MAX_TOOLS_PER_MODULE {
            skipped.push(format!(
                "defines {} tools; the first {MAX_TOOLS_PER_MODULE} are kept",
                entries.len()
            ));
        }
        for entry in entries.iter().take(MAX_TOOLS_PER_MODULE) {
            let made = serde_json::from_value::<Entry>(entry.clone())
                .map_err(|e| format!("the module host described a tool oddly: {e}"))
                .and_then(|entry| {
                    let handle = Handle {
                        generation: live.generation,
                        load,
                        index: entry.index,
                    };
                    ModuleTool::new(entry, found, handle, Arc::downgrade(&self.0))
                });
            match made {
                Ok(t) => tools.push(Arc::new(t)),
                Err(e) => skipped.push(e),
            }
        }
        Loaded {
            found: found.clone(),
            generation: live.generation,
            load,
            outcome: Ok(tools),
            skipped,
            retry: false,
        }
    }

    /// Where a call of `tool` goes: its own load while the host that loaded it runs, else
    /// (the host restarted) the same tool of the module loaded again in the new host.
    pub(crate) async fn handle_of(
        &self,
        tool: &ModuleTool,
    ) -> Result<(ModuleHost, Live, Handle), ToolError> {
        let unavailable = |e: String| ToolError::new(ErrorKind::Unavailable, e);
        let live = self.0.host.live().await.map_err(unavailable)?;
        if live.generation == tool.handle.generation {
            return Ok((self.0.host.clone(), live, tool.handle));
        }
        let _one = self.0.load_lock.lock().await;
        let current = {
            let st = lock(&self.0.state);
            st.loaded.get(&tool.file).and_then(|l| match &l.outcome {
                Ok(tools) if l.generation == live.generation && l.found.digest == tool.digest => {
                    tools
                        .iter()
                        .find(|t| t.name() == tool.name())
                        .map(|t| t.handle)
                }
                _ => None,
            })
        };
        let handle = match current {
            Some(h) => h,
            None => {
                let found = lock(&self.0.state)
                    .loaded
                    .get(&tool.file)
                    .map(|l| l.found.clone())
                    .filter(|f| f.digest == tool.digest)
                    .ok_or_else(|| {
                        unavailable(format!(
                            "the module {} changed; list the tools again",
                            tool.file.display()
                        ))
                    })?;
                let loaded = self.load(&found, true).await;
                let handle = match &loaded.outcome {
                    Ok(tools) => tools
                        .iter()
                        .find(|t| t.name() == tool.name())
                        .map(|t| t.handle),
                    Err(_) => None,
                };
                lock(&self.0.state)
                    .loaded
                    .insert(found.file.clone(), loaded);
                handle.ok_or_else(|| {
                    unavailable(format!(
                        "tool '{}' is no longer defined by {}",
                        tool.name(),
                        tool.file.display()
                    ))
                })?
            }
        };
        let live = self.0.host.live().await.map_err(unavailable)?;
        if live.generation != handle.generation {
            return Err(unavailable(
                "the module host restarted again; try the call again".into(),
            ));
        }
        Ok((self.0.host.clone(), live, handle))
    }

    /// A call of `tool` (of module `file`) was running when the host was killed for its
    /// memory (`why`): the module is named in `host.health`'s `module_errors` until it
    /// changes. (Its innocent neighbours answer again from the fresh host.)
    pub(crate) fn name_memory_hog(&self, file: &Path, digest: &str, tool: &str, why: &str) {
        let named = format!(
            "{}: tool '{tool}' was running when its module host {why}",
            file.display()
        );
        tracing::warn!("{named}");
        lock(&self.0.state)
            .memory_hogs
            .insert(file.to_path_buf(), (digest.to_owned(), named));
    }

    async fn run_session_event(&self, reason: &str, ctx: Value) {
        // Only a running host has the modules loaded; none is started for an event.
        let Some(live) = self.0.host.current() else {
            return;
        };
        let (_, mut replies) = self.0.host.request(
            &live,
            json!({"op": "session", "reason": reason, "ctx": ctx}),
        );
        let failures: Vec<String> =
            match tokio::time::timeout(SESSION_EVENT_TIMEOUT, replies.recv()).await {
                Ok(Some(reply)) => reply["errors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.as_str().map(str::to_owned))
                    .collect(),
                Ok(None) => vec![format!("the module host ended during the {reason} event")],
                Err(_) => vec![format!(
                    "the {reason} event did not finish within {} s",
                    SESSION_EVENT_TIMEOUT.as_secs()
                )],
            };
        if failures.is_empty() {
            return;
        }
        let mut st = lock(&self.0.state);
        for f in failures {
            tracing::warn!("tool module session event failed: {f}");
            st.event_failures.push(f);
        }
        let excess = st.event_failures.len().saturating_sub(EVENT_FAILURES_KEPT);
        st.event_failures.drain(..excess);
    }
}
