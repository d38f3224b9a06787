//! The command line: `toolhost serve` runs the daemon; every other subcommand is a thin
//! client of its socket.
//!
//! Every client subcommand speaks through [`crate::client::Client`] with the typed
//! [`crate::protocol`] shapes; `call` alone passes raw JSON through. Each family of
//! subcommands has its own file; [`run`] is the one place a parsed command is dispatched.
//!
//! Exit codes: 0 success; 1 the call ran but failed (a tool's `ok:false`, a JSON-RPC error,
//! an invalid config for `config check`); 2 usage errors (bad flags or JSON); 3 no daemon
//! answering on the socket, the connection broke, or no answer in time.

mod approvals;
mod calls;
mod config;
mod doctor;
mod fleet;
mod guards;
mod import;
mod invoke;
mod locate;
mod login;
mod mcp;
mod modules;
mod render;
mod session;
mod status;
mod tool;
mod tools;
mod trust;
mod ui;
mod undo;
mod workspace;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{Map, Value};

use crate::client::{self, Client, ClientError};
use render::{say_err, Output};

#[derive(Parser, Debug)]
#[command(
    name = "toolhost",
    version,
    about = "One shared tool host for AI coding agents"
)]
pub struct Cli {
    /// The daemon's Unix socket (default: TOOLHOST_SOCKET, config listen.socket, then
    /// $XDG_RUNTIME_DIR/toolhost/toolhost.sock or /tmp/toolhost-<uid>/toolhost.sock).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// config.json (default: TOOLHOST_CONFIG, then $XDG_CONFIG_HOME/toolhost/config.json).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
    /// Longest wait for the daemon's answer, in seconds (default 150); a call given a
    /// longer `--timeout-ms` is waited for that long plus 5 s. No answer in time: exit 3.
    #[arg(long, global = true, value_name = "SECONDS", value_parser = parse_timeout)]
    timeout: Option<Duration>,
    /// Log lines as text or JSON (default: TOOLHOST_LOG_FORMAT, else text).
    #[arg(
        long,
        global = true,
        env = "TOOLHOST_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: crate::logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the daemon in the foreground.
    Serve {
        /// Workspace root for built-in tools (default: config `workspace`, else the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Where sessions and spilled outputs live (default: config `data_dir`, else XDG state).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// List the live tools (or review quarantined ones: `tools diff|approve NAME`).
    Tools {
        #[command(subcommand)]
        command: Option<tools::ToolsCommand>,
        /// Include hidden tools.
        #[arg(long)]
        all: bool,
    },
    /// Call a tool.
    Invoke(invoke::InvokeArgs),
    /// Cancel a call in flight by its call id.
    Cancel { call_id: String },
    /// Everything at a glance: servers, custom tools, config, sessions, calls in flight
    /// (exit 1 while degraded).
    Status {
        /// Redraw every SECONDS until interrupted.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
    },
    /// The calls waiting for an operator's approval; `approvals allow|deny ID` decides one,
    /// `--follow` prints the queue's events as they come.
    Approvals(approvals::ApprovalsArgs),
    /// What the workspaces bring and wait for your trust (tools, modules, skills,
    /// commands); `trust DIR` trusts a folder, `trust approve PATH` one item.
    Trust(trust::TrustArgs),
    /// Finished calls from the audit log (no daemon needed).
    Calls(calls::CallsArgs),
    /// Undo the last change in the current directory's workspace, whichever frontend made
    /// it (shows the diff and asks first; `--yes` does not ask).
    Undo(undo::UndoArgs),
    /// The current directory's workspace timeline: each change, by which tool and frontend.
    Checkpoints(undo::CheckpointsArgs),
    /// The guards' rules, their counters and refusals; `guards reset RULE` clears one.
    Guards {
        #[command(subcommand)]
        command: Option<guards::GuardsCommand>,
    },
    /// Fleet mode: every member of the fleet, live or lost, and the shared database's
    /// health (exit 1 while it is unreachable or a member is lost); `fleet token …`: the
    /// users' bearer tokens.
    Fleet {
        #[command(subcommand)]
        command: Option<fleet::FleetCommand>,
    },
    /// Show the daemon's health.
    Health,
    /// Send a raw JSON-RPC call and print its result.
    Call {
        method: String,
        /// Params as a JSON object.
        params: Option<String>,
        /// The workspace of an `invoke` without `session_id` and of a `session.create`
        /// without `workspace` (default: the current directory, unless it is `/` or the
        /// home directory; then the daemon's).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Check a config file, or see and reload the daemon's.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Manage persisted sessions.
    Session {
        #[command(subcommand)]
        command: session::SessionCommand,
    },
    /// Serve the host's tools as an MCP server on stdio (no subcommand), or manage MCP
    /// servers (edits config.json; the daemon applies the change).
    Mcp {
        #[command(subcommand)]
        command: Option<mcp::McpCommand>,
        #[command(flatten)]
        flags: mcp::ServeFlags,
    },
    /// Show the socket this client uses, whether a daemon answers there, the config file
    /// and the data directory (exit 3 when no daemon answers).
    Where {
        /// Print only this path, for scripts: `SOCK=$(toolhost where socket)`.
        only: Option<locate::Only>,
    },
    /// Start each frontend's toolhost entry as that frontend would (its environment, its
    /// directory) and say whether it reaches this daemon, in which workspace, with how
    /// many tools, and what to change if not (exit 1 when one does not).
    Doctor(doctor::DoctorArgs),
    /// Print a link to the operator's page in the browser (one-time login code).
    Ui {
        /// Open the link in the browser too ($BROWSER, else xdg-open).
        #[arg(long)]
        open: bool,
    },
    /// Bring the MCP servers of other frontends (Claude Code, Claude Desktop, Cursor,
    /// VS Code, Codex, Gemini CLI) into config.json: show the plan, `--apply` it, `--rewrite`
    /// the frontends to use toolhost.
    Import(import::ImportArgs),
    /// The JS/TS tool modules' host: `modules setup` installs its own pinned zod and
    /// TypeBox once, so modules that use `pi.zod` load with nothing installed next to them.
    Modules {
        #[command(subcommand)]
        command: modules::ModulesCommand,
    },
    /// Create and check custom tools (no daemon needed).
    Tool {
        #[command(subcommand)]
        command: crate::custom::scaffold::ToolCommand,
    },
    /// List, check and create Agent Skills (no daemon needed); `skills` alone lists them.
    Skills {
        #[command(subcommand)]
        command: Option<crate::skills::scaffold::SkillsCommand>,
    },
}

/// The global flags every subcommand may use: where the daemon and the config are, how to
/// print, how long to wait.
struct Globals {
    socket: Option<PathBuf>,
    config: Option<PathBuf>,
    out: Output,
    timeout: Option<Duration>,
    log_format: crate::logging::LogFormat,
}

impl Globals {
    /// The daemon's socket as `--socket`, the environment and the config say: every one
    /// to try, in order (one unless the default locations are used).
    fn socket_paths(&self) -> Vec<PathBuf> {
        client::default_sockets(self.socket.as_deref(), self.config.as_deref())
    }

    /// A client of the daemon, waiting at most `--timeout` for each answer.
    async fn connect(&self) -> Result<Client, ClientError> {
        let wait = self.timeout.unwrap_or(client::DEFAULT_TIMEOUT);
        Ok(Client::connect_first(&self.socket_paths())
            .await?
            .with_timeout(wait))
    }
}

/// The command line, parsed once, first thing: the daemon may execute itself again before
/// the process is prepared (see `main.rs`); a bad one is reported by [`main`].
pub struct Args(Result<Cli, clap::Error>);

/// Parses the command line (without exiting on an error: [`main`] reports it).
pub fn parse() -> Args {
    Args(Cli::try_parse())
}

impl Args {
    /// Whether this command line runs the daemon (`toolhost serve`).
    pub fn is_daemon(&self) -> bool {
        self.0
            .as_ref()
            .is_ok_and(|cli| matches!(cli.command, Command::Serve { .. }))
    }
}

pub fn main(args: Args) -> ExitCode {
    let cli = args.0.unwrap_or_else(|e| e.exit());
    let daemon = matches!(cli.command, Command::Serve { .. });
    if daemon {
        crate::logging::init(true, cli.log_format);
    } else {
        client_process(cli.log_format);
    }
    if matches!(cli.command, Command::Mcp { command: None, .. }) {
        bridge_process();
    }
    // The stdio bridge (`toolhost mcp`, one per frontend) runs on one thread: see
    // `bridge_runtime`.
    let runtime = if matches!(cli.command, Command::Mcp { command: None, .. }) {
        bridge_runtime()
    } else {
        daemon_runtime()
    };
    match runtime {
        Ok(r) => r.block_on(run(cli)),
        Err(code) => code,
    }
}

pub use mcp::bridge_main;

/// The stdio bridge outlives the daemon: a write to a daemon that was killed is an error
/// to handle (it reconnects), not a SIGPIPE that ends the frontend's server.
fn bridge_process() {
    // SAFETY: set before any thread exists; SIG_IGN needs no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// What every client process sets up before it connects (the stdio bridge too): its log,
/// and SIGPIPE.
fn client_process(format: crate::logging::LogFormat) {
    crate::logging::init(false, format);
    // A client's reader that goes away (`toolhost tools | head -1`) ends it quietly, as
    // it does any Unix filter, instead of a panic in `println!` (Rust ignores SIGPIPE).
    // The daemon keeps ignoring it: a vanished client must never kill it.
    // SAFETY: set before any thread exists; SIG_DFL needs no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The stdio bridge's runtime: one thread, since it relays one connection each way and
/// every further thread costs each bridge its stack and a malloc arena (see
/// `benches/sharing.rs`, the bridge's private memory).
fn bridge_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    built(&mut tokio::runtime::Builder::new_current_thread())
}

/// Every other subcommand's runtime, the daemon's included: [`workers`] threads. One thread
/// is tokio's single-threaded scheduler: with nothing to steal work from, its wake-ups and
/// spawns cost less (about 9 % of the daemon's CPU per relayed MCP call on 2 cores).
fn daemon_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    match workers() {
        Ok(1) => built(&mut tokio::runtime::Builder::new_current_thread()),
        Ok(n) => built(tokio::runtime::Builder::new_multi_thread().worker_threads(n)),
        Err(e) => {
            say_err!("toolhost: {e}");
            Err(ExitCode::from(2))
        }
    }
}

fn built(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        say_err!("toolhost: cannot start the async runtime: {e}");
        ExitCode::from(1)
    })
}

