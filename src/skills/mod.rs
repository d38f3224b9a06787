//! Agent Skills: folders holding a `SKILL.md`, found where every frontend keeps them and
//! served to all of them from one place.
//!
//! - [`skill`]: one folder — `SKILL.md` read safely, its front matter checked, its files;
//! - [`catalog`]: every root scanned into one immutable [`Catalog`] (first name wins,
//!   clashes and invalid skills kept for `host.health`);
//! - [`tool`]: the built-in `load_skill`, whose description lists the skills;
//! - [`scaffold`]: `toolhost skills new|check|list`, without a daemon;
//! - [`sync`]: `toolhost skills sync`, links into each frontend's folder.
//!
//! Search order: config `skills.paths`, then `<workspace>/.toolhost/skills`,
//! `<workspace>/.agents/skills`, `<workspace>/.claude/skills`, then the user's
//! `$XDG_CONFIG_HOME/toolhost/skills`, `~/.agents/skills`, `~/.claude/skills`
//! (`skills.discover: false` keeps only the configured folders).
//!
//! Architecture Invariant: the folders are parsed when they change (the folder sources'
//! watcher, [`crate::source::watch`]), never per call; a request reads the catalog in
//! force, and a scan whose catalog has the etag of the last one notifies nobody.

pub mod catalog;
pub mod scaffold;
pub mod skill;
pub mod sync;
pub mod tool;
pub mod uri;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::broadcast;

use crate::config::Config;
use crate::lock;
use crate::protocol::{SkillSource, SkillsChanged, TrustKind};
use crate::registry::{SourceKey, Tool};
use crate::source::watch::{Watch, Workspaces};
use crate::source::{Contribution, Folders};
use crate::trust::Trust;

pub use catalog::Catalog;
pub use skill::Skill;

/// A folder searched for skills, and what kind of place it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    pub source: SkillSource,
}

/// The folders searched, in precedence order; a folder named twice keeps its first place.
pub fn roots(cfg: &Config, config_path: &Path, workspace: &Path) -> Vec<Root> {
    Search::of(cfg, config_path, workspace).roots(None)
}

/// Where skills are searched, for the daemon's workspace and any session's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Search {
    /// Config `skills.paths`, resolved.
    configured: Vec<Root>,
    /// `skills.discover`.
    discover: bool,
    /// The daemon's workspace.
    workspace: PathBuf,
    /// The workspaces of sessions, in the order the daemon learnt of them.
    session_workspaces: Vec<PathBuf>,
}

impl Search {
    fn of(cfg: &Config, config_path: &Path, workspace: &Path) -> Search {
        let base = config_path.parent().unwrap_or(Path::new("/"));
        let configured = cfg
            .skills
            .paths
            .iter()
            .map(|p| Root {
                path: if p.is_absolute() {
                    p.clone()
                } else {
                    base.join(p)
                },
                source: SkillSource::Config,
            })
            .collect();
        Search {
            configured,
            discover: cfg.skills.discover,
            workspace: workspace.to_path_buf(),
            session_workspaces: Vec::new(),
        }
    }

    /// The search order of a session in `session` (none: the daemon workspace's): the
    /// configured folders, the session workspace's three, the daemon workspace's three,
    /// then the user's (`skills.discover: false` keeps only the configured ones).
    fn roots(&self, session: Option<&Path>) -> Vec<Root> {
        let mut out = self.configured.clone();
        if self.discover {
            // `$HOME` itself (xdg_dir's fallback is relative to it).
            let home = crate::config::xdg_dir("HOME", "");
            let user_config = crate::config::xdg_dir("XDG_CONFIG_HOME", ".config");
            // Each frontend keeps its skills in a `skills` folder of its own directory.
            let skills_in = |(dir, source): (PathBuf, SkillSource)| Root {
                path: dir.join("skills"),
                source,
            };
            let workspaces = session.into_iter().chain([self.workspace.as_path()]);
            for ws in workspaces {
                out.extend(
                    [
                        (ws.join(".toolhost"), SkillSource::WorkspaceToolhost),
                        (ws.join(".agents"), SkillSource::WorkspaceAgents),
                        (ws.join(".claude"), SkillSource::WorkspaceClaude),
                    ]
                    .map(skills_in),
                );
            }
            out.extend(
                [
                    (user_config.join("toolhost"), SkillSource::UserToolhost),
                    (home.join(".agents"), SkillSource::UserAgents),
                    (home.join(".claude"), SkillSource::UserClaude),
                ]
                .map(skills_in),
            );
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|r| seen.insert(r.path.clone()));
        out
    }

