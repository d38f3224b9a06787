//! Sources: what contributes tools, prompts and resources to the host — the built-ins,
//! custom tools (programs and JS/TS modules), skills, commands and MCP servers. Each is one
//! [`Source`]: it starts once, configures from a reloaded config and its
//! [`ConfigDiff`](crate::config::ConfigDiff), rescans on a folder signal, learns session
//! workspaces and forgets them when their last session ends, and *returns* what changed as a [`Contribution`] instead of applying it.
//!
//! Everything a source contributes goes through [`Apply`]: one lock, one registry swap per
//! apply, then what the sources publish besides tools (a skill or command catalog, with its
//! own notification). A reload is one apply of every source's contribution, so it gives at
//! most one `tools_changed`; a folder signal is one apply of that source's.
//!
//! Below the sources, the shared base of the folder sources: the folder [`watch`] and the
//! rules an [`item`] found in a folder is held to. Each source builds on this and on
//! [`crate::front_matter`], never on another source, so they stand side by side.

pub mod item;
pub mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{Config, ConfigDiff};
use crate::protocol::{ApprovalClass, ToolsChanged};
use crate::registry::{Change, Registry, SourceUpdate};

/// What a source starts with (once, at daemon start).
pub struct Start<'a> {
    pub config: &'a Config,
    pub config_path: &'a Path,
    /// The daemon's workspace.
    pub workspace: &'a Path,
    /// The workspaces of the sessions kept in the store: their projects' items come back.
    pub session_workspaces: &'a [PathBuf],
    pub tracker: &'a tokio_util::task::TaskTracker,
    /// Cancelled at shutdown: watches and connections end with it.
    pub shutdown: &'a tokio_util::sync::CancellationToken,
}

/// A reloaded config, and its difference from the one in force.
pub struct Configure<'a> {
    pub config: &'a Config,
    pub diff: &'a ConfigDiff,
    pub config_path: &'a Path,
    pub workspace: &'a Path,
}

/// What one source changes in one apply.
#[derive(Default)]
pub struct Contribution {
    /// Registry sources replaced (`Some`) or removed (`None`), all in the apply's one swap.
    pub tools: Vec<SourceUpdate>,
    /// What the source publishes once the swap is done (its catalog and notification, an
    /// MCP server's own publishing), in order.
    pub then: Vec<Box<dyn FnOnce() + Send>>,
}

impl Contribution {
    /// A contribution of tools only.
    pub fn tools(tools: Vec<SourceUpdate>) -> Contribution {
        Contribution {
            tools,
            then: Vec::new(),
        }
    }

    /// Adds `other`'s changes after this one's.
    pub fn extend(&mut self, other: Contribution) {
        self.tools.extend(other.tools);
        self.then.extend(other.then);
    }
}

