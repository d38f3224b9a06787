//! The command line: `toolhost serve` runs the daemon; every other subcommand is a thin
//! client of its socket.
//!
//! Every client subcommand speaks through [`crate::client::Client`] with the typed
//! [`crate::protocol`] shapes; `call` alone passes raw JSON through.
//!
//! Exit codes: 0 success; 1 the call ran but failed (a tool's `ok:false`, a JSON-RPC error,
//! an invalid config for `config check`); 2 usage errors (bad flags or JSON); 3 no daemon
//! answering on the socket, the connection broke, or no answer in time.

mod calls;
mod login;
mod status;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    },
    /// Cancel a call in flight by its call id.
    Cancel { call_id: String },
    /// Everything at a glance: servers, custom tools, config, sessions, calls in flight
    /// (exit 1 while degraded).
    Status {
        /// Redraw every SECONDS until interrupted.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
    },
    /// Finished calls from the audit log (no daemon needed).
    Calls {
        /// Keep printing calls as they finish.
        #[arg(long, short)]
        follow: bool,
        /// Only the calls of this session.
        #[arg(long)]
        session: Option<String>,
        /// Only the last N calls (0: all).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The daemon's data dir (default: the running daemon's, else as `serve` resolves it).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Show the daemon's health.
    Health,
    /// Send a raw JSON-RPC call and print its result.
    Call {
        method: String,
        /// Params as a JSON object.
        params: Option<String>,
    },
    /// Check a config file, or see and reload the daemon's.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Manage persisted sessions.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Serve the host's tools as an MCP server on stdio (no subcommand), or manage MCP
    /// servers (edits config.json; the daemon applies the change).
    Mcp {
        #[command(subcommand)]
        command: Option<McpCommand>,
        /// Stdio server: use this host session (created when missing) instead of a new one.
        #[arg(long)]
        session: Option<String>,
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
    /// Change a session: merge meta (a null value deletes a key), set approval or workspace.
    Update {
        id: String,
        /// Meta to merge, as a JSON object.
        #[arg(long)]
        meta: Option<String>,
        #[arg(long)]
        workspace: Option<String>,
        /// auto, strict or read_only.
        #[arg(long, value_parser = parse_approval)]
        approval: Option<ApprovalMode>,
    },
    /// Resume a session: merge its persisted tool names with the live tools.
    Resume { id: String },
    /// The session's tool view (OpenAI function format).
    Tools {
        id: String,
        /// Print only whether the view still has this etag.
        #[arg(long)]
        if_etag: Option<String>,
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
    /// Validate config.json without a daemon (exit 0 when valid, 1 with the errors listed).
    Check,
    /// Make the daemon re-read config.json now (exit 1 when it was refused).
    Reload,
    /// The daemon's config: file, revision, last error, warnings.
    Status,
}

/// How results are printed: for people by default, or with the global `--json` as exactly
/// one compact JSON document on stdout (the method's result as the protocol defines it), for
/// every client command alike.
#[derive(Args, Debug, Clone, Copy)]
struct Output {
    /// Print the result as one line of JSON (the protocol's result object).
    #[arg(long, global = true)]
    json: bool,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let daemon = matches!(cli.command, Command::Serve { .. });
    crate::logging::init(daemon, cli.log_format);
    if !daemon {
        // A client's reader that goes away (`toolhost tools | head -1`) ends it quietly, as
        // it does any Unix filter, instead of a panic in `println!` (Rust ignores SIGPIPE).
        // The daemon keeps ignoring it: a vanished client must never kill it.
        // SAFETY: set before any thread exists; SIG_DFL needs no handler.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let workers = match workers() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("toolhost: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
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
        } => config_check(cli.config, cli.out),
        Command::Calls {
            follow,
            session,
            limit,
            data_dir,
        } => {
            let data_dir = match data_dir {
                Some(d) => d,
                None => calls_data_dir(cli.socket.as_deref(), cli.config).await,
            };
            let filter = calls::Filter {
                session,
                json: cli.out.json,
                limit,
            };
            calls::run(&data_dir, &filter, follow).await
        }
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
        Command::Mcp {
            command: None,
            session,
            ..
        } => {
            let path = client::default_socket(cli.socket.as_deref(), cli.config.as_deref());
            match crate::facade::run_stdio(&path, session).await {
                // A pending stdin read cannot be cancelled: exit rather than wait for it.
                Ok(()) => std::process::exit(0),
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    ExitCode::from(exit_code(&e))
                }
            }
        }
        command => {
            let path = client::default_socket(cli.socket.as_deref(), cli.config.as_deref());
            let wait = cli.timeout.unwrap_or(client::DEFAULT_TIMEOUT);
            match client_command(&path, command, cli.out, wait).await {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("toolhost: {e}");
                    ExitCode::from(exit_code(&e))
                }
            }
        }
    }
}

