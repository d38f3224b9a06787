//! The command line: `toolhost serve` runs the daemon; every other subcommand is a thin
//! client of its socket.
//!
//! Every client subcommand speaks through [`crate::client::Client`] with the typed
//! [`crate::protocol`] shapes; `call` alone passes raw JSON through.
//!
//! Exit codes: 0 success; 1 the call ran but failed (a tool's `ok:false`, a JSON-RPC error,
//! an invalid config for `config check`); 2 usage errors (bad flags or JSON); 3 no daemon
//! answering on the socket, the connection broke, or no answer in time.

mod login;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::client::{self, Client, ClientError};
use crate::config;
use crate::protocol::*;
use crate::ApprovalMode;

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
    /// List the live tools.
    Tools {
        #[command(flatten)]
        out: Output,
        /// Include hidden tools.
        #[arg(long)]
        all: bool,
    },
    /// Call a tool.
    Invoke {
        name: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Approve a write/command tool in a strict session.
        #[arg(long)]
        approved: bool,
        #[command(flatten)]
        out: Output,
    },
    /// Show the daemon's health.
    Health {
        #[command(flatten)]
        out: Output,
    },
    /// Send a raw JSON-RPC call and print its result.
    Call {
        method: String,
        /// Params as a JSON object.
        params: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Check a config file without starting anything.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Manage persisted sessions.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
        #[command(flatten)]
        out: Output,
    },
    /// Manage MCP servers (edits config.json; the daemon applies the change).
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
        #[command(flatten)]
        out: Output,
    },
    /// Create and check custom tools (no daemon needed).
    Tool {
        #[command(subcommand)]
        command: crate::custom::scaffold::ToolCommand,
    },
}

#[derive(Subcommand, Debug)]
enum SessionCommand {
    /// Sessions, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The cursor printed by the previous page.
        #[arg(long)]
        after: Option<String>,
    },
    /// One session.
    Show { id: String },
    /// Create a session.
    Create {
        #[arg(long)]
        id: Option<String>,
        /// Initial meta as a JSON object.
        #[arg(long)]
        meta: Option<String>,
        #[arg(long)]
        workspace: Option<String>,
        /// auto, strict or read_only.
        #[arg(long, value_parser = parse_approval)]
        approval: Option<ApprovalMode>,
    },
    /// Delete a session.
    Delete { id: String },
    /// Rebuild a damaged session store from what can be read (no daemon needed; refuses
    /// while one uses the store). The damaged store is kept as `sessions.corrupt-<time>`.
    Recover {
        /// The daemon's data dir (default: as `serve` resolves it).
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// Internal: print the sessions of the store copy in DIR (run by `recover` itself).
        #[arg(long, hide = true, value_name = "DIR")]
        export_from: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum McpCommand {
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

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Validate config.json (exit 0 when valid, 1 with the errors listed).
    Check,
}

#[derive(Args, Debug, Clone, Copy)]
struct Output {
    /// Print the raw JSON result.
    #[arg(long, global = true)]
    json: bool,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(matches!(cli.command, Command::Serve { .. }));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolhost: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(cli))
}

fn init_tracing(daemon: bool) {
    let default = if daemon {
        "info,rmcp=warn"
    } else {
        "warn,rmcp=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours only on a terminal: journald, Docker and log files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        // A broken stderr (its reader gone) must not turn every log line into a panic:
        // tracing's fallback report is an eprintln!, which panics on EPIPE.
        .log_internal_errors(false)
        .try_init();
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve {
            workspace,
            data_dir,
        } => {
            let opts = crate::daemon::ServeOptions {
                config: cli.config,
                socket: cli.socket,
                workspace,
                data_dir,
            };
            match crate::daemon::serve(opts).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("toolhost: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Config {
            command: ConfigCommand::Check,
        } => config_check(cli.config),
        Command::Tool { command } => {
            crate::custom::scaffold::cli(command, &cli.config.unwrap_or_else(config::default_path))
        }
        Command::Session {
            command:
                SessionCommand::Recover {
                    data_dir,
                    export_from,
                },
            ..
        } => crate::session::recover_cli(data_dir, cli.config, export_from),
        command => {
            let path = client::default_socket(cli.socket.as_deref(), cli.config.as_deref());
            match client_command(&path, command).await {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    ExitCode::from(exit_code(&e))
                }
            }
        }
    }
}

