//! Slash commands: Markdown files that expand into a message, served to every frontend
//! from one place — on the socket (`list_commands`, `get_command`) and, through the MCP
//! facade, as MCP prompts (`mcp/status.md` is the prompt `mcp_status`, which Claude Code
//! offers as `/mcp__toolhost__mcp_status`).
//!
//! - [`command`]: one file — read safely, front matter checked, body expanded;
//! - [`catalog`]: every folder scanned into one immutable [`Catalog`], with the built-in
//!   commands no file overrides;
//! - [`builtin`]: the host's own commands (`tools`, `mcp status`, `mcp reload`, `skills`, `undo`).
//!
//! Search order: config `commands.paths`, then `<workspace>/.toolhost/commands` (and the
//! frontends' `.claude/commands`, `.gemini/commands`), then
//! `$XDG_CONFIG_HOME/toolhost/commands` (and `~/.claude/commands`, `~/.codex/prompts`,
//! `~/.gemini/commands`), then each session workspace's folders, as for custom tools
//! (`commands.discover: false` keeps only the configured folders); the first definition
//! of a name wins, and any file overrides the built-in command of its name. Gemini CLI's
//! commands are TOML files ([`command`]).
//!
//! Architecture Invariant: as for skills, the folders are parsed when they change (the
//! folder sources' watcher, [`crate::source::watch`]), never per call, and a scan whose
//! catalog has the etag of the last one notifies nobody.

pub mod builtin;
pub mod catalog;
pub mod command;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use serde_json::json;
use tokio::sync::broadcast;

use crate::config::Config;
use crate::error::Error;
use crate::lock;
use crate::protocol::{
    CommandSource, CommandsChanged, GetCommandResult, PromptArgument, PromptEntry, PromptMessage,
    TrustKind,
};
use crate::source::watch::{Watch, Workspaces};
use crate::source::{Contribution, Folders};
use crate::trust::Trust;

pub use catalog::Catalog;
pub use command::Command;

/// The `server` of a command's prompt in `list_prompts`: the host itself. A profile
/// selects commands by prompt name (its `tools` globs) or with this name in `servers`.
pub const PROMPT_SERVER: &str = "toolhost";

/// A folder searched for command files, and what kind of place it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    pub source: CommandSource,
}

/// The folders searched, in precedence order; a folder named twice keeps its first place.
pub fn roots(cfg: &Config, config_path: &Path, workspace: &Path) -> Vec<Root> {
    let base = config_path.parent().unwrap_or(Path::new("/"));
    let mut out: Vec<Root> = cfg
        .commands
        .paths
        .iter()
        .map(|p| Root {
            path: base.join(p),
            source: CommandSource::Config,
        })
        .collect();
    if cfg.commands.discover {
        let user_config = crate::config::xdg_dir("XDG_CONFIG_HOME", ".config");
        out.extend(workspace_roots(workspace));
        out.push(Root {
            path: user_config.join("toolhost/commands"),
            source: CommandSource::User,
        });
        out.extend(frontend_user_roots());
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|r| seen.insert(r.path.clone()));
    out
}

/// A workspace's command folders: toolhost's own, then Claude Code's and Gemini CLI's.
fn workspace_roots(workspace: &Path) -> [Root; 3] {
    [
        (".toolhost/commands", CommandSource::Workspace),
        (".claude/commands", CommandSource::WorkspaceClaude),
        (".gemini/commands", CommandSource::WorkspaceGemini),
    ]
    .map(|(rel, source)| Root {
        path: workspace.join(rel),
        source,
    })
}

/// The frontends' own folders of the user's commands (none without `HOME`): Claude Code's
/// `~/.claude/commands`, Codex's `$CODEX_HOME/prompts` and Gemini CLI's
/// `~/.gemini/commands`.
fn frontend_user_roots() -> Vec<Root> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let codex = std::env::var_os("CODEX_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".codex")));
    let mut out = Vec::new();
    if let Some(h) = &home {
        out.push(Root {
            path: h.join(".claude/commands"),
            source: CommandSource::UserClaude,
        });
    }
    if let Some(c) = codex {
        out.push(Root {
            path: c.join("prompts"),
            source: CommandSource::UserCodex,
        });
    }
    if let Some(h) = &home {
        out.push(Root {
            path: h.join(".gemini/commands"),
            source: CommandSource::UserGemini,
        });
    }
    out
}

/// A command as an MCP prompt of the host's `list_prompts`.
pub fn prompt_entry(c: &Command) -> PromptEntry {
    PromptEntry {
        name: c.entry.prompt.clone(),
        title: Some(format!("/{}", c.entry.name)),
        description: c.entry.description.clone(),
        arguments: c
            .entry
            .arguments
            .iter()
            .map(|a| PromptArgument {
                name: a.name.clone(),
                title: None,
                description: a.description.clone(),
                required: a.required,
            })
            .collect(),
        server: PROMPT_SERVER.to_owned(),
    }
}