/// Where the audit log is: the running daemon's data dir, else the one `serve` would use.
async fn calls_data_dir(socket: Option<&std::path::Path>, config: Option<PathBuf>) -> PathBuf {
    let path = client::default_socket(socket, config.as_deref());
    let asked = async {
        let c = Client::connect(&path).await.ok()?;
        c.status().await.ok().map(|s| PathBuf::from(s.data_dir))
    };
    match tokio::time::timeout(std::time::Duration::from_secs(2), asked).await {
        Ok(Some(d)) => d,
        _ => crate::session::resolve_data_dir(None, config),
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

fn config_check(path: Option<PathBuf>, out: Output) -> ExitCode {
    let named = config::is_named(path.as_deref());
    let path = path.unwrap_or_else(config::default_path);
    let loaded = if named {
        config::load_named(&path)
    } else {
        config::load(&path)
    };
    let (valid, problems, warnings) = match &loaded {
        Ok(l) => (true, Vec::new(), l.warnings.clone()),
        Err(e) => (
            false,
            e.problems.iter().map(ToString::to_string).collect(),
            e.warnings.clone(),
        ),
    };
    if out.json {
        emit(
            out,
            &serde_json::json!({
                "path": path.display().to_string(),
                "valid": valid,
                "problems": problems,
                "warnings": warnings,
            }),
        );
    } else {
        match loaded {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    println!("warning: {w}");
                }
                println!("{}: valid", path.display());
            }
            Err(e) => {
                println!("{}: invalid", path.display());
                println!("{e:#}");
            }
        }
    }
    if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Parses a JSON object given on the command line; anything else is a usage error (exit 2).
/// A session's `--meta`, when given.
fn parse_meta(meta: Option<&str>) -> Result<Option<Map<String, Value>>, ExitCode> {
    meta.map(|m| parse_json_object("--meta", m)).transpose()
}

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

/// A result as JSON: one compact line with `--json` (for scripts), else indented (for
/// commands without a more readable form).
fn emit<T: Serialize + ?Sized>(out: Output, v: &T) {
    if out.json {
        println!("{}", serde_json::to_string(v).unwrap_or_default());
    } else {
        print_json(v);
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

/// The first non-blank line of a description, without a list marker.
fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .trim_start_matches("- ")
}

/// Rows as columns, each as wide as its widest cell (so long tool names never push the
/// rest out of line), the last column left unpadded.
fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[c].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        println!("{}", line.trim_end());
    }
}

