//! The one reload path: the file watcher, SIGHUP, `config.reload` and `mcp.add/remove` all
//! end in [`reload`], which reads config.json and applies it to the host as a diff: load →
//! [`ConfigDiff`](config::ConfigDiff) → every [`Source`] configures from it → one apply (one
//! registry swap, at most one `tools_changed`). Starting the sources ([`start`]), a trust
//! decision ([`rescan`]) and a workspace gaining its first session or losing its last
//! ([`place_sessions`]) are applies of every source too; a folder signal is an apply of its
//! source's (`source::watch`).
//!
//! Architecture Invariant: an invalid config never replaces a valid one, a config file that
//! disappears keeps the last good config, and unchanged MCP servers are never touched.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{self, ConfigErrorKind};
use crate::error::Error;
use crate::host::Host;
use crate::mcp::McpManager;
use crate::now_ms;
use crate::protocol::{ConfigReloadResult, ConfigStatusResult};
use crate::registry::SourceKey;
use crate::session::Holder;
use crate::source::{Apply, Configure, Contribution, Source, Start};

/// How long a reload waits for new or restarted MCP servers before applying the rest of
/// the config: servers up by then land in the reload's one registry swap; one that hangs
/// in its handshake (up to its `startup_timeout_ms`) joins later on its own.
const JOIN_WAIT: Duration = Duration::from_secs(2);

/// The environment a config gives the daemon's children (its top-level `env` and
/// `env_passthrough`): set at start and by every reload.
pub fn child_env(cfg: &config::Config) -> crate::process::child_env::Policy {
    crate::process::child_env::Policy::new(
        cfg.env.clone(),
        config::env_patterns(&cfg.env_passthrough),
    )
}

/// What `config.status` reports.
pub fn status(host: &Host) -> ConfigStatusResult {
    let s = host.config_state();
    ConfigStatusResult {
        path: host.config_path().display().to_string(),
        loaded_at: s.loaded_at,
        revision: s.revision,
        last_error: s.last_error,
        warnings: s
            .warnings
            .into_iter()
            .chain(unknown_tool_names(host))
            .collect(),
        custom_tool_errors: host.custom().errors(),
        custom_tool_folders: host
            .custom()
            .folders()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        watching: s.watching.now().map(|d| d.display().to_string()),
        tool_manifest: host.config().facade.tool_manifest,
    }
}

/// `approval.tools` entries that name no tool, and a server's `include_tools`/`exclude_tools`
/// entries that name none of its tools, with the likeliest meant one: such an entry
/// is silently without effect. Judged only while every MCP server is ready, since a server
/// still connecting has not listed its tools yet.
fn unknown_tool_names(host: &Host) -> Vec<String> {
    let mcp = host.mcp().counts();
    if mcp.connecting > 0 || mcp.failed > 0 {
        return Vec::new();
    }
    let snapshot = host.registry().snapshot();
    let known: Vec<&str> = snapshot.names().collect();
    let cfg = host.config();
    let mut unknown: Vec<&str> = cfg
        .approval
        .tools
        .keys()
        .map(String::as_str)
        .filter(|n| !known.contains(n))
        .collect();
    unknown.sort_unstable();
    let mut warnings: Vec<String> = unknown
        .into_iter()
        .map(|name| {
            let hint = did_you_mean(name, &known);
            format!("approval.tools.{name}: no tool has this name{hint}; the entry has no effect")
        })
        .collect();
    // A server's include/exclude lists name its own tools (before the `mcp_<server>_` prefix).
    for (server, sc) in &cfg.mcp_servers {
        let Some(live) = host.mcp().get(server) else {
            continue;
        };
        let remote = live.remote_tool_names();
        let remote: Vec<&str> = remote.iter().map(String::as_str).collect();
        for (key, names) in [
            ("include_tools", &sc.include_tools),
            ("exclude_tools", &sc.exclude_tools),
        ] {
            for name in names.iter().filter(|n| !remote.contains(&n.as_str())) {
                let hint = did_you_mean(name, &remote);
                warnings.push(format!(
                    "mcp_servers.{server}.{key}: {name:?} is no tool of {server}{hint}; the entry has no effect"
                ));
            }
        }
    }
    warnings
}

/// ` (did you mean "x"?)` when one of `known` is close to `name`, else nothing.
fn did_you_mean(name: &str, known: &[&str]) -> String {
    config::suggest(name, known.to_vec())
        .map(|s| format!(" (did you mean {s:?}?)"))
        .unwrap_or_default()
}

