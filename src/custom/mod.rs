//! Custom tools: programs a user drops into a folder, callable by every agent.
//!
//! - [`manifest`]: `tool.json`, validated with errors naming the file and the field;
//! - [`tool`]: a manifest as a registry [`Tool`](crate::registry::Tool), run through the
//!   shared process runner with the stdout line protocol;
//! - [`watch`]: the tool folders are watched, including folders that appear later;
//! - [`events`]: session lifecycle events for tools that ask for them;
//! - [`scaffold`]: `toolhost tool new` / `tool check`.
//!
//! Tools and modules a workspace brings pass the workspace-trust gate ([`crate::trust`])
//! before their manifest is read or their module imported.
//!
//! Discovery order (the first definition of a name wins; later ones are reported as
//! collisions by the registry, like MCP clashes): config `custom_tools.paths`, then
//! `$XDG_CONFIG_HOME/toolhost/tools/`, then `<workspace>/.toolhost/tools/`, then the same
//! folder of every session's workspace (in the order the daemon learnt of them) — the
//! user's own folders first, so a workspace tool can never take the name of one of the
//! user's. Every workspace folder, the daemon's or a session's, passes the trust gate.
//!
//! Architecture Invariant: every scan publishes the whole custom source in one registry
//! swap, and a tool whose manifest bytes are unchanged keeps its tool object, so editing a
//! tool's program (not its manifest) never changes the list or notifies anybody.

pub mod events;
pub mod manifest;
pub mod modules;
pub mod scaffold;
pub mod tool;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::lock;
use crate::protocol::{TrustItem, TrustKind};
use crate::registry::{Registry, SourceKey, Tool};
use crate::source::watch::{self, Watch};
use crate::source::{Apply, Contribution, Folders};
use crate::trust::Trust;

pub use manifest::{Manifest, ManifestError};
pub use tool::CustomTool;

/// A folder searched for tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    /// The workspace's `.toolhost/tools/`: its tools pass the trust gate.
    pub workspace: bool,
}

/// The folders searched, in precedence order: the user's own (configured, then the user
/// folder), then the workspace's. A folder named twice keeps its first (the user's) place.
pub fn roots(cfg: &Config, config_path: &Path, workspace: &Path) -> Vec<Root> {
    let base = config_path.parent().unwrap_or(Path::new("/"));
    let own = |path: PathBuf| Root {
        path,
        workspace: false,
    };
    let mut out: Vec<Root> = cfg
        .custom_tools
        .paths
        .iter()
        .map(|p| {
            own(if p.is_absolute() {
                p.clone()
            } else {
                base.join(p)
            })
        })
        .collect();
    if cfg.custom_tools.discover {
        out.push(own(user_tools_dir()));
        out.push(Root {
            path: workspace.join(".toolhost").join("tools"),
            workspace: true,
        });
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|r| seen.insert(r.path.clone()));
    out
}

/// `$XDG_CONFIG_HOME/toolhost/tools` (the user's own tools).
pub fn user_tools_dir() -> PathBuf {
    crate::config::xdg_dir("XDG_CONFIG_HOME", ".config")
        .join("toolhost")
        .join("tools")
}

/// One scanned tool folder.
#[derive(Debug, Clone)]
pub struct Found {
    pub dir: PathBuf,
    pub result: Result<Scanned, ManifestError>,
}

/// A tool folder whose manifest loaded.
#[derive(Debug, Clone)]
pub struct Scanned {
    pub manifest: Manifest,
    pub bytes: Vec<u8>,
    /// For a workspace tool, [`crate::trust::folder_digest`] of its folder (what was approved).
    pub workspace_digest: Option<String>,
}

/// Every sub-folder of `roots` holding a `tool.json`, in precedence order (folders sorted
/// by name inside each root, so the order is stable), and the workspace tools `trust` holds
/// back (their manifest is not even read).
pub fn scan(roots: &[Root], trust: &Trust) -> (Vec<Found>, Vec<TrustItem>) {
    let mut out = Vec::new();
    let mut waiting = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root.path) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.join(manifest::MANIFEST).exists())
            .collect();
        dirs.sort();
        for dir in dirs {
            let workspace_digest = if root.workspace {
                let digest = match crate::trust::folder_digest(&dir) {
                    Ok(d) => d,
                    Err(message) => {
                        out.push(Found {
                            dir: dir.clone(),
                            result: Err(ManifestError {
                                file: dir,
                                field: None,
                                message,
                            }),
                        });
                        continue;
                    }
                };
                let workspace = crate::trust::workspace_of(&root.path);
                if let Err(w) = trust.check(workspace, TrustKind::Tool, &dir, &digest) {
                    waiting.push(w);
                    continue;
                }
                Some(digest)
            } else {
                None
            };
            let result = manifest::load(&dir).map(|(manifest, bytes)| Scanned {
                manifest,
                bytes,
                workspace_digest,
            });
            out.push(Found { dir, result });
        }
    }
    (out, waiting)
}