    /// The session workspaces that have a search order of their own.
    fn sessions(&self) -> impl Iterator<Item = &PathBuf> {
        let discover = self.discover;
        self.session_workspaces
            .iter()
            .filter(move |w| discover && **w != self.workspace)
    }

    /// Every folder searched by any of the search orders, once each.
    fn folders(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        let all = std::iter::once(None).chain(self.sessions().map(|w| Some(w.as_path())));
        for session in all {
            for r in self.roots(session) {
                if !out.contains(&r.path) {
                    out.push(r.path);
                }
            }
        }
        out
    }
}

/// The catalogs in force: the daemon workspace's, and each session workspace's whose
/// skills differ from it.
#[derive(Default)]
pub struct Views {
    pub base: Arc<Catalog>,
    sessions: Vec<(PathBuf, Arc<Catalog>)>,
}

impl Views {
    /// What a session in `workspace` is served.
    pub fn of(&self, workspace: &Path) -> &Arc<Catalog> {
        self.sessions
            .iter()
            .find(|(w, _)| w == workspace)
            .map_or(&self.base, |(_, c)| c)
    }

    fn all(&self) -> impl Iterator<Item = &Arc<Catalog>> {
        std::iter::once(&self.base).chain(self.sessions.iter().map(|(_, c)| c))
    }

    /// The session workspaces whose catalog is not the same in `self` and `other`.
    fn changed_sessions(&self, other: &Views) -> Vec<String> {
        let etag = |v: &Views, w: &Path| v.of(w).etag().to_owned();
        let mut out: Vec<String> = Vec::new();
        for (w, _) in self.sessions.iter().chain(other.sessions.iter()) {
            let name = w.display().to_string();
            if etag(self, w) != etag(other, w) && !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }
}

/// The skills of one daemon: the catalogs in force, their folders and the watcher.
#[derive(Clone)]
pub struct Skills(Arc<Inner>);

struct Inner {
    views: ArcSwap<Views>,
    search: Mutex<Option<Search>>,
    /// The skills of the last scan by folder: a folder whose files did not change is not
    /// read again.
    loaded: Mutex<HashMap<PathBuf, Arc<Skill>>>,
    /// Serialises scans, so two never publish out of order.
    scan_lock: tokio::sync::Mutex<()>,
    watch: Mutex<Option<Watch>>,
    changed: broadcast::Sender<SkillsChanged>,
    /// The workspace-trust gate the workspaces' skills pass.
    trust: Trust,
}

impl Skills {
    pub fn new(trust: Trust) -> Self {
        Skills(Arc::new(Inner {
            trust,
            views: ArcSwap::default(),
            search: Mutex::default(),
            loaded: Mutex::default(),
            scan_lock: tokio::sync::Mutex::new(()),
            watch: Mutex::new(None),
            changed: broadcast::channel(64).0,
        }))
    }

    /// The daemon workspace's catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.0.views.load().base.clone()
    }

    /// Every catalog in force.
    pub fn views(&self) -> Arc<Views> {
        self.0.views.load_full()
    }

    /// What a session in `workspace` is served.
    pub fn catalog_in(&self, workspace: &Path) -> Arc<Catalog> {
        self.0.views.load().of(workspace).clone()
    }

    /// Every catalog's skipped skills, left-out files and clashes, each once.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.0.views.load().all().flat_map(|c| c.problems()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// A receiver of every later `skills_changed`.
    pub fn subscribe(&self) -> broadcast::Receiver<SkillsChanged> {
        self.0.changed.subscribe()
    }