async fn client_command(
    socket: &std::path::Path,
    command: Command,
    out: Output,
    wait: Duration,
) -> Result<ExitCode, ClientError> {
    let client = Client::connect(socket).await?.with_timeout(wait);
    match command {
        Command::Tools {
            command: Some(command),
            ..
        } => tools::run(&client, command, out.json).await,
        Command::Tools { command: None, all } => {
            let params = ListToolsParams {
                include_hidden: all,
                ..Default::default()
            };
            let r = client.list_tools(&params).await?;
            if out.json {
                emit(out, &r);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = r
                .tools
                .iter()
                .map(|t| {
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
                    vec![
                        name.to_owned(),
                        source,
                        approval.to_owned(),
                        first_line(t.description()).to_owned(),
                    ]
                })
                .collect();
            print_table(&rows);
            Ok(ExitCode::SUCCESS)
        }
        Command::Invoke {
            name,
            args,
            session,
            timeout_ms,
            approved,
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
                emit(out, &r);
            } else if ok {
                // The main text prints bare, the facts beside it as JSON.
                let shown = r.result.output.shown();
                match shown.main_text {
                    Some(text) => println!("{}", text.strip_suffix('\n').unwrap_or(text)),
                    None => print_json(&r.result.output.fields),
                }
                if shown.main_text.is_some() && !shown.facts.is_empty() {
                    print_json(&shown.facts);
                }
            } else {
                let kind = r.result.error_kind;
                eprintln!(
                    "{} ({}): {}",
                    name,
                    kind.map_or_else(|| "failed".to_owned(), |k| wire(&k)),
                    r.result.error.as_deref().unwrap_or("")
                );
                if kind == Some(ErrorKind::ApprovalRequired) {
                    // The daemon speaks protocol (`"approved": true`); say it in CLI terms.
                    eprintln!(
                        "toolhost: once the user agrees, run the same command with --approved"
                    );
                }
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Cancel { call_id } => {
            let r = client.cancel(&call_id).await?;
            if out.json {
                emit(out, &r);
            } else if r.cancelled {
                println!("cancelled {call_id}");
            } else {
                eprintln!("toolhost: no call {call_id} in flight");
            }
            Ok(if r.cancelled {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Health => {
            let r = client.health().await?;
            if out.json {
                emit(out, &r);
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
                println!("sandbox: {}", r.sandbox.summary());
                if !r.quarantined.is_empty() {
                    println!(
                        "quarantined tools (see `toolhost tools diff NAME`): {}",
                        r.quarantined.join(", ")
                    );
                }
            }
            Ok(if r.status == HealthStatus::Ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Call { method, params } => {
            let params = match params.as_deref().map(|p| parse_json_object("PARAMS", p)) {
                Some(Ok(p)) => p,
                Some(Err(code)) => return Ok(code),
                None => Map::new(),
            };
            let params = serde_json::value::to_raw_value(&params)
                .map_err(|e| ClientError::Decode(e.to_string()))?;
            let r = client.call_raw(&method, &params).await?;
            match serde_json::from_str::<Value>(&r) {
                Ok(v) => emit(out, &v),
                Err(_) => println!("{r}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { watch } => status::run(&client, out.json, watch).await,
        Command::Config { command } => config_command(&client, command, out).await,
        Command::Session { command } => session_command(&client, command, out).await,
        Command::Mcp {
            command: Some(command),
            ..
        } => mcp_command(&client, command, out).await,
        Command::Serve { .. }
        | Command::Tool { .. }
        | Command::Calls { .. }
        | Command::Mcp { command: None, .. } => Ok(ExitCode::from(2)),
    }
}

async fn config_command(
    client: &Client,
    command: ConfigCommand,
    out: Output,
) -> Result<ExitCode, ClientError> {
    let print_status = |s: &ConfigStatusResult| {
        println!("{} (revision {})", s.path, s.revision);
        if let Some(e) = &s.last_error {
            println!("last error: {e}");
        }
        for w in &s.warnings {
            println!("warning: {w}");
        }
        for e in &s.custom_tool_errors {
            println!("custom tool error: {e}");
        }
    };
    match command {
        ConfigCommand::Check => Ok(ExitCode::from(2)), // handled in `run`, no daemon needed
        ConfigCommand::Reload => {
            let r = client.config_reload().await?;
            if out.json {
                emit(out, &r);
            } else if r.applied {
                println!("applied");
                print_status(&r.status);
            } else {
                println!("not applied: {}", r.error.as_deref().unwrap_or(""));
            }
            Ok(if r.applied {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        ConfigCommand::Status => {
            let r = client.config_status().await?;
            if out.json {
                emit(out, &r);
            } else {
                print_status(&r);
            }
            Ok(ExitCode::SUCCESS)
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
            let rows: Vec<Vec<String>> = r
                .sessions
                .iter()
                .map(|s| {
                    vec![
                        s.id.clone(),
                        wire(&s.approval),
                        format!("{} tools", s.tool_names.len()),
                        serde_json::to_string(&s.meta).unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&rows);
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
            let meta = match parse_meta(meta.as_deref()) {
                Ok(m) => m,
                Err(code) => return Ok(code),
            };
            let params = SessionCreateParams {
                id,
                workspace,
                approval,
                meta,
                ..Default::default()
            };
            emit(out, &client.session_create(&params).await?);
        }
        SessionCommand::Update {
            id,
            meta,
            workspace,
            approval,
        } => {
            let meta = match parse_meta(meta.as_deref()) {
                Ok(m) => m,
                Err(code) => return Ok(code),
            };
            let params = SessionUpdateParams {
                id,
                meta,
                approval,
                workspace,
                ..Default::default()
            };
            emit(out, &client.session_update(&params).await?);
        }
        SessionCommand::Resume { id } => {
            let r: SessionResumeResult = client
                .call(method::SESSION_RESUME, &SessionIdParams { id })
                .await?;
            if out.json {
                emit(out, &r);
            } else {
                println!(
                    "resumed {}: {} tools, added {}, missing {}",
                    r.session.id,
                    r.tools.len(),
                    list_or_none(&r.added),
                    list_or_none(&r.missing)
                );
            }
        }
        SessionCommand::Tools { id, if_etag } => {
            let r: SessionToolsResult = client
                .call(method::SESSION_TOOLS, &SessionToolsParams { id, if_etag })
                .await?;
            if out.json {
                emit(out, &r);
            } else if r.unchanged {
                println!("unchanged (etag {})", r.etag);
            } else {
                let rows: Vec<Vec<String>> = r
                    .tools
                    .iter()
                    .flatten()
                    .map(|t| {
                        vec![
                            t.function.name.clone(),
                            first_line(&t.function.description).to_owned(),
                        ]
                    })
                    .collect();
                print_table(&rows);
                println!("(etag {})", r.etag);
            }
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

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
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
