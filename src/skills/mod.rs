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
//! Architecture Invariant: the folders are parsed when they change (the custom tools'
//! watcher, [`crate::custom::watch`]), never per call; a request reads the catalog in
//! force, and a scan whose catalog has the etag of the last one notifies nobody.

pub mod catalog;
pub mod scaffold;
pub mod skill;
pub mod sync;
pub mod tool;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::broadcast;

use crate::config::Config;
use crate::custom::watch::Watch;
use crate::lock;
use crate::protocol::{SkillSource, SkillsChanged};
use crate::registry::{Change, Registry, SourceKey, Tool};

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
    let base = config_path.parent().unwrap_or(Path::new("/"));
    let mut out: Vec<Root> = cfg
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
    if cfg.skills.discover {
        // `$HOME` itself (xdg_dir's fallback is relative to it).
        let home = crate::config::xdg_dir("HOME", "");
        let user_config = crate::config::xdg_dir("XDG_CONFIG_HOME", ".config");
        out.extend(
            [
                (workspace.join(".toolhost"), SkillSource::WorkspaceToolhost),
                (workspace.join(".agents"), SkillSource::WorkspaceAgents),
                (workspace.join(".claude"), SkillSource::WorkspaceClaude),
                (user_config.join("toolhost"), SkillSource::UserToolhost),
                (home.join(".agents"), SkillSource::UserAgents),
                (home.join(".claude"), SkillSource::UserClaude),
            ]
            .map(|(dir, source)| Root {
                path: dir.join("skills"),
                source,
            }),
        );
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|r| seen.insert(r.path.clone()));
    out
}

/// The skills of one daemon: the catalog in force, its folders and its watcher.
#[derive(Clone)]
pub struct Skills(Arc<Inner>);

struct Inner {
    /// Where `load_skill` is published.
    registry: Registry,
    catalog: ArcSwap<Catalog>,
    roots: Mutex<Vec<Root>>,
    /// Serialises scans, so two never publish out of order.
    scan_lock: tokio::sync::Mutex<()>,
    watch: Mutex<Option<Watch>>,
    changed: broadcast::Sender<SkillsChanged>,
}

impl Skills {
    pub fn new(registry: Registry) -> Self {
        Skills(Arc::new(Inner {
            registry,
            catalog: ArcSwap::from_pointee(Catalog::default()),
            roots: Mutex::default(),
            scan_lock: tokio::sync::Mutex::new(()),
            watch: Mutex::new(None),
            changed: broadcast::channel(64).0,
        }))
    }

    /// The catalog in force.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.0.catalog.load_full()
    }

    /// A receiver of every later `skills_changed`.
    pub fn subscribe(&self) -> broadcast::Receiver<SkillsChanged> {
        self.0.changed.subscribe()
    }

    /// Applies a config's folders; scans when they differ from the ones in force.
    /// Returns whether the catalog changed.
    pub async fn configure(&self, cfg: &Config, config_path: &Path, workspace: &Path) -> bool {
        let roots = roots(cfg, config_path, workspace);
        {
            let mut current = lock(&self.0.roots);
            if *current == roots && !current.is_empty() {
                return false;
            }
            *current = roots;
        }
        self.rescan().await
    }

    /// Starts watching the folders; events rescan until `shutdown` fires.
    pub fn watch(
        &self,
        tracker: &tokio_util::task::TaskTracker,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let paths = self.folders();
        match Watch::new(&paths, tx, "skill folder") {
            Ok(w) => *lock(&self.0.watch) = Some(w),
            Err(e) => {
                tracing::warn!("not watching skill folders: {e:#}");
                return;
            }
        }
        let me = self.clone();
        crate::custom::watch::rescan_on_signal(tracker, shutdown, rx, move || {
            let me = me.clone();
            async move {
                me.rescan().await;
            }
        });
    }

    /// The folders searched, in precedence order.
    pub fn folders(&self) -> Vec<PathBuf> {
        lock(&self.0.roots).iter().map(|r| r.path.clone()).collect()
    }

    /// Scans the folders again; publishes (the catalog, and `load_skill` in one registry
    /// swap) and notifies only when the etag moved.
    pub async fn rescan(&self) -> bool {
        let _one = self.0.scan_lock.lock().await;
        let roots = lock(&self.0.roots).clone();
        if let Some(w) = lock(&self.0.watch).as_mut() {
            // A folder may have appeared (or gone): watch what exists now.
            w.set_roots(&roots.iter().map(|r| r.path.clone()).collect::<Vec<_>>());
        }
        let catalog = tokio::task::spawn_blocking(move || Catalog::scan(&roots))
            .await
            .unwrap_or_default();
        for e in catalog.problems() {
            tracing::warn!("skill: {e}");
        }
        if catalog.etag() == self.0.catalog.load().etag() {
            // Problems may differ (a warning fixed) even when the skills did not.
            self.0.catalog.store(Arc::new(catalog));
            return false;
        }
        let note = SkillsChanged {
            etag: catalog.etag().to_owned(),
            count: catalog.len(),
        };
        let catalog = Arc::new(catalog);
        self.0.catalog.store(catalog.clone());
        let load_skill =
            tool::LoadSkill::for_catalog(catalog).map(|t| Arc::new(t) as Arc<dyn Tool>);
        self.0.registry.apply(Change {
            sources: vec![(SourceKey::Skills, Some(load_skill.into_iter().collect()))],
            approval_overrides: None,
        });
        let _ = self.0.changed.send(note);
        true
    }
}
