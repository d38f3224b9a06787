//! The one reload path: the file watcher, SIGHUP, `config.reload` and `mcp.add/remove` all
//! end in [`reload`], which reads config.json and applies it to the host as a diff.
//!
//! Architecture Invariant: an invalid config never replaces a valid one, a config file that
//! disappears keeps the last good config, and unchanged MCP servers are never touched.

use std::time::Duration;

use crate::config::{self, ConfigErrorKind};
use crate::error::Error;
use crate::host::Host;
use crate::mcp::McpManager;
use crate::now_ms;
use crate::protocol::{ConfigReloadResult, ConfigStatusResult};
use crate::registry::{Change, SourceKey};

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

/// Starts every configured MCP server; their tools arrive as each connects.
pub fn start_servers(host: &Host) {
    for (name, cfg) in &host.config().mcp_servers {
        host.mcp().start(name, cfg.clone(), true);
    }
}

/// Discovers the custom tools of the config in force and starts watching their folders.
pub async fn start_custom_tools(host: &Host) {
    let cfg = host.config();
    if let Some(update) = host
        .custom()
        .configure(&cfg, host.config_path(), host.workspace())
        .await
    {
        host.registry().apply(Change {
            sources: vec![update],
            approval_overrides: None,
        });
    }
    host.custom()
        .watch(host.tracker(), host.shutdown_token().clone());
    // The workspaces of the sessions kept in the store bring their projects' tools back.
    let workspaces = crate::session::workspaces(host.sessions()).await;
    host.custom()
        .add_session_workspaces(&workspaces, cfg.custom_tools.discover)
        .await;
}

/// Scans the skill folders of the config in force and starts watching them; the
/// workspaces of the sessions kept in the store bring their projects' skills back.
pub async fn start_skills(host: &Host) {
    host.skills()
        .configure(&host.config(), host.config_path(), host.workspace())
        .await;
    let workspaces = crate::session::workspaces(host.sessions()).await;
    host.skills().add_session_workspaces(&workspaces).await;
    host.skills()
        .watch(host.tracker(), host.shutdown_token().clone());
}

/// Scans the command folders of the config in force and starts watching them.
pub async fn start_commands(host: &Host) {
    host.commands()
        .configure(&host.config(), host.config_path(), host.workspace())
        .await;
    host.commands()
        .watch(host.tracker(), host.shutdown_token().clone());
    let workspaces = crate::session::workspaces(host.sessions()).await;
    host.commands().add_session_workspaces(&workspaces).await;
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
    let new = loaded.config;
    let mut warnings = loaded.warnings;
    let diff = config::diff(&old, &new);
    // Against the start-up values, which the daemon still runs on: a second reload must not
    // forget that a listener setting waits for a restart.
    warnings.extend(config::diff(host.started_with(), &new).needs_restart);

    let mut sources = Vec::new();
    // Filters and approval classes apply to the live connection; unchanged servers are not
    // touched at all.
    for name in &diff.servers_updated {
        if let (Some(server), Some(cfg)) = (host.mcp().get(name), new.mcp_servers.get(name)) {
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
                host.mcp()
                    .start(name, new.mcp_servers.get(name)?.clone(), false),
            )
        })
        .collect();
    for name in &diff.servers_removed {
        host.mcp().remove(name);
        sources.push((SourceKey::Mcp(name.clone()), None));
    }
    // The code tools come and go with code mode being on for some view, the checkpoint
    // tools with checkpoints.
    if old.code_mode_anywhere() != new.code_mode_anywhere()
        || crate::checkpoint::anywhere(&old) != crate::checkpoint::anywhere(&new)
    {
        sources.push((SourceKey::Builtin, Some(host.builtins(&new))));
    }
    let (tools, joined) = McpManager::collect_tools(&started, JOIN_WAIT).await;
    sources.extend(tools);
    // Providers are read by each call from here on; new folders are scanned into this swap.
    if let Some(update) = host
        .custom()
        .configure(&new, host.config_path(), host.workspace())
        .await
    {
        sources.push(update);
    }
    host.skills()
        .configure(&new, host.config_path(), host.workspace())
        .await;
    host.commands()
        .configure(&new, host.config_path(), host.workspace())
        .await;
    let approval_overrides = new.approval.tools.clone();
    host.processes().set_env(child_env(&new));
    host.registry()
        .set_catalog_policy(crate::catalog::Policy::from_config(&new));
    // Rules by name keep their counters (proto-docs/guards.md).
    host.guards().configure(&new.guards);
    host.set_config(new);
    let note = host.registry().apply(Change {
        sources,
        approval_overrides: Some(approval_overrides),
    });
    for (s, joined) in started.iter().zip(joined) {
        s.start_publishing();
        if !joined {
            // Still starting: it joins with its own tools_changed when ready. Publishing
            // now also covers one that became ready between the wait and the swap.
            tracing::info!(server = %s.name(), "MCP server still starting; applied the rest of the config without it");
            s.publish_tools();
        }
    }
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