/// The custom tool source of one daemon.
#[derive(Clone)]
pub struct CustomTools(Arc<Inner>);

struct Inner {
    registry: Registry,
    /// Where a rescan of its own (a module host that restarted) is applied.
    apply: Apply,
    /// JS/TS tool modules, found by the same scans and published in the same swaps.
    modules: crate::custom::modules::Modules,
    providers: tool::Providers,
    /// The config's sandbox section, for the session-event runs of workspace tools.
    sandbox: Arc<ArcSwap<crate::config::SandboxConfig>>,
    state: Mutex<State>,
    /// Serialises scans, so two scans never publish out of order.
    scan_lock: tokio::sync::Mutex<()>,
    watch: Mutex<Option<watch::Watch>>,
    /// The daemon's processes, for the runs that are not calls (session events).
    processes: crate::process::Processes,
    /// The workspace-trust gate every workspace tool and module passes.
    trust: Trust,
}

#[derive(Default)]
struct State {
    /// What the config and the daemon's workspace give ([`roots`]).
    configured: Vec<Root>,
    /// The workspaces of sessions, each searched like the daemon's (`.toolhost/tools/`).
    session_workspaces: Vec<PathBuf>,
    /// `configured`, then the session workspaces' folders: what is scanned and watched.
    roots: Vec<Root>,
    /// The config's `custom_tools` and the daemon's workspace, for the module folders
    /// ([`crate::custom::modules::discover::roots`]).
    module_settings: Option<(crate::config::CustomTools, PathBuf)>,
    /// The module folders searched now (after `roots` in precedence).
    module_roots: Vec<crate::custom::modules::discover::Root>,
    /// By folder: the manifest bytes and the tool built from them.
    tools: Vec<(PathBuf, Vec<u8>, Arc<CustomTool>)>,
    errors: Vec<ManifestError>,
    /// Recent session-event failures, newest last.
    event_failures: Vec<String>,
    /// What the last scan of the module folders could not read.
    module_scan_problems: Vec<String>,
}

impl State {
    /// The module folders for the settings and workspaces known now.
    fn refresh_module_roots(&mut self) {
        let Some((cfg, workspace)) = &self.module_settings else {
            self.module_roots = Vec::new();
            return;
        };
        let programs: Vec<crate::custom::modules::discover::Root> = self
            .roots
            .iter()
            .map(|r| crate::custom::modules::discover::Root {
                path: r.path.clone(),
                workspace: r.workspace,
                scope: self.scope_of(&r.path),
                plugins: false,
            })
            .collect();
        self.module_roots = crate::custom::modules::discover::roots(
            cfg,
            &programs,
            workspace,
            &self.session_workspaces,
        );
    }

    /// The session workspace whose sessions alone see the tools of folder `root`: the one
    /// whose `.toolhost/tools/` it is, unless the config names that folder too.
    fn scope_of(&self, root: &Path) -> Option<PathBuf> {
        self.session_workspaces
            .iter()
            .find(|w| w.join(".toolhost").join("tools") == root)
            .filter(|_| !self.configured.iter().any(|r| r.path == root))
            .cloned()
    }
}

/// How many session-event failures `host.health` shows.
const EVENT_FAILURES_KEPT: usize = 20;

