//! `toolhost mcp`: with no subcommand, the host's tools as an MCP server on stdio; with one,
//! managing the daemon's MCP servers (`login|logout` in `login.rs`).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Map;

use super::render::{emit, print_table, say, say_err, wire, Output};
use super::{login, Globals};
use crate::client::{Client, ClientError};
use crate::protocol::McpAddParams;

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// State of every server (or one).
    Status { name: Option<String> },
    /// Add a server: `toolhost mcp add NAME -- COMMAND ARGS…` or `toolhost mcp add NAME --url URL`.
    Add {
        name: String,
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// KEY=VALUE environment for a stdio server (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Remove a server.
    Remove { name: String },
    /// Reconnect one server, or all.
    Reload { name: Option<String> },
    /// Sign in to an HTTP server with OAuth (prints the URL; opens $BROWSER or xdg-open).
    Login { name: String },
    /// Forget a server's OAuth tokens.
    Logout { name: String },
}

/// The flags of `toolhost mcp` as a stdio server.
#[derive(clap::Args, Debug, Default)]
pub struct ServeFlags {
    /// Stdio server: use this host session (created when missing) instead of a new one.
    #[arg(long)]
    session: Option<String>,
    /// Stdio server: serve only what this config profile selects.
    #[arg(long)]
    profile: Option<String>,
    /// Stdio server: the session's workspace when the client sends no roots (default: the
    /// directory this was started in, unless that is `/` or the home directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Stdio server: how long a request waits for a daemon that went away to come back
    /// before it fails naming every socket tried (default 30).
    #[arg(long, value_name = "SECONDS")]
    reconnect_wait: Option<u64>,
}

pub async fn run(
    g: &Globals,
    command: Option<McpCommand>,
    flags: ServeFlags,
) -> Result<ExitCode, ClientError> {
    match command {
        Some(command) => manage(&g.connect().await?, command, g.out).await,
        None => {
            let sockets = g.socket_paths();
            let bridge = Bridge {
                sockets,
                flags,
                log_format: g.log_format,
            };
            bridge.exec_beside();
            bridge.serve().await
        }
    }
}

/// The file name of the small bridge binary `toolhost mcp` runs when it is installed
/// beside `toolhost` (why a binary of its own: `src/bin/toolhost-bridge.rs`).
pub const BRIDGE_BIN: &str = "toolhost-bridge";

/// What the stdio bridge is told: every socket to try, in order (resolved by `toolhost`,
/// so the bridge reads no config), and the flags of `toolhost mcp`.
#[derive(clap::Parser, Debug)]
#[command(
    name = BRIDGE_BIN,
    version,
    about = "The stdio MCP bridge that `toolhost mcp` runs; use `toolhost mcp`"
)]
struct Bridge {
    #[command(flatten)]
    flags: ServeFlags,
    #[arg(long, value_enum, default_value_t)]
    log_format: crate::logging::LogFormat,
    /// The daemon's sockets, tried in order.
    #[arg(last = true, required = true)]
    sockets: Vec<PathBuf>,
}

impl Bridge {
    /// Replaces this process with [`BRIDGE_BIN`] from `toolhost`'s own directory when it is
    /// there (same pid, same stdio, so the frontend sees no difference); returns when it is
    /// not, or cannot be run, and the bridge then runs in this process.
    fn exec_beside(&self) {
        let Some(bin) = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join(BRIDGE_BIN)))
            .filter(|bin| bin.is_file())
        else {
            return;
        };
        let mut cmd = std::process::Command::new(&bin);
        let flags = &self.flags;
        if let Some(s) = &flags.session {
            cmd.arg("--session").arg(s);
        }
        if let Some(p) = &flags.profile {
            cmd.arg("--profile").arg(p);
        }
        if let Some(w) = &flags.workspace {
            cmd.arg("--workspace").arg(w);
        }
        if let Some(secs) = flags.reconnect_wait {
            cmd.arg("--reconnect-wait").arg(secs.to_string());
        }
        // The flag's own spelling, as clap parses it on the other side.
        if let Some(format) = clap::ValueEnum::to_possible_value(&self.log_format) {
            cmd.arg("--log-format").arg(format.get_name());
        }
        cmd.arg("--").args(&self.sockets);
        let e = cmd.exec();
        tracing::debug!(%e, bin = %bin.display(), "cannot run the bridge binary; bridging in this process");
    }

    async fn serve(self) -> Result<ExitCode, ClientError> {
        // A bad `--workspace` is a start error, before anything is served.
        let workspace = match super::workspace::resolve(self.flags.workspace.as_deref()) {
            Ok(w) => w,
            Err(e) => {
                say_err!("toolhost: {e}");
                return Ok(ExitCode::from(2));
            }
        };
        let flags = self.flags;
        let wait = flags.reconnect_wait.map(std::time::Duration::from_secs);
        crate::facade::run_stdio(&self.sockets, flags.session, flags.profile, workspace, wait)
            .await?;
        // A pending stdin read cannot be cancelled: exit rather than wait for it.
        std::process::exit(0)
    }
}