/// Event-loop threads: `TOKIO_WORKER_THREADS`, else one per two cores, at least one. The
/// daemon shares its machine with the agents and MCP servers it relays between, and each
/// relayed call costs them more CPU than it costs the daemon; its own slow work (files,
/// processes, the store) runs on the blocking pool. Fewer workers also means a call's
/// wake-ups stay on one thread: on 2 cores, one worker relayed MCP calls with about a
/// quarter less CPU per call than two. Read here rather than by tokio, which panics on a
/// value it cannot use.
fn workers() -> Result<usize, String> {
    const VAR: &str = "TOKIO_WORKER_THREADS";
    let Some(v) = std::env::var_os(VAR) else {
        return Ok(std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)));
    };
    match v.to_str().and_then(|s| s.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(format!("{VAR} must be a whole number above 0, not {v:?}")),
    }
}

/// Runs the parsed command: the one dispatch. A family connects to the daemon only for the
/// subcommands that need it; a client error is printed here and becomes exit 3 or 1.
async fn run(cli: Cli) -> ExitCode {
    let g = Globals {
        socket: cli.socket,
        config: cli.config,
        out: cli.out,
        timeout: cli.timeout,
        log_format: cli.log_format,
    };
    let json = g.out.json;
    let done = match cli.command {
        Command::Serve {
            workspace,
            data_dir,
        } => Ok(serve(g, workspace, data_dir).await),
        Command::Tools { command, all } => tools::run(&g, command, all).await,
        Command::Invoke(args) => invoke::invoke(&g, args).await,
        Command::Cancel { call_id } => invoke::cancel(&g, &call_id).await,
        Command::Call {
            method,
            params,
            workspace,
        } => invoke::call(&g, &method, params.as_deref(), workspace.as_deref()).await,
        Command::Status { watch } => status::run(&g, watch).await,
        Command::Health => status::health(&g).await,
        Command::Approvals(args) => approvals::run(&g, args).await,
        Command::Trust(args) => trust::run(&g, args).await,
        Command::Calls(args) => Ok(calls::run(&g, args).await),
        Command::Undo(args) => undo::undo(&g, args).await,
        Command::Checkpoints(args) => undo::checkpoints(&g, args).await,
        Command::Guards { command } => guards::run(&g, command).await,
        Command::Fleet { command } => fleet::run(&g, command).await,
        Command::Config { command } => config::run(&g, command).await,
        Command::Session { command } => session::run(&g, command).await,
        Command::Mcp { command, flags } => mcp::run(&g, command, flags).await,
        Command::Doctor(args) => Ok(doctor::run(&g, args).await),
        Command::Where { only } => Ok(locate::run(&g, only).await),
        Command::Ui { open } => ui::run(&g, open).await,
        Command::Import(args) => Ok(import::run(&g, args).await),
        Command::Tool { command } => Ok(tool::run(&g, command).await),
        Command::Modules { command } => Ok(modules::run(&g, command).await),
        Command::Skills { command } => {
            let config = g.config.clone().unwrap_or_else(crate::config::default_path);
            Ok(crate::skills::scaffold::cli(command, &config, g.out.json))
        }
    };
    done.unwrap_or_else(|e| {
        // With --json the daemon's error is an answer too: JSON on stdout, as a script reads it.
        if let (
            true,
            ClientError::Rpc {
                code,
                message,
                data,
            },
        ) = (json, &e)
        {
            println!(
                "{}",
                serde_json::json!({"error": {"code": code, "message": message, "data": data}})
            );
        }
        say_err!("toolhost: {e}");
        ExitCode::from(exit_code(&e))
    })
}

