//! `toolhost import [--apply] [--rewrite]`: the plan of [`crate::import`], carried out.
//!
//! `--apply` adds each planned server through `mcp.add` — the running daemon's when one
//! answers (it then starts the servers), else the same validated write to config.json
//! offline — so an import is exactly a series of `toolhost mcp add`s and is refused block
//! by block as they would be (a `${NAME}` not set in the daemon's environment, say).
//! `--rewrite` touches a frontend's file only for blocks config.json now holds exactly.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use serde_json::{Map, Value};

use super::render::{emit, say, say_err};
use super::Globals;
use crate::client::{Client, ClientError};
use crate::import::{self, Plan, Rewritten};
use crate::protocol::McpAddParams;

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Add the planned servers to config.json (through the running daemon when one answers).
    #[arg(long)]
    apply: bool,
    /// Replace the imported servers in each frontend's file with the one `toolhost` entry
    /// (the original is kept as `<file>.toolhost-backup`).
    #[arg(long)]
    rewrite: bool,
    /// The project whose `.mcp.json`, `.cursor/mcp.json` and `.vscode/mcp.json` are read
    /// (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
}

/// Where `--apply` writes: the daemon's `mcp.add`, or the same write offline.
enum Writer {
    Daemon(Client),
    File,
}

/// What `import` did (also its `--json` shape).
#[derive(Debug, Serialize)]
struct Outcome {
    config: PathBuf,
    /// Whether `--apply` went through a running daemon.
    daemon: bool,
    plan: Plan,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    added: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rewritten: Vec<Rewritten>,
    /// What failed: a server not added, a file not rewritten.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed: Vec<String>,
}

pub async fn run(g: &Globals, a: ImportArgs) -> ExitCode {
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        say_err!("toolhost: HOME is not set, so the frontends' files cannot be found");
        return ExitCode::from(2);
    };
    let workspace = a
        .workspace
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    let codex_home = std::env::var_os("CODEX_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let sources = import::sources(Path::new(&home), &workspace, codex_home);

    // The daemon's config file is the one that counts when a daemon runs.
    let (writer, config) = match g.connect().await {
        Ok(c) => match c.config_status().await {
            Ok(s) => (Writer::Daemon(c), PathBuf::from(s.path)),
            Err(e) => {
                say_err!("toolhost: {e}");
                return ExitCode::from(super::exit_code(&e));
            }
        },
        Err(ClientError::NoDaemon { .. }) => (
            Writer::File,
            g.config.clone().unwrap_or_else(crate::config::default_path),
        ),
        // A daemon is there but did not answer: writing behind its back would race it.
        Err(e) => {
            say_err!("toolhost: {e}");
            return ExitCode::from(super::exit_code(&e));
        }
    };
    let existing = match crate::config::mcp_server_blocks(&config) {
        Ok(m) => m,
        Err(e) => {
            say_err!("toolhost: {}: {e}", config.display());
            return ExitCode::from(1);
        }
    };
    let itself = import::Itself {
        listen_tcp: crate::config::load(&config)
            .ok()
            .and_then(|l| l.config.listen.tcp),
        exe: std::env::current_exe().and_then(std::fs::canonicalize).ok(),
    };
    let plan = import::plan(&sources, &existing, &itself);
    let mut out = Outcome {
        config,
        daemon: matches!(writer, Writer::Daemon(_)),
        plan,
        added: Vec::new(),
        rewritten: Vec::new(),
        failed: Vec::new(),
    };
    if !g.out.json {
        print_plan(&out);
    }
    if a.apply {
        apply(&writer, &mut out).await;
    }
    if a.rewrite {
        let socket = match &writer {
            Writer::Daemon(_) => super::locate::answering(&g.socket_paths()).await,
            Writer::File => named_socket(g),
        };
        rewrite(&sources, &mut out, &bridge_args(socket.as_deref()));
    }
    if g.out.json {
        emit(g.out, &out);
    } else if !a.apply && !a.rewrite && out.plan.servers.iter().any(|p| !p.in_config) {
        say!("");
        say!("next: `toolhost import --apply` adds them; `--rewrite` then points each frontend at toolhost");
    }
    super::success_if(out.failed.is_empty() && out.plan.errors.is_empty())
}

async fn apply(writer: &Writer, out: &mut Outcome) {
    let secrets_file = crate::secrets::file_for(&out.config);
    for p in out.plan.servers.iter().filter(|p| !p.in_config) {
        // The values first: the daemon's `mcp.add` expands the references at once.
        let values: Vec<(String, String)> = p
            .secrets
            .iter()
            .filter_map(|s| Some((s.var.clone(), s.value.clone()?)))
            .collect();
        if !values.is_empty() {
            match crate::secrets::add_to_file(&secrets_file, &values) {
                Ok(added) if !added.is_empty() => {
                    say!("wrote {} to {}", added.join(", "), secrets_file.display())
                }
                Ok(_) => {}
                Err(e) => {
                    out.failed.push(format!("{} not added: {e}", p.name));
                    continue;
                }
            }
        }
        let done = match writer {
            Writer::Daemon(c) => c
                .mcp_add(&McpAddParams {
                    name: p.name.clone(),
                    server: p.server.clone(),
                })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Writer::File => crate::config::add_mcp_server(&out.config, &p.name, &p.server)
                .map_err(|e| e.to_string()),
        };
        match done {
            Ok(()) => out.added.push(p.name.clone()),
            Err(e) => out.failed.push(format!("{} not added: {e}", p.name)),
        }
    }
    if !out.added.is_empty() {
        say!("added {} to {}", out.added.join(", "), out.config.display());
    }
    for f in &out.failed {
        say_err!("toolhost: {f}");
    }
}