/// Expands `command` with `arguments` (checked against the ones it declares: -32602 when
/// one is unknown, a required one is missing, or a value is not one of its choices). A
/// built-in command's text is `render`'s (the host's state now, rendered by the caller:
/// this module does not know the host).
pub async fn expand<R, F>(
    command: &Command,
    arguments: &BTreeMap<String, String>,
    render: R,
) -> Result<GetCommandResult, Error>
where
    R: FnOnce(builtin::Builtin) -> F,
    F: std::future::Future<Output = String>,
{
    command.check(arguments).map_err(Error::InvalidParams)?;
    let text = match &command.body {
        command::Body::Builtin(b) => render(*b).await,
        command::Body::Template { text, free_text } => {
            command.substitute(text, *free_text, arguments)
        }
    };
    Ok(GetCommandResult {
        name: command.entry.name.clone(),
        description: command.entry.description.clone(),
        messages: vec![PromptMessage {
            role: "user".into(),
            content: json!({"type": "text", "text": text}),
        }],
    })
}

/// The folders of the config in force, and the session workspaces seen so far.
#[derive(Default)]
struct Roots {
    configured: Vec<Root>,
    discover: bool,
    sessions: Vec<PathBuf>,
}

impl Roots {
    /// Every folder searched, in precedence order: a session workspace's comes last.
    fn all(&self) -> Vec<Root> {
        let mut out = self.configured.clone();
        if self.discover {
            for w in &self.sessions {
                for root in workspace_roots(w) {
                    if !out.iter().any(|r| r.path == root.path) {
                        out.push(root);
                    }
                }
            }
        }
        out
    }
}

/// The commands of one daemon: the catalog in force, its folders and its watcher.
#[derive(Clone)]
pub struct Commands(Arc<Inner>);

struct Inner {
    catalog: ArcSwap<Catalog>,
    roots: Mutex<Roots>,
    /// Serialises scans, so two never publish out of order.
    scan_lock: tokio::sync::Mutex<()>,
    watch: Mutex<Option<Watch>>,
    changed: broadcast::Sender<CommandsChanged>,
    /// The workspace-trust gate the workspaces' command files pass.
    trust: Trust,
}

impl Commands {
    pub fn new(trust: Trust) -> Self {
        Commands(Arc::new(Inner {
            trust,
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

    /// A receiver of every later `commands_changed`.
    pub fn subscribe(&self) -> broadcast::Receiver<CommandsChanged> {
        self.0.changed.subscribe()
    }

    /// The folders searched, in precedence order.
    pub fn folders(&self) -> Vec<PathBuf> {
        lock(&self.0.roots)
            .all()
            .into_iter()
            .map(|r| r.path)
            .collect()
    }
}

#[async_trait::async_trait]
impl Folders for Commands {
    const WHAT: &'static str = "command folder";

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
        let roots = roots(cfg, config_path, workspace);
        {
            let mut current = lock(&self.0.roots);
            let discover = cfg.commands.discover;
            if current.configured == roots && current.discover == discover && !roots.is_empty() {
                return Contribution::default();
            }
            current.configured = roots;
            current.discover = discover;
        }
        self.scan().await
    }

    /// Scans the folders again; the catalog is published after the apply's swap, and
    /// notified only when the etag moved.
    async fn scan(&self) -> Contribution {
        let _one = self.0.scan_lock.lock().await;
        let roots = lock(&self.0.roots).all();
        if let Some(w) = lock(&self.0.watch).as_mut() {
            // A folder may have appeared (or gone): watch what exists now.
            w.set_roots(&roots.iter().map(|r| r.path.clone()).collect::<Vec<_>>());
        }
        let trust = self.0.trust.clone();
        let (catalog, waiting) =
            tokio::task::spawn_blocking(move || Catalog::scan(&roots, Some(&trust)))
                .await
                .unwrap_or_default();
        self.0.trust.report(TrustKind::Command, waiting);
        for e in catalog.problems() {
            tracing::warn!("command: {e}");
        }
        let me = self.clone();
        Contribution {
            tools: Vec::new(),
            then: vec![Box::new(move || {
                let moved = catalog.etag() != me.0.catalog.load().etag();
                let note = CommandsChanged {
                    etag: catalog.etag().to_owned(),
                    count: catalog.len(),
                };
                // Stored even when unchanged: the problems may differ (a warning fixed).
                me.0.catalog.store(Arc::new(catalog));
                if moved {
                    let _ = me.0.changed.send(note);
                }
            })],
        }
    }

    /// Adds session workspaces (a session created with one, or kept in the store): their
    /// command folders are searched after the others; or removes them (their last session
    /// ended). Scans when that changed what is searched.
    async fn change_workspaces(&self, change: Workspaces<'_>) -> Contribution {
        {
            let mut current = lock(&self.0.roots);
            let before = current.all();
            // A workspace whose folder is searched already changes nothing.
            if !change.apply(&mut current.sessions) || current.all() == before {
                return Contribution::default();
            }
        }
        self.scan().await
    }
}
