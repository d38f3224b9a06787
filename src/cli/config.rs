//! `toolhost config check|reload|status`: `check` reads the file itself (no daemon needed);
//! the others ask the running daemon.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;

use super::render::{emit, say, Output};
use super::{success_if, Globals};
use crate::client::ClientError;
use crate::config;
use crate::protocol::ConfigStatusResult;

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate config.json without a daemon (exit 0 when valid, 1 with the errors listed).
    Check,
    #[command(flatten)]
    Daemon(DaemonCommand),
}

/// The subcommands the running daemon answers.
#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Make the daemon re-read config.json now (exit 1 when it was refused).
    Reload,
    /// The daemon's config: file, revision, last error, warnings.
    Status,
}

pub async fn run(g: &Globals, command: ConfigCommand) -> Result<ExitCode, ClientError> {
    match command {
        ConfigCommand::Check => Ok(check(g.config.as_deref(), g.out)),
        ConfigCommand::Daemon(DaemonCommand::Reload) => {
            let r = g.connect().await?.config_reload().await?;
            if g.out.json {
                emit(g.out, &r);
            } else if r.applied {
                say!("applied");
                print_status(&r.status);
            } else {
                say!("not applied: {}", r.error.as_deref().unwrap_or(""));
            }
            Ok(success_if(r.applied))
        }
        ConfigCommand::Daemon(DaemonCommand::Status) => {
            let r = g.connect().await?.config_status().await?;
            if g.out.json {
                emit(g.out, &r);
            } else {
                print_status(&r);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_status(s: &ConfigStatusResult) {
    say!("{} (revision {})", s.path, s.revision);
    if let Some(e) = &s.last_error {
        say!("last error: {e}");
    }
    for w in &s.warnings {
        say!("warning: {w}");
    }
    for e in &s.custom_tool_errors {
        say!("custom tool error: {e}");
    }
    match &s.watching {
        Some(dir) => say!("watching {dir} for edits"),
        None => say!("not watching for edits (SIGHUP or `toolhost config reload` reload it)"),
    }
}

/// Loads the config as `serve` would and reports what it found.
/// Checks the file as the daemon loads it, then runs the start-up checks `serve` would
/// run on it ([`crate::daemon::preflight`]) and names those that need a running daemon.
fn check(path: Option<&Path>, out: Output) -> ExitCode {
    let named = config::is_named(path);
    let path = path.map_or_else(config::default_path, Path::to_path_buf);
    let loaded = if named {
        config::load_named(&path)
    } else {
        config::load(&path)
    };
    let startup = loaded.as_ref().ok().map(|l| {
        let opts = crate::daemon::ServeOptions {
            config: Some(path.clone()),
            ..Default::default()
        };
        crate::daemon::preflight(&opts, &l.config)
    });
    let (mut problems, mut warnings) = match &loaded {
        Ok(l) => (Vec::new(), l.warnings.clone()),
        Err(e) => (
            e.problems.iter().map(ToString::to_string).collect(),
            e.warnings.clone(),
        ),
    };
    let unchecked = startup.as_ref().map_or(&[][..], |s| &s.unchecked[..]);
    if let Some(s) = &startup {
        problems.extend(s.problems.iter().cloned());
        warnings.extend(s.warnings.iter().cloned());
    }
    let valid = loaded.is_ok() && problems.is_empty();
    let exists = config::file_state(&path) != config::FileState::Missing;
    if out.json {
        emit(
            out,
            &serde_json::json!({
                "path": path.display().to_string(),
                "exists": exists,
                "valid": valid,
                "problems": problems,
                "warnings": warnings,
                "unchecked": unchecked,
            }),
        );
        return success_if(valid);
    }
    for w in &warnings {
        say!("warning: {w}");
    }
    match &loaded {
        Ok(_) if valid && !exists => say!(
            "{}: does not exist; the daemon runs on the defaults (toolhost where config)",
            path.display()
        ),
        Ok(_) if valid => say!("{}: valid", path.display()),
        Ok(_) => {
            say!("{}: serve would refuse to start:", path.display());
            for p in &problems {
                say!("  {p}");
            }
        }
        Err(e) => {
            say!("{}: invalid", path.display());
            say!("{e:#}");
        }
    }
    if !unchecked.is_empty() {
        say!("not checked without starting the daemon:");
        for u in unchecked {
            say!("  {u}");
        }
    }
    success_if(valid)
}