/// Rewrites every file whose blocks config.json now holds exactly; the toolhost entry runs
/// `toolhost args…`.
fn rewrite(sources: &[import::Source], out: &mut Outcome, args: &[String]) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let now = match crate::config::mcp_server_blocks(&out.config) {
        Ok(m) => m,
        Err(e) => {
            out.failed.push(format!("{}: {e}", out.config.display()));
            return;
        }
    };
    let command = entry_command();
    for source in sources {
        let origins: Vec<&import::Origin> = out
            .plan
            .servers
            .iter()
            .filter(|p| in_config(&now, &p.name, &p.server))
            .flat_map(|p| &p.from)
            .filter(|o| o.file == source.file)
            .collect();
        if origins.is_empty() {
            continue;
        }
        let has_toolhost = out.plan.itself.iter().any(|o| o.file == source.file);
        match import::rewrite(&out.plan, source, &origins, &command, &args, has_toolhost) {
            Ok(r) => {
                say!(
                    "rewrote {} ({} → toolhost; original in {})",
                    r.file.display(),
                    r.removed.join(", "),
                    r.backup.display()
                );
                out.rewritten.push(r);
            }
            Err(e) => {
                say_err!("toolhost: {e}");
                out.failed.push(e);
            }
        }
    }
}

fn in_config(now: &Map<String, Value>, name: &str, server: &Map<String, Value>) -> bool {
    matches!(now.get(name), Some(Value::Object(have)) if import::same_server(have, server))
}

/// The args of the toolhost entry a frontend runs (a rewritten file's, a doctor's fix):
/// `mcp`, and `--socket PATH` when the daemon's socket is one a bridge does not find by
/// itself in an emptied environment (`protocol::found_without_environment`): Codex's
/// allow-list and the SDKs' default environment drop `XDG_RUNTIME_DIR` and
/// `TOOLHOST_SOCKET`, and the location file is gone while the daemon restarts.
pub fn bridge_args(socket: Option<&Path>) -> Vec<String> {
    let mut args = vec!["mcp".to_owned()];
    if let Some(s) = socket.filter(|s| !crate::protocol::found_without_environment(s)) {
        args.extend(["--socket".to_owned(), s.display().to_string()]);
    }
    args
}

/// With no daemon answering, the socket one would listen on when something names it
/// (`--socket`, `TOOLHOST_SOCKET`, config `listen.socket`): the defaults are left to the
/// bridge's own search.
fn named_socket(g: &Globals) -> Option<PathBuf> {
    match g.socket_paths().as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// The command a rewritten file runs: `toolhost` when that is on `PATH` (so a committed
/// `.mcp.json` works on every machine), else this binary's absolute path.
fn entry_command() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if crate::process::find_in(&path, Path::new(import::TOOLHOST)).is_some() {
        return import::TOOLHOST.to_owned();
    }
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| import::TOOLHOST.to_owned())
}

fn print_plan(out: &Outcome) {
    let plan = &out.plan;
    say!("config.json: {}", out.config.display());
    if plan.files.is_empty() && plan.errors.is_empty() {
        say!("no MCP servers found in any frontend's files");
    }
    for p in &plan.servers {
        let state = if p.in_config { "present" } else { "add" };
        let transport = match (p.server.get("type"), p.server.contains_key("url")) {
            (Some(t), _) if t == "sse" => "sse",
            (_, true) => "http",
            _ => "stdio",
        };
        let from: Vec<String> = p
            .from
            .iter()
            .map(|o| format!("{} {} {}", o.frontend.label(), o.file.display(), o.at))
            .collect();
        say!(
            "{state:<8}{:<20} {transport:<6} from {}",
            p.name,
            from.join("; ")
        );
        if p.from.len() > 1 {
            say!("{:8}merged: {} identical definitions", "", p.from.len());
        }
        if let Some(old) = &p.renamed_from {
            say!(
                "{:8}name clash: {old} is taken by a different definition, so this one is {}",
                "",
                p.name
            );
        }
        if !p.ignored.is_empty() {
            say!("{:8}not carried over: {}", "", p.ignored.join(", "));
        }
    }
    for s in &plan.skipped {
        say!(
            "skip    {:<20} {} {} {}: {}",
            s.from.name,
            s.from.frontend.label(),
            s.from.file.display(),
            s.from.at,
            s.reason
        );
    }
    for o in &plan.itself {
        say!(
            "itself  {:<20} {} {} {}: toolhost's own entry, not imported",
            o.name,
            o.frontend.label(),
            o.file.display(),
            o.at
        );
    }
    for e in &plan.errors {
        say_err!("toolhost: cannot read {e}");
    }
    let secrets: Vec<(&import::Planned, &import::Secret)> = plan
        .servers
        .iter()
        .filter(|p| !p.in_config)
        .flat_map(|p| p.secrets.iter().map(move |s| (p, s)))
        .collect();
    if !secrets.is_empty() {
        say!("");
        say!("secrets are referenced as ${{NAME}}, never copied into config.json: --apply writes");
        say!(
            "their values to {} (mode 0600, read with config.json); a value",
            crate::secrets::file_for(&out.config).display()
        );
        say!("only named there must be set in that file or the daemon's environment:");
        for (p, s) in secrets {
            let o = &p.from[0];
            if s.value.is_some() {
                say!(
                    "  {:<28} from {} at {}.{}",
                    format!("{}=***", s.var),
                    o.file.display(),
                    o.at,
                    s.field
                );
            } else {
                say!(
                    "  {:<24} named by {} at {} ({})",
                    s.var,
                    o.file.display(),
                    o.at,
                    s.field
                );
            }
        }
    }
}