/// One kind of component for every contributor of tools, prompts and resources.
#[async_trait::async_trait]
pub trait Source: Send + Sync {
    /// Starts on the config in force (arms a folder watch whose signals go through
    /// `apply`, or starts connections) and returns the first contribution.
    async fn start(&self, cx: &Start<'_>, apply: &Apply) -> Contribution;

    /// Applies a reloaded config.
    async fn configure(&self, cx: &Configure<'_>) -> Contribution;

    /// Looks again at what the source reads (a trust decision changed what may load).
    async fn rescan(&self) -> Contribution {
        Contribution::default()
    }

    /// Learns session workspaces (a session created in a project brings its items).
    async fn add_workspaces(&self, _workspaces: &[PathBuf]) -> Contribution {
        Contribution::default()
    }

    /// Forgets session workspaces (the last session in each ended): their items and
    /// watches go.
    async fn forget_workspaces(&self, _workspaces: &[PathBuf]) -> Contribution {
        Contribution::default()
    }
}

/// A source whose items are files in folders it watches (custom tools and modules, skills,
/// commands). They start, reload, rescan and learn workspaces the same way, so they share
/// one [`Source`] impl and say only what differs.
#[async_trait::async_trait]
pub trait Folders: Clone + Send + Sync + 'static {
    /// What the watcher's log lines call one of its folders ("skill folder").
    const WHAT: &'static str;
    /// The folders to watch now.
    fn watched(&self) -> Vec<PathBuf>;
    /// The source's watch, once armed.
    fn watch_slot(&self) -> &std::sync::Mutex<Option<watch::Watch>>;
    /// Takes the config's folders and settings; scans when they changed.
    async fn configure_with(
        &self,
        config: &Config,
        config_path: &Path,
        workspace: &Path,
    ) -> Contribution;
    /// Scans the folders again, for one swap.
    async fn scan(&self) -> Contribution;
    /// Searches these session workspaces' folders too, or no longer; scans when that
    /// changed what is searched.
    async fn change_workspaces(&self, change: watch::Workspaces<'_>) -> Contribution;
}

#[async_trait::async_trait]
impl<T: Folders> Source for T {
    /// Scans the folders of the config in force (and of the stored sessions' workspaces),
    /// then watches them.
    async fn start(&self, cx: &Start<'_>, apply: &Apply) -> Contribution {
        let mut out = self
            .configure_with(cx.config, cx.config_path, cx.workspace)
            .await;
        let learn = watch::Workspaces::Learn(cx.session_workspaces);
        out.extend(self.change_workspaces(learn).await);
        watch::follow(
            &self.watched(),
            T::WHAT,
            self.watch_slot(),
            cx.tracker,
            cx.shutdown.clone(),
            apply.clone(),
            self.clone(),
            |me: T| async move { me.scan().await },
        );
        out
    }

    async fn configure(&self, cx: &Configure<'_>) -> Contribution {
        self.configure_with(cx.config, cx.config_path, cx.workspace)
            .await
    }

    async fn rescan(&self) -> Contribution {
        self.scan().await
    }

    async fn add_workspaces(&self, workspaces: &[PathBuf]) -> Contribution {
        self.change_workspaces(watch::Workspaces::Learn(workspaces))
            .await
    }

    async fn forget_workspaces(&self, workspaces: &[PathBuf]) -> Contribution {
        self.change_workspaces(watch::Workspaces::Forget(workspaces))
            .await
    }
}

/// The one way contributions reach the registry: one at a time, one swap each.
#[derive(Clone)]
pub struct Apply(Arc<ApplyInner>);

struct ApplyInner {
    registry: Registry,
    /// Held from the sources' scans to the end of their publishing, so two applies never
    /// publish out of order (a stale scan never lands after a newer one).
    lock: tokio::sync::Mutex<()>,
}

/// An apply under way: the sources are scanned while it is held, then [`Self::commit`].
pub struct Applying<'a> {
    _one: tokio::sync::MutexGuard<'a, ()>,
    registry: &'a Registry,
}

impl Apply {
    pub fn new(registry: Registry) -> Apply {
        Apply(Arc::new(ApplyInner {
            registry,
            lock: tokio::sync::Mutex::new(()),
        }))
    }

    /// Waits for the applies before this one.
    pub async fn begin(&self) -> Applying<'_> {
        Applying {
            _one: self.0.lock.lock().await,
            registry: &self.0.registry,
        }
    }

    /// Runs `scan` and commits what it returns, as one apply.
    pub async fn run(
        &self,
        scan: impl std::future::Future<Output = Contribution>,
    ) -> Option<ToolsChanged> {
        let applying = self.begin().await;
        let contribution = scan.await;
        applying.commit(contribution, None)
    }
}

impl Applying<'_> {
    /// One registry swap of every source's tools (and the config's approval overrides when
    /// `Some`), then what the sources publish after it.
    pub fn commit(
        self,
        contribution: Contribution,
        approval_overrides: Option<HashMap<String, ApprovalClass>>,
    ) -> Option<ToolsChanged> {
        let note = if contribution.tools.is_empty() && approval_overrides.is_none() {
            None
        } else {
            self.registry.apply(Change {
                sources: contribution.tools,
                approval_overrides,
            })
        };
        for publish in contribution.then {
            publish();
        }
        note
    }
}