/// `toolhost serve`.
async fn serve(g: Globals, workspace: Option<PathBuf>, data_dir: Option<PathBuf>) -> ExitCode {
    let opts = crate::daemon::ServeOptions {
        config: g.config,
        socket: g.socket,
        workspace,
        data_dir,
    };
    match crate::daemon::serve(opts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say_err!("toolhost: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The exit code for a failed call: 3 when the daemon is not there or stopped answering,
/// 1 when it answered with an error (or with something we cannot read).
fn exit_code(e: &ClientError) -> u8 {
    match e {
        ClientError::NoDaemon { .. }
        | ClientError::Io(_)
        | ClientError::NotSent(_)
        | ClientError::Timeout { .. } => 3,
        ClientError::Rpc { .. } | ClientError::Decode(_) => 1,
    }
}

/// Parses a JSON object given on the command line; anything else is a usage error (exit 2).
fn parse_json_object(what: &str, text: &str) -> Result<Map<String, Value>, ExitCode> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => {
            say_err!("toolhost: {what} must be a JSON object");
            Err(ExitCode::from(2))
        }
        Err(e) => {
            say_err!("toolhost: {what} is not valid JSON: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// `--timeout SECONDS` (fractions allowed), more than zero.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() && s <= 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{text:?} is not a number of seconds greater than 0"
        )),
    }
}

/// ExitCode for "succeeded" or "ran but failed" (1).
fn success_if(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