/// Starts every source once, on the config in force (daemon start): their first
/// contributions in one apply, their folder watches and MCP connections from then on. The
/// workspaces of the sessions kept in the store bring their projects' items back.
pub async fn start(host: &Host) {
    let cfg = host.config();
    let stored = crate::session::workspaces(host.sessions()).await;
    let applying = host.apply().begin().await;
    let placed = stored
        .into_iter()
        .map(|(id, w)| (Holder::Session(id), Some(w)))
        .collect();
    let workspaces = crate::lock(host.session_workspaces()).set(placed).learn;
    let cx = Start {
        config: &cfg,
        config_path: host.config_path(),
        workspace: host.workspace(),
        session_workspaces: &workspaces,
        tracker: host.tracker(),
        shutdown: host.shutdown_token(),
    };
    let mut all = Contribution::default();
    for source in host.sources() {
        all.extend(source.start(&cx, host.apply()).await);
    }
    applying.commit(all, None);
}

/// Every source looks again (a trust decision changed what may load), in one apply.
pub async fn rescan(host: &Host) {
    host.apply()
        .run(async {
            let mut all = Contribution::default();
            for source in host.sources() {
                all.extend(source.rescan().await);
            }
            all
        })
        .await;
}

/// Puts sessions (or a `session.create` under way) in their workspaces, `None` for one
/// that ended ([`SessionWorkspaces::set`](crate::session::SessionWorkspaces::set)): every
/// source forgets the workspaces that lost their last session (their tools, skills,
/// commands and watches go) and learns those that gained their first (their items come),
/// in one apply. Done before the session is answered, so its view and the caller's next
/// listings show what is there. Under the apply's lock, so the sources learn and forget
/// in the order the sessions came and went.
///
/// What was kept for a session that ended or a tool that went goes with it: the guards'
/// counters of the session and what they remembered of the tools, the call counts of the
/// tools (unless a scraper has them to read once more).
pub async fn place_sessions(host: &Host, changes: Vec<(Holder, Option<PathBuf>)>) {
    let ended: Vec<String> = changes
        .iter()
        .filter_map(|(holder, to)| match (holder, to) {
            (Holder::Session(id), None) => Some(id.clone()),
            _ => None,
        })
        .collect();
    let removed = host
        .apply()
        .run(async {
            let moved = crate::lock(host.session_workspaces()).set(changes);
            let mut all = Contribution::default();
            if !moved.forget.is_empty() {
                for source in host.sources() {
                    all.extend(source.forget_workspaces(&moved.forget).await);
                }
                host.checkpoints().close(&moved.forget);
            }
            if !moved.learn.is_empty() {
                for source in host.sources() {
                    all.extend(source.add_workspaces(&moved.learn).await);
                }
            }
            all
        })
        .await
        .map(|note| note.removed)
        .unwrap_or_default();
    host.guards().forget(&ended, &removed);
    host.metrics().forget_tools(&removed);
}

/// Reloads when the watched file's content differs from the last file read.
pub async fn reload_if_changed(host: &Host) {
    let path = host.config_path().to_path_buf();
    let hash = tokio::task::spawn_blocking(move || config::ContentHash::of_file(&path)).await;
    let last = host.config_state().last_read;
    match hash {
        Ok(Ok(h)) if Some(h) == last => {}
        _ => {
            reload(host).await;
        }
    }
}

/// Adds (`Some`) or removes (`None`) an MCP server by editing config.json atomically, then
/// applies the file through the normal reload path (the watcher's own event for the same
/// content is then skipped), so file and daemon never disagree.
pub async fn edit_mcp_server(
    host: &Host,
    name: String,
    server: Option<serde_json::Map<String, serde_json::Value>>,
) -> crate::error::Result<bool> {
    let path = host.config_path().to_path_buf();
    let edit = tokio::task::spawn_blocking(move || match server {
        Some(block) => config::add_mcp_server(&path, &name, &block).map(|()| true),
        None => config::remove_mcp_server(&path, &name),
    })
    .await
    .map_err(Error::server)?;
    let changed = edit.map_err(|e| match e.kind {
        ConfigErrorKind::Io => Error::Server(e.to_string()),
        _ => Error::InvalidParams(e.to_string()),
    })?;
    if changed {
        let h = host.clone();
        host.tracker().spawn(async move { reload(&h).await });
    }
    Ok(changed)
}

/// Records a config that was not applied; the next read applies whatever it finds.
fn refuse(host: &Host, error: String) -> ConfigReloadResult {
    tracing::error!("config not applied: {error}");
    host.update_config_state(|s| {
        s.last_error = Some(error.clone());
        // After an error, the next good file must apply even when identical to the live one.
        s.last_read = None;
    });
    ConfigReloadResult {
        applied: false,
        error: Some(error),
        status: status(host),
    }
}