impl CustomTools {
    pub fn new(
        registry: Registry,
        processes: crate::process::Processes,
        modules: crate::custom::modules::Modules,
        trust: Trust,
        apply: Apply,
    ) -> Self {
        let me = CustomTools(Arc::new(Inner {
            registry,
            apply,
            modules,
            processes,
            trust,
            providers: Arc::new(ArcSwap::from_pointee(BTreeMap::new())),
            sandbox: Arc::default(),
            state: Mutex::default(),
            scan_lock: tokio::sync::Mutex::new(()),
            watch: Mutex::new(None),
        }));
        // A module host that restarted has none of the modules: a rescan loads them again.
        let weak = Arc::downgrade(&me.0);
        me.0.modules.on_restart(Arc::new(move || {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let me = CustomTools(inner);
                    me.0.apply.run(me.scan()).await;
                });
            }
        }));
        me
    }

    /// The JS/TS tool modules (`host.health`, session events).
    pub fn modules(&self) -> &crate::custom::modules::Modules {
        &self.0.modules
    }

    /// The folders searched now, in precedence order.
    pub fn folders(&self) -> Vec<PathBuf> {
        paths(&lock(&self.0.state).roots)
    }

    /// Watches what exists now of [`Self::watched`] (a folder may have appeared or gone).
    fn watch_folders(&self) {
        let folders = self.watched();
        if let Some(w) = lock(&self.0.watch).as_mut() {
            w.set_roots(&folders);
        }
    }

    /// Scans `roots` and the module folders, reusing the tool objects of unchanged
    /// manifests and modules; the modules' tools come after the programs'. What the trust
    /// gate holds back is reported to it, never read further (a module is not imported).
    async fn build(&self, roots: Vec<Root>) -> Vec<Arc<dyn Tool>> {
        let module_roots = lock(&self.0.state).module_roots.clone();
        let trust = self.0.trust.clone();
        let scanned = tokio::task::spawn_blocking(move || {
            let (mut modules, problems) =
                crate::custom::modules::discover::scan(&module_roots, manifest::MANIFEST);
            let mut waiting_modules = Vec::new();
            modules.retain(|m| {
                if !m.workspace {
                    return true;
                }
                let workspace = crate::trust::workspace_of(&m.root);
                match trust.check(workspace, TrustKind::Module, &m.file, &m.digest) {
                    Ok(()) => true,
                    Err(w) => {
                        waiting_modules.push(w);
                        false
                    }
                }
            });
            let (found, waiting_tools) = scan(&roots, &trust);
            (found, waiting_tools, modules, waiting_modules, problems)
        })
        .await;
        let Ok((found, waiting_tools, modules, waiting_modules, module_problems)) = scanned else {
            return Vec::new();
        };
        self.0.trust.report(TrustKind::Tool, waiting_tools);
        self.0.trust.report(TrustKind::Module, waiting_modules);
        let mut tools = self.build_programs(found);
        let taken = tools.iter().map(|t| t.spec().name.clone()).collect();
        tools.extend(self.0.modules.tools(modules, &taken).await);
        lock(&self.0.state).module_scan_problems = module_problems;
        tools
    }

    /// The program tools of a scan, reusing the tool objects of unchanged manifests.
    fn build_programs(&self, found: Vec<Found>) -> Vec<Arc<dyn Tool>> {
        let mut st = lock(&self.0.state);
        let old: HashMap<PathBuf, (Vec<u8>, Arc<CustomTool>)> =
            st.tools.drain(..).map(|(d, b, t)| (d, (b, t))).collect();
        let mut errors = Vec::new();
        for f in found {
            // A tool of a session workspace's folder is listed for that workspace's sessions.
            let scope = f.dir.parent().and_then(|root| st.scope_of(root));
            match f.result {
                Ok(found) => {
                    let tool = match old.get(&f.dir) {
                        Some((b, t))
                            if *b == found.bytes
                                && t.workspace_digest() == found.workspace_digest.as_deref() =>
                        {
                            t.clone()
                        }
                        _ => Arc::new(CustomTool::new(
                            found.manifest,
                            f.dir.clone(),
                            self.0.providers.clone(),
                            found.workspace_digest,
                            scope,
                        )),
                    };
                    st.tools.push((f.dir, found.bytes, tool));
                }
                Err(e) => {
                    tracing::warn!("custom tool skipped: {e}");
                    errors.push(e);
                }
            }
        }
        st.errors = errors;
        st.tools
            .iter()
            .map(|(_, _, t)| t.clone() as Arc<dyn Tool>)
            .collect()
    }

    /// Problems of the last scan's module folders (a plugin's `package.json`, an
    /// unreadable file), as `<file>: <problem>`; the modules' own are [`Self::modules`]'.
    pub fn module_scan_problems(&self) -> Vec<String> {
        lock(&self.0.state).module_scan_problems.clone()
    }

    /// Manifest errors of the last scan, as `<file>: <field>: <problem>`.
    pub fn errors(&self) -> Vec<String> {
        lock(&self.0.state)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Recent session-event failures.
    pub fn event_failures(&self) -> Vec<String> {
        lock(&self.0.state).event_failures.clone()
    }

    fn record_event_failure(&self, failure: String) {
        tracing::warn!("custom tool session event failed: {failure}");
        let mut st = lock(&self.0.state);
        st.event_failures.push(failure);
        let excess = st.event_failures.len().saturating_sub(EVENT_FAILURES_KEPT);
        st.event_failures.drain(..excess);
    }

    /// The live tools that asked for session events. A workspace tool only while it is
    /// listed as approved: a quarantined one (new, or changed since approval) is not run.
    fn event_listeners(&self) -> Vec<Arc<CustomTool>> {
        let snapshot = self.0.registry.snapshot();
        lock(&self.0.state)
            .tools
            .iter()
            .filter(|(_, _, t)| t.manifest.session_events)
            .filter(|(_, _, t)| {
                t.workspace_digest().is_none()
                    || snapshot
                        .get(t.name())
                        .is_some_and(|e| e.tool.spec().source == t.spec().source)
            })
            .map(|(_, _, t)| t.clone())
            .collect()
    }
}