/// The exit code for a failed call: 3 when the daemon is not there or stopped answering,
/// 1 when it answered with an error (or with something we cannot read).
fn exit_code(e: &ClientError) -> u8 {
    match e {
        ClientError::NoDaemon { .. } | ClientError::Io(_) | ClientError::Timeout { .. } => 3,
        ClientError::Rpc { .. } | ClientError::Decode(_) => 1,
    }
}

fn config_check(path: Option<PathBuf>) -> ExitCode {
    let path = path.unwrap_or_else(config::default_path);
    match config::load(&path) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                println!("warning: {w}");
            }
            println!("{}: valid", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}: invalid", path.display());
            println!("{e:#}");
            ExitCode::from(1)
        }
    }
}

/// Parses a JSON object given on the command line; anything else is a usage error (exit 2).
fn parse_json_object(what: &str, text: &str) -> Result<Map<String, Value>, ExitCode> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => {
            eprintln!("toolhost: {what} must be a JSON object");
            Err(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("toolhost: {what} is not valid JSON: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// `--approval`: parsed here so a typo is a usage error, not a round trip to the daemon.
fn parse_approval(text: &str) -> Result<ApprovalMode, String> {
    serde_json::from_value(Value::String(text.to_owned()))
        .map_err(|_| format!("{text:?} is not one of auto, strict, read_only"))
}

/// The wire spelling of an enum value (`read_only`, `circuit_open`, …).
fn wire<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

fn print_json<T: Serialize + ?Sized>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// A result as JSON: one compact line with `--json` (for scripts), else indented.
fn emit<T: Serialize>(out: Output, v: &T) {
    if out.json {
        println!("{}", serde_json::to_string(v).unwrap_or_default());
    } else {
        print_json(v);
    }
}

/// The first non-blank line of a description, without a list marker.
fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .trim_start_matches("- ")
}

async fn client_command(
    socket: &std::path::Path,
    command: Command,
) -> Result<ExitCode, ClientError> {
    let client = Client::connect(socket).await?;
    match command {
        Command::Tools { out, all } => {
            let params = ListToolsParams {
                include_hidden: all,
                ..Default::default()
            };
            let r = client.list_tools(&params).await?;
            if out.json {
                print_json(&r);
                return Ok(ExitCode::SUCCESS);
            }
            for t in &r.tools {
                let name = t.name();
                let meta = r.meta.get(name);
                let source = match meta {
                    Some(ToolMeta {
                        server: Some(s), ..
                    }) => format!("mcp:{s}"),
                    Some(m) => wire(&m.source),
                    None => String::new(),
                };
                let approval = meta
                    .and_then(|m| m.approval)
                    .map_or("-", crate::ApprovalClass::as_str);
                println!(
                    "{name:<32} {source:<14} {approval:<10} {}",
                    first_line(t.description())
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Invoke {
            name,
            args,
            session,
            timeout_ms,
            approved,
            out,
        } => {
            let arguments = match parse_json_object("--args", &args) {
                Ok(a) => a,
                Err(code) => return Ok(code),
            };
            let params = InvokeParams {
                session_id: session,
                timeout_ms,
                approved,
                ..InvokeParams::new(name.clone(), arguments)
            };
            let r = client.invoke(&params).await?;
            let ok = r.result.ok;
            if out.json {
                print_json(&r);
            } else if ok {
                // One field (`content`, `output`, …) prints bare; several print as JSON.
                let fields = &r.result.fields;
                match fields.values().next() {
                    Some(Value::String(s)) if fields.len() == 1 => println!("{s}"),
                    Some(v) if fields.len() == 1 => print_json(v),
                    _ => print_json(fields),
                }
            } else {
                eprintln!(
                    "{} ({}): {}",
                    name,
                    r.result
                        .error_kind
                        .map_or_else(|| "failed".to_owned(), |k| wire(&k)),
                    r.result.error.as_deref().unwrap_or("")
                );
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Health { out } => {
            let r = client.health().await?;
            if out.json {
                print_json(&r);
            } else {
                println!(
                    "{} — toolhost {}, up {}s, {} tools, {} sessions, mcp ready {} / failed {} / connecting {}",
                    wire(&r.status),
                    r.version,
                    r.uptime_s, r.tools, r.sessions, r.mcp.ready, r.mcp.failed, r.mcp.connecting
                );
                if let Some(e) = &r.config_error {
                    println!("config error: {e}");
                }
                if !r.collisions.is_empty() {
                    println!("name collisions: {}", r.collisions.join(", "));
                }
            }
            Ok(if r.status == HealthStatus::Ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Call {
            method,
            params,
            out,
        } => {
            let params = match params.as_deref().map(|p| parse_json_object("PARAMS", p)) {
                Some(Ok(p)) => p,
                Some(Err(code)) => return Ok(code),
                None => Map::new(),
            };
            let params = serde_json::value::to_raw_value(&params)
                .map_err(|e| ClientError::Decode(e.to_string()))?;
            let r = client.call_raw(&method, &params).await?;
            if out.json {
                println!("{}", r.get());
            } else {
                match serde_json::from_str::<Value>(r.get()) {
                    Ok(v) => print_json(&v),
                    Err(_) => println!("{}", r.get()),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Session { command, out } => session_command(&client, command, out).await,
        Command::Mcp { command, out } => mcp_command(&client, command, out).await,
        Command::Serve { .. } | Command::Config { .. } | Command::Tool { .. } => {
            Ok(ExitCode::from(2))
        }
    }
}

async fn session_command(
    client: &Client,
    command: SessionCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    match command {
        SessionCommand::List { limit, after } => {
            let params = SessionListParams {
                limit: Some(limit),
                after,
            };
            let r = client.session_list(&params).await?;
            if out.json {
                emit(out, &r);
                return Ok(ExitCode::SUCCESS);
            }
            for s in &r.sessions {
                println!(
                    "{:<40} {:<9} {:>3} tools  {}",
                    s.id,
                    wire(&s.approval),
                    s.tool_names.len(),
                    serde_json::to_string(&s.meta).unwrap_or_default()
                );
            }
            if let Some(next) = &r.next {
                println!("(more: --after {next})");
            }
        }
        SessionCommand::Show { id } => emit(out, &client.session_get(&id).await?),
        SessionCommand::Create {
            id,
            meta,
            workspace,
            approval,
        } => {
            let meta = match meta.as_deref().map(|m| parse_json_object("--meta", m)) {
                Some(Ok(m)) => Some(m),
                Some(Err(code)) => return Ok(code),
                None => None,
            };
            let params = SessionCreateParams {
                id,
                workspace,
                approval,
                meta,
            };
            emit(out, &client.session_create(&params).await?);
        }
        SessionCommand::Recover { .. } => return Ok(ExitCode::from(2)), // handled in `run`
        SessionCommand::Delete { id } => {
            let r = client.session_delete(&id).await?;
            if !r.deleted {
                eprintln!("toolhost: no session {id}");
                return Ok(ExitCode::from(1));
            }
            emit(out, &r);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn mcp_command(
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
            for s in &r.servers {
                println!(
                    "{:<20} {:<5} {:<12} tools {:<4} in-flight {:<3} queued {:<3} restarts {:<3}{}",
                    s.name,
                    wire(&s.transport),
                    wire(&s.state),
                    s.tools,
                    s.in_flight,
                    s.queued,
                    s.restarts,
                    s.last_error
                        .as_deref()
                        .map(|e| format!(" error: {e}"))
                        .unwrap_or_default()
                );
            }
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
                                eprintln!("toolhost: --env takes KEY=VALUE, got {kv:?}");
                                return Ok(ExitCode::from(2));
                            }
                        }
                    }
                    server.insert("command".into(), program.as_str().into());
                    server.insert("args".into(), args.into());
                    server.insert("env".into(), envs.into());
                }
                _ => {
                    eprintln!("toolhost: give either --url URL or -- COMMAND ARGS…");
                    return Ok(ExitCode::from(2));
                }
            }
            emit(out, &client.mcp_add(&McpAddParams { name, server }).await?);
        }
        McpCommand::Remove { name } => emit(out, &client.mcp_remove(&name).await?),
        McpCommand::Reload { name } => emit(out, &client.mcp_reload(name.as_deref()).await?),
        McpCommand::Login { name } => return login::login(client, &name).await,
        McpCommand::Logout { name } => return login::logout(client, &name).await,
    }
    Ok(ExitCode::SUCCESS)
}