/// `toolhost-bridge`: the stdio bridge as a process of its own, linking only what relaying
/// needs. Started by `toolhost mcp` (which has set up the process as every subcommand does).
pub fn bridge_main() -> ExitCode {
    use clap::Parser;
    let bridge = Bridge::parse();
    super::client_process(bridge.log_format);
    super::bridge_process();
    let runtime = match super::bridge_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async {
        bridge.serve().await.unwrap_or_else(|e| {
            say_err!("toolhost: {e}");
            ExitCode::from(super::exit_code(&e))
        })
    })
}

async fn manage(
    client: &Client,
    command: McpCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    match command {
        McpCommand::Status { name } => {
            let r = client.mcp_status(name.as_deref()).await?;
            if out.json {
                emit(out, &r);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = r
                .servers
                .iter()
                .map(|s| {
                    vec![
                        s.name.clone(),
                        wire(&s.transport),
                        wire(&s.state),
                        format!("tools {}", s.tools),
                        format!("in-flight {}", s.in_flight),
                        format!("queued {}", s.queued),
                        format!("restarts {}", s.restarts),
                        s.last_error
                            .as_deref()
                            .map(|e| format!("error: {e}"))
                            .unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&rows);
        }
        McpCommand::Add {
            name,
            url,
            env,
            command,
        } => {
            let mut server = Map::new();
            match (url, command.split_first()) {
                (Some(url), None) => {
                    server.insert("url".into(), url.into());
                }
                (None, Some((program, args))) => {
                    let mut envs = Map::new();
                    for kv in env {
                        match kv.split_once('=') {
                            Some((k, v)) => {
                                envs.insert(k.to_owned(), v.into());
                            }
                            None => {
                                say_err!("toolhost: --env takes KEY=VALUE, got {kv:?}");
                                return Ok(ExitCode::from(2));
                            }
                        }
                    }
                    server.insert("command".into(), program.as_str().into());
                    server.insert("args".into(), args.into());
                    server.insert("env".into(), envs.into());
                }
                _ => {
                    say_err!("toolhost: give either --url URL or -- COMMAND ARGS…");
                    return Ok(ExitCode::from(2));
                }
            }
            let r = client
                .mcp_add(&McpAddParams {
                    name: name.clone(),
                    server,
                })
                .await?;
            if out.json {
                emit(out, &r);
            } else {
                say!(
                    "added MCP server {name} to {}; the daemon starts it now (toolhost mcp status {name})",
                    config_file(client).await
                );
            }
        }
        McpCommand::Remove { name } => {
            let r = client.mcp_remove(&name).await?;
            if out.json {
                emit(out, &r);
            } else {
                say!(
                    "removed MCP server {name} from {}; the daemon stops it now",
                    config_file(client).await
                );
            }
        }
        McpCommand::Reload { name } => emit(out, &client.mcp_reload(name.as_deref()).await?),
        McpCommand::Login { name } => return login::login(client, &name).await,
        McpCommand::Logout { name } => return login::logout(client, &name).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// The config file the daemon edits, as it names it (for what `mcp add`/`remove` say).
async fn config_file(client: &Client) -> String {
    client
        .config_status()
        .await
        .map_or_else(|_| "the daemon's config.json".to_owned(), |s| s.path)
}
