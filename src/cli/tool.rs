//! `toolhost tool new|check` ([`crate::custom::scaffold`], no daemon needed; tool modules
//! are checked by loading them through a module host of the command's own,
//! [`crate::custom::modules::scaffold`]), then what
//! comes next as the running daemon sees it: a folder it does not search is named, with
//! the command that makes it searched, and a project's tool is named with the approval it
//! waits for — so "try it" is only said of a call that can work.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::render::say;
use super::Globals;
use crate::client::Client;
use crate::custom::scaffold::{self, ToolCommand};
use crate::custom::Root;

/// How long the hint waits for a daemon: the command itself never needs one.
const PROBE: Duration = Duration::from_secs(2);
/// How long the daemon may take to load its failed modules again (each is bounded by the
/// module host's load timeout).
const RETRY: Duration = Duration::from_secs(60);

pub async fn run(g: &Globals, command: ToolCommand) -> ExitCode {
    let config = g.config.clone().unwrap_or_else(crate::config::default_path);
    let mut done = scaffold::cli(command, &config);
    if !done.modules.is_empty() {
        let modules = std::mem::take(&mut done.modules);
        let mut bad = false;
        let mut loaded = Vec::new();
        for checked in crate::custom::modules::scaffold::check(
            modules,
            &done.settings,
            &config,
            &done.workspace,
        )
        .await
        {
            match checked {
                Ok((name, file)) => {
                    say!("ok      {name} ({})", file.display());
                    loaded.push(file);
                }
                Err(problem) => {
                    bad = true;
                    say!("invalid {problem}");
                }
            }
        }
        if bad {
            done.code = ExitCode::from(1);
        }
        retry_in_daemon(g, |e| {
            loaded
                .iter()
                .any(|f| e.starts_with(&format!("{}:", f.display())))
        })
        .await;
    }
    let searched = daemon_folders(g).await;
    let unsearched: Vec<&Root> = match &searched {
        Some(folders) => done
            .folders
            .iter()
            .filter(|r| !folders.iter().any(|f| same_dir(f, &r.path)))
            .collect(),
        None => Vec::new(),
    };
    for root in &unsearched {
        say!(
            "note: the running daemon does not search {} (not its workspace, nor a session's)",
            root.path.display()
        );
        match project_of(root) {
            Some(project) => say!(
                "  to have it searched: toolhost session create --workspace {}",
                project.display()
            ),
            None => say!(
                "  to have it searched: add {} to custom_tools.paths in the daemon's config.json",
                root.path.display()
            ),
        }
    }
    if let Some(name) = &done.created {
        if searched.is_none() {
            say!("start the daemon (toolhost serve) to call it");
        }
        if done.folders.iter().any(|r| r.workspace) {
            say!("a project's tools wait for approval (again after any change to their folder):");
            say!("  toolhost tools approve {name}");
        }
        say!("try it: toolhost invoke {name} --args '{{\"name\": \"you\"}}'");
    }
    done.code
}

/// When the running daemon still has a module error that `concerns` (one for a module
/// that just loaded here, a package installed since), has it try its failed modules again
/// (a config reload does) and says what it has now.
pub(super) async fn retry_in_daemon(g: &Globals, concerns: impl Fn(&str) -> bool) {
    let Ok(client) = Client::connect_first(&g.socket_paths()).await else {
        return;
    };
    let client = client.with_timeout(RETRY);
    let failing = |errors: &[String]| -> Vec<String> {
        errors.iter().filter(|e| concerns(e)).cloned().collect()
    };
    let Ok(before) = client.health().await else {
        return;
    };
    if failing(&before.module_errors).is_empty() {
        return;
    }
    if client.config_reload().await.is_err() {
        return;
    }
    let Ok(after) = client.health().await else {
        return;
    };
    let still = failing(&after.module_errors);
    if still.is_empty() {
        say!("the running daemon tried its failed modules again: they load now");
    } else {
        say!("the running daemon tried its failed modules again; it still reports:");
        for e in still {
            say!("  {e}");
        }
    }
}

/// The folders the daemon on the socket searches, or `None` when none answers.
async fn daemon_folders(g: &Globals) -> Option<Vec<PathBuf>> {
    let client = Client::connect_first(&g.socket_paths())
        .await
        .ok()?
        .with_timeout(PROBE);
    let status = client.config_status().await.ok()?;
    Some(
        status
            .custom_tool_folders
            .into_iter()
            .map(PathBuf::from)
            .collect(),
    )
}

/// The project whose `.toolhost/tools/` `root` is, when it is one.
fn project_of(root: &Root) -> Option<PathBuf> {
    if !root.workspace && !root.path.ends_with(".toolhost/tools") {
        return None;
    }
    let project = root.path.parent()?.parent()?;
    Some(
        project
            .canonicalize()
            .unwrap_or_else(|_| project.to_path_buf()),
    )
}

/// Whether two paths name the same folder (the daemon resolves session workspaces, the
/// CLI's working directory may not be).
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}