/// Reads config.json and applies it as a diff. A bad or vanished file leaves the live
/// config in place and is reported until the next good file.
pub async fn reload(host: &Host) -> ConfigReloadResult {
    let r = apply_file(host).await;
    host.metrics().reload(r.applied);
    r
}

async fn apply_file(host: &Host) -> ConfigReloadResult {
    let _one_at_a_time = host.reload_guard().await;
    let path = host.config_path();
    // A file that disappears (deleted, or a dangling symlink) is not "all defaults": that
    // would stop every server. Keep the last good config — unless it never came from a file.
    let present = match config::file_state(path) {
        config::FileState::Missing if host.config_state().from_file => {
            return refuse(
                host,
                format!(
                    "config file {} was deleted; keeping the last good config",
                    path.display()
                ),
            );
        }
        config::FileState::NotAFile(what) => {
            return refuse(
                host,
                format!(
                    "config path {} {what}; keeping the last good config",
                    path.display()
                ),
            );
        }
        config::FileState::Missing => false,
        config::FileState::Present | config::FileState::Inaccessible => true,
    };
    let loaded = match config::load(path) {
        Ok(l) => l,
        Err(e) => return refuse(host, e.to_string()),
    };
    let old = host.config();
    let new = host.hide_own_files(loaded.config);
    let mut warnings = loaded.warnings;
    let diff = config::diff(&old, &new);
    // Against the start-up values, which the daemon still runs on: a second reload must not
    // forget that a listener setting waits for a restart.
    warnings.extend(config::diff(host.started_with(), &new).needs_restart);

    let cx = Configure {
        config: &new,
        diff: &diff,
        config_path: host.config_path(),
        workspace: host.workspace(),
    };
    let applying = host.apply().begin().await;
    let mut all = Contribution::default();
    for source in host.sources() {
        all.extend(source.configure(&cx).await);
    }
    let approval_overrides = new.approval.tools.clone();
    host.processes().set_env(child_env(&new));
    host.registry()
        .set_catalog_policy(crate::catalog::Policy::from_config(&new));
    // Rules by name keep their counters (proto-docs/guards.md).
    host.guards().configure(&new.guards);
    host.set_config(new);
    let note = applying.commit(all, Some(approval_overrides));
    host.update_config_state(|s| {
        s.loaded_at = now_ms();
        s.revision += 1;
        s.last_error = None;
        s.warnings = warnings;
        s.last_read = Some(loaded.content_hash);
        s.from_file = present;
    });
    tracing::info!(changed = note.is_some(), "config applied");
    ConfigReloadResult {
        applied: true,
        error: None,
        status: status(host),
    }
}

/// The MCP servers as a source: started once with the daemon, each publishing its tools as
/// it connects; a reload touches only the servers its diff names.
#[async_trait::async_trait]
impl Source for McpManager {
    async fn start(&self, cx: &Start<'_>, _apply: &Apply) -> Contribution {
        for (name, cfg) in &cx.config.mcp_servers {
            McpManager::start(self, name, cfg.clone(), true);
        }
        Contribution::default()
    }

    /// Filters and approval classes apply to the live connection; unchanged servers are
    /// not touched at all. New and restarted servers up within [`JOIN_WAIT`] land in the
    /// apply's swap; the others publish on their own once it is done.
    async fn configure(&self, cx: &Configure<'_>) -> Contribution {
        let mut tools = Vec::new();
        for name in &cx.diff.servers_updated {
            if let (Some(server), Some(cfg)) = (self.get(name), cx.config.mcp_servers.get(name)) {
                server.update_config(cfg.clone());
                tools.push((SourceKey::Mcp(name.clone()), Some(server.tools())));
            }
        }
        let started: Vec<_> = cx
            .diff
            .servers_added
            .iter()
            .chain(&cx.diff.servers_restart)
            .filter_map(|name| {
                Some(McpManager::start(
                    self,
                    name,
                    cx.config.mcp_servers.get(name)?.clone(),
                    false,
                ))
            })
            .collect();
        for name in &cx.diff.servers_removed {
            self.remove(name);
            tools.push((SourceKey::Mcp(name.clone()), None));
        }
        let (joined_tools, joined) = McpManager::collect_tools(&started, JOIN_WAIT).await;
        tools.extend(joined_tools);
        Contribution {
            tools,
            then: vec![Box::new(move || {
                for (s, joined) in started.iter().zip(joined) {
                    s.start_publishing();
                    if !joined {
                        // Still starting: it joins with its own tools_changed when ready.
                        // Publishing now also covers one that became ready between the
                        // wait and the swap.
                        tracing::info!(server = %s.name(), "MCP server still starting; applied the rest of the config without it");
                        s.publish_tools();
                    }
                }
            })],
        }
    }
}