#[async_trait::async_trait]
impl Folders for CustomTools {
    const WHAT: &'static str = "custom tool folder";

    /// The folders watched: the program tools' and the modules'.
    fn watched(&self) -> Vec<PathBuf> {
        let st = lock(&self.0.state);
        let mut out = paths(&st.roots);
        out.extend(st.module_roots.iter().map(|r| r.path.clone()));
        out
    }

    fn watch_slot(&self) -> &Mutex<Option<Watch>> {
        &self.0.watch
    }

    /// Applies a config: the providers (read by the next call) and the folders; the custom
    /// source is contributed when the folders changed.
    async fn configure_with(
        &self,
        cfg: &Config,
        config_path: &Path,
        workspace: &Path,
    ) -> Contribution {
        self.0.providers.store(Arc::new(cfg.providers.clone()));
        self.0.sandbox.store(Arc::new(cfg.sandbox.clone()));
        self.0
            .modules
            .configure(&cfg.custom_tools, config_path, workspace);
        self.0.modules.set_sandbox(&cfg.sandbox, workspace);
        // A reload is when a module's failure may have been fixed (a package installed).
        let retry = self.0.modules.forget_failed();
        let roots = {
            let mut st = lock(&self.0.state);
            st.configured = roots(cfg, config_path, workspace);
            let discover = cfg.custom_tools.discover;
            let roots = with_sessions(&st.configured, discover, &st.session_workspaces);
            let settings = (cfg.custom_tools.clone(), workspace.to_path_buf());
            if !retry
                && st.roots == roots
                && !st.roots.is_empty()
                && st.module_settings.as_ref() == Some(&settings)
            {
                return Contribution::default();
            }
            st.roots = roots.clone();
            st.module_settings = Some(settings);
            st.refresh_module_roots();
            roots
        };
        self.watch_folders();
        let _one = self.0.scan_lock.lock().await;
        Contribution::tools(vec![(SourceKey::Custom, Some(self.build(roots).await))])
    }

    /// Scans the folders again: the whole custom source, for one swap (at most one
    /// `tools_changed`).
    async fn scan(&self) -> Contribution {
        let _one = self.0.scan_lock.lock().await;
        let roots = lock(&self.0.state).roots.clone();
        self.watch_folders();
        let tools = self.build(roots).await;
        Contribution::tools(vec![(SourceKey::Custom, Some(tools))])
    }

    /// Searches the `.toolhost/tools/` of these session workspaces too (a session created
    /// in a project brings that project's tools, under the [`trust`] rule), or no longer
    /// (their tools and watches go). Workspaces already searched change nothing.
    async fn change_workspaces(&self, change: watch::Workspaces<'_>) -> Contribution {
        {
            let mut st = lock(&self.0.state);
            if !change.apply(&mut st.session_workspaces) {
                return Contribution::default();
            }
            let discover = st.module_settings.as_ref().is_some_and(|(c, _)| c.discover);
            let roots = with_sessions(&st.configured, discover, &st.session_workspaces);
            let module_roots = st.module_roots.clone();
            let programs_unchanged = roots == st.roots;
            st.roots = roots;
            st.refresh_module_roots();
            if programs_unchanged && module_roots == st.module_roots {
                return Contribution::default();
            }
        }
        self.scan().await
    }
}

/// `configured` followed by the tool folder of each session workspace (with `discover`
/// off, none), each folder once in its first place.
fn with_sessions(configured: &[Root], discover: bool, sessions: &[PathBuf]) -> Vec<Root> {
    let mut out = configured.to_vec();
    if discover {
        for w in sessions {
            let path = w.join(".toolhost").join("tools");
            if !out.iter().any(|r| r.path == path) {
                out.push(Root {
                    path,
                    workspace: true,
                });
            }
        }
    }
    out
}

fn paths(roots: &[Root]) -> Vec<PathBuf> {
    roots.iter().map(|r| r.path.clone()).collect()
}
