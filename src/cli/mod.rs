//! The command line: `toolhost serve` runs the daemon; every other subcommand is a thin
//! client of its socket.
//!
//! Exit codes: 0 success; 1 the call ran but failed (a tool's `ok:false`, a JSON-RPC error,
//! an invalid config for `config check`); 2 usage errors (bad flags or JSON); 3 no daemon
//! answering on the socket or the connection broke.

mod client;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

pub use client::{Client, ClientError};

use crate::config;

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
        #[arg(long)]
        approval: Option<String>,
    },
    /// Delete a session.
    Delete { id: String },
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
        command => {
            let path = socket_for(&cli.socket, &cli.config);
            match client_command(&path, command).await {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    ExitCode::from(match e {
                        ClientError::NoDaemon { .. } | ClientError::Io(_) => 3,
                        ClientError::Rpc { .. } => 1,
                    })
                }
            }
        }
    }
}

/// The socket a client should use: same resolution as the daemon's.
fn socket_for(explicit: &Option<PathBuf>, config_path: &Option<PathBuf>) -> PathBuf {
    let cfg_path = config_path.clone().unwrap_or_else(config::default_path);
    let cfg = config::load(&cfg_path)
        .map(|l| l.config)
        .unwrap_or_default();
    crate::rpc::socket_path(explicit.as_deref(), &cfg)
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

fn parse_json_object(what: &str, text: &str) -> Result<Value, ExitCode> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
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

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

async fn client_command(
    socket: &std::path::Path,
    command: Command,
) -> Result<ExitCode, ClientError> {
    let mut client = Client::connect(socket).await?;
    match command {
        Command::Tools { out, all } => {
            let r = client
                .call("list_tools", json!({"include_hidden": all}))
                .await?;
            if out.json {
                print_json(&r);
            } else {
                for t in r["tools"].as_array().into_iter().flatten() {
                    let name = t["function"]["name"].as_str().unwrap_or("");
                    let meta = &r["meta"][name];
                    let first = t["function"]["description"]
                        .as_str()
                        .unwrap_or("")
                        .lines()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("")
                        .trim()
                        .trim_start_matches("- ");
                    let source = match meta["server"].as_str() {
                        Some(s) => format!("mcp:{s}"),
                        None => meta["source"].as_str().unwrap_or("").to_owned(),
                    };
                    println!(
                        "{name:<32} {source:<14} {:<10} {first}",
                        meta["approval"].as_str().unwrap_or("-")
                    );
                }
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
            let args = match parse_json_object("--args", &args) {
                Ok(a) => a,
                Err(code) => return Ok(code),
            };
            let mut params = json!({"name": name, "arguments": args, "approved": approved});
            if let Some(s) = session {
                params["session_id"] = json!(s);
            }
            if let Some(t) = timeout_ms {
                params["timeout_ms"] = json!(t);
            }
            let r = client.call("invoke", params).await?;
            let ok = r["result"]["ok"].as_bool() == Some(true);
            if out.json {
                print_json(&r);
            } else if ok {
                let mut fields = r["result"].clone();
                if let Some(o) = fields.as_object_mut() {
                    o.remove("ok");
                }
                match fields.as_object().map(|o| o.len()) {
                    Some(1) => match fields.as_object().and_then(|o| o.values().next()) {
                        Some(Value::String(s)) => println!("{s}"),
                        Some(v) => print_json(v),
                        None => {}
                    },
                    _ => print_json(&fields),
                }
            } else {
                eprintln!(
                    "{} ({}): {}",
                    name,
                    r["result"]["error_kind"].as_str().unwrap_or("failed"),
                    r["result"]["error"].as_str().unwrap_or("")
                );
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Health { out } => {
            let r = client.call("host.health", json!({})).await?;
            if out.json {
                print_json(&r);
            } else {
                println!(
                    "{} — toolhost {}, up {}s, {} tools, {} sessions, mcp ready {} / failed {} / connecting {}",
                    r["status"].as_str().unwrap_or("?"),
                    r["version"].as_str().unwrap_or("?"),
                    r["uptime_s"], r["tools"], r["sessions"], r["mcp"]["ready"], r["mcp"]["failed"], r["mcp"]["connecting"]
                );
                if let Some(e) = r["config_error"].as_str() {
                    println!("config error: {e}");
                }
            }
            Ok(if r["status"] == "ok" {
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
            let params = match params
                .as_deref()
                .map(|p| parse_json_object("PARAMS", p))
                .transpose()
            {
                Ok(p) => p.unwrap_or_else(|| json!({})),
                Err(code) => return Ok(code),
            };
            let r = client.call(&method, params).await?;
            if out.json {
                println!("{r}");
            } else {
                print_json(&r);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Session { command, out } => session_command(&mut client, command, out).await,
        Command::Mcp { command, out } => mcp_command(&mut client, command, out).await,
        Command::Serve { .. } | Command::Config { .. } | Command::Tool { .. } => {
            Ok(ExitCode::from(2))
        }
    }
}

async fn session_command(
    client: &mut Client,
    command: SessionCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    let r = match command {
        SessionCommand::List { limit, after } => {
            let r = client
                .call("session.list", json!({"limit": limit, "after": after}))
                .await?;
            if !out.json {
                for s in r["sessions"].as_array().into_iter().flatten() {
                    println!(
                        "{:<40} {:<9} {:>3} tools  {}",
                        s["id"].as_str().unwrap_or(""),
                        s["approval"].as_str().unwrap_or(""),
                        s["tool_names"].as_array().map_or(0, Vec::len),
                        s["meta"]
                    );
                }
                if let Some(next) = r["next"].as_str() {
                    println!("(more: --after {next})");
                }
                return Ok(ExitCode::SUCCESS);
            }
            r
        }
        SessionCommand::Show { id } => client.call("session.get", json!({"id": id})).await?,
        SessionCommand::Create {
            id,
            meta,
            workspace,
            approval,
        } => {
            let meta = match meta
                .as_deref()
                .map(|m| parse_json_object("--meta", m))
                .transpose()
            {
                Ok(m) => m,
                Err(code) => return Ok(code),
            };
            client
                .call(
                    "session.create",
                    json!({"id": id, "meta": meta, "workspace": workspace, "approval": approval}),
                )
                .await?
        }
        SessionCommand::Delete { id } => {
            let r = client.call("session.delete", json!({"id": id})).await?;
            if r["deleted"] != true {
                eprintln!("toolhost: no session {id}");
                return Ok(ExitCode::from(1));
            }
            r
        }
    };
    if out.json {
        println!("{r}");
    } else {
        print_json(&r);
    }
    Ok(ExitCode::SUCCESS)
}

async fn mcp_command(
    client: &mut Client,
    command: McpCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    let r = match command {
        McpCommand::Status { name } => {
            let r = client.call("mcp.status", json!({"server": name})).await?;
            if !out.json {
                for s in r["servers"].as_array().into_iter().flatten() {
                    println!(
                        "{:<20} {:<5} {:<12} tools {:<4} in-flight {:<3} queued {:<3} restarts {:<3}{}",
                        s["name"].as_str().unwrap_or(""), s["transport"].as_str().unwrap_or(""), s["state"].as_str().unwrap_or(""),
                        s["tools"], s["in_flight"], s["queued"], s["restarts"],
                        s["last_error"].as_str().map(|e| format!(" error: {e}")).unwrap_or_default()
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            r
        }
        McpCommand::Add {
            name,
            url,
            env,
            command,
        } => {
            let server = match (url, command.split_first()) {
                (Some(url), None) => json!({"url": url}),
                (None, Some((program, args))) => {
                    let mut envs = serde_json::Map::new();
                    for kv in env {
                        match kv.split_once('=') {
                            Some((k, v)) => {
                                envs.insert(k.to_owned(), json!(v));
                            }
                            None => {
                                eprintln!("toolhost: --env takes KEY=VALUE, got {kv:?}");
                                return Ok(ExitCode::from(2));
                            }
                        }
                    }
                    json!({"command": program, "args": args, "env": envs})
                }
                _ => {
                    eprintln!("toolhost: give either --url URL or -- COMMAND ARGS…");
                    return Ok(ExitCode::from(2));
                }
            };
            client
                .call("mcp.add", json!({"name": name, "server": server}))
                .await?
        }
        McpCommand::Remove { name } => client.call("mcp.remove", json!({"name": name})).await?,
        McpCommand::Reload { name } => client.call("mcp.reload", json!({"server": name})).await?,
    };
    if out.json {
        println!("{r}");
    } else {
        print_json(&r);
    }
    Ok(ExitCode::SUCCESS)
}