    /// Every folder searched, the daemon workspace's order first.
    pub fn folders(&self) -> Vec<PathBuf> {
        lock(&self.0.search)
            .as_ref()
            .map(Search::folders)
            .unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl Folders for Skills {
    const WHAT: &'static str = "skill folder";

    /// The folders watched: those searched.
    fn watched(&self) -> Vec<PathBuf> {
        self.folders()
    }

    fn watch_slot(&self) -> &Mutex<Option<Watch>> {
        &self.0.watch
    }

    /// Applies a config's folders; scans when they differ from the ones in force.
    async fn configure_with(
        &self,
        cfg: &Config,
        config_path: &Path,
        workspace: &Path,
    ) -> Contribution {
        {
            let mut current = lock(&self.0.search);
            let mut search = Search::of(cfg, config_path, workspace);
            if let Some(old) = current.as_ref() {
                search.session_workspaces = old.session_workspaces.clone();
            }
            if current.as_ref() == Some(&search) {
                return Contribution::default();
            }
            *current = Some(search);
        }
        self.scan().await
    }

    /// Scans the folders again (reading only the skills whose files changed); contributes
    /// the catalogs and `load_skill` (for one registry swap, then `skills_changed`) only
    /// when an etag moved.
    async fn scan(&self) -> Contribution {
        let _one = self.0.scan_lock.lock().await;
        let Some(search) = lock(&self.0.search).clone() else {
            return Contribution::default();
        };
        if let Some(w) = lock(&self.0.watch).as_mut() {
            // A folder may have appeared (or gone): watch what exists now.
            w.set_roots(&search.folders());
        }
        let previous = std::mem::take(&mut *lock(&self.0.loaded));
        let trust = self.0.trust.clone();
        let scan = tokio::task::spawn_blocking(move || {
            let mut scanner = catalog::Scanner::gated(previous, trust);
            let base = Arc::new(scanner.catalog(&search.roots(None)));
            let sessions = search
                .sessions()
                .map(|w| (w.clone(), scanner.catalog(&search.roots(Some(w)))))
                .filter(|(_, c)| c.etag() != base.etag())
                .map(|(w, c)| (w, Arc::new(c)))
                .collect();
            let waiting = scanner.waiting();
            (Views { base, sessions }, scanner.loaded(), waiting)
        });
        let Ok((views, loaded, waiting)) = scan.await else {
            return Contribution::default();
        };
        self.0.trust.report(TrustKind::Skill, waiting);
        *lock(&self.0.loaded) = loaded;
        for e in views.base.problems() {
            tracing::warn!("skill: {e}");
        }
        let old = self.0.views.load_full();
        let workspaces = views.changed_sessions(&old);
        if views.base.etag() == old.base.etag() && workspaces.is_empty() {
            // Problems may differ (a warning fixed) even when the skills did not.
            self.0.views.store(Arc::new(views));
            return Contribution::default();
        }
        let note = SkillsChanged {
            etag: views.base.etag().to_owned(),
            count: views.base.len(),
            workspaces,
        };
        let views = Arc::new(views);
        let load_skill =
            tool::LoadSkill::for_views(views.clone()).map(|t| Arc::new(t) as Arc<dyn Tool>);
        let me = self.clone();
        Contribution {
            tools: vec![(SourceKey::Skills, Some(load_skill.into_iter().collect()))],
            then: vec![Box::new(move || {
                me.0.views.store(views);
                let _ = me.0.changed.send(note);
            })],
        }
    }

    /// Searches the skill folders of these session workspaces too, for the sessions in
    /// them, or no longer (custom tools learn and forget the same workspaces at the same
    /// points). Workspaces already known change nothing.
    async fn change_workspaces(&self, change: Workspaces<'_>) -> Contribution {
        {
            let mut search = lock(&self.0.search);
            let Some(search) = search.as_mut() else {
                return Contribution::default();
            };
            if !change.apply(&mut search.session_workspaces) {
                return Contribution::default();
            }
        }
        self.scan().await
    }
}
