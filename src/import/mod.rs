//! `toolhost import`: the MCP servers the user's frontends already hold, brought into
//! config.json so each runs once for all of them.
//!
//! - [`sources`]: the files each frontend keeps servers in (the JSON ones in [`json`],
//!   Codex's TOML in [`codex`]);
//! - [`block`]: a frontend's block as ours, secrets taken out as `${NAME}`;
//! - [`plan`]: every block found, identical ones merged, a different block under a taken
//!   name renamed (`github-cursor`), what config.json already has marked so;
//! - [`rewrite`]: a frontend's file with the imported blocks replaced by the one
//!   `toolhost` entry, the original kept beside it as `<file>.toolhost-backup`.
//!
//! Writing config.json is not done here: the CLI goes through `mcp.add` (the daemon's, or
//! the same validated write offline), so an import is exactly a series of `mcp add`s.

mod block;
mod codex;
mod json;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

pub use block::Secret;

/// The name of the one entry `--rewrite` leaves in each frontend.
pub const TOOLHOST: &str = "toolhost";

/// Suffix of the copy `--rewrite` keeps of each file it changes.
pub const BACKUP_SUFFIX: &str = ".toolhost-backup";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Frontend {
    ClaudeCode,
    ClaudeDesktop,
    Cursor,
    VsCode,
    Codex,
    Gemini,
}

impl Frontend {
    pub fn label(self) -> &'static str {
        match self {
            Frontend::ClaudeCode => "Claude Code",
            Frontend::ClaudeDesktop => "Claude Desktop",
            Frontend::Cursor => "Cursor",
            Frontend::VsCode => "VS Code",
            Frontend::Codex => "Codex",
            Frontend::Gemini => "Gemini CLI",
        }
    }

    /// What a renamed clash gets as suffix (`github-cursor`).
    fn slug(self) -> &'static str {
        match self {
            Frontend::ClaudeCode => "claude",
            Frontend::ClaudeDesktop => "desktop",
            Frontend::Cursor => "cursor",
            Frontend::VsCode => "vscode",
            Frontend::Codex => "codex",
            Frontend::Gemini => "gemini",
        }
    }
}

/// One file a frontend keeps MCP servers in.
#[derive(Debug, Clone)]
pub struct Source {
    pub frontend: Frontend,
    pub file: PathBuf,
    block: Block,
}

/// Where a file holds its servers.
#[derive(Debug, Clone, Copy)]
enum Block {
    /// A JSON object under `key`; with `projects`, also `projects.<path>.<key>`.
    Json { key: &'static str, projects: bool },
    /// Codex's `[mcp_servers.*]` tables.
    CodexToml,
}

/// The files looked at, in precedence order (the first definition keeps its name): the
/// user's files under `home` (Codex under `codex_home`, default `~/.codex`), the project's
/// under `workspace`.
pub fn sources(home: &Path, workspace: &Path, codex_home: Option<PathBuf>) -> Vec<Source> {
    let json = |frontend, file: PathBuf, key, projects| Source {
        frontend,
        file,
        block: Block::Json { key, projects },
    };
    use Frontend::*;
    vec![
        json(ClaudeCode, home.join(".claude.json"), "mcpServers", true),
        json(ClaudeCode, workspace.join(".mcp.json"), "mcpServers", false),
        json(
            ClaudeDesktop,
            home.join(".config/Claude/claude_desktop_config.json"),
            "mcpServers",
            false,
        ),
        json(Cursor, home.join(".cursor/mcp.json"), "mcpServers", false),
        json(
            Cursor,
            workspace.join(".cursor/mcp.json"),
            "mcpServers",
            false,
        ),
        json(VsCode, workspace.join(".vscode/mcp.json"), "servers", false),
        Source {
            frontend: Codex,
            file: codex_home
                .unwrap_or_else(|| home.join(".codex"))
                .join("config.toml"),
            block: Block::CodexToml,
        },
        json(
            Gemini,
            home.join(".gemini/settings.json"),
            "mcpServers",
            false,
        ),
    ]
}

/// One server block as found.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The keys leading to the block's servers object (`["projects", "/p", "mcpServers"]`).
    pub at: Vec<String>,
    pub name: String,
    pub raw: Value,
}

/// Reads one source: `Ok(None)` when the file is not there.
pub fn read(source: &Source) -> Result<Option<Vec<Entry>>, String> {
    let text = match std::fs::read_to_string(&source.file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", source.file.display())),
    };
    match source.block {
        Block::Json { .. } => json::read(source, &text),
        Block::CodexToml => codex::read(&text),
    }
    .map(Some)
    .map_err(|e| format!("{}: {e}", source.file.display()))
}

/// Where one imported block came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    pub frontend: Frontend,
    pub file: PathBuf,
    /// The path of the block in the file, for people: `mcpServers.github`.
    pub at: String,
    pub name: String,
    #[serde(skip)]
    keys: Vec<String>,
}

/// A server the import brings in (or finds already there).
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    /// Its name in config.json.
    pub name: String,
    pub server: Map<String, Value>,
    /// Every block it came from; more than one when identical blocks were merged.
    pub from: Vec<Origin>,
    /// config.json already has this exact block under `name`.
    pub in_config: bool,
    /// The name it had when another, different block took that name first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
    /// Secrets referenced as `${var}`: the daemon's environment must hold them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<Secret>,
    /// Fields of the frontend's block toolhost does not use.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
}

/// A block that is not imported, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub from: Origin,
    pub reason: String,
}

/// What `toolhost import` would do.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// Files that hold servers.
    pub files: Vec<PathBuf>,
    pub servers: Vec<Planned>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Files that could not be read or parsed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Reads every source and plans against `existing` (config.json's server blocks).
pub fn plan(sources: &[Source], existing: &Map<String, Value>) -> Plan {
    let mut plan = Plan::default();
    for source in sources {
        let entries = match read(source) {
            Ok(Some(entries)) => entries,
            Ok(None) => continue,
            Err(e) => {
                plan.errors.push(e);
                continue;
            }
        };
        if !entries.is_empty() {
            plan.files.push(source.file.clone());
        }
        for entry in entries {
            let origin = Origin {
                frontend: source.frontend,
                file: source.file.clone(),
                at: crate::config::JsonPath(
                    entry
                        .at
                        .iter()
                        .chain([&entry.name])
                        .map(|k| crate::config::Seg::Key(k.clone()))
                        .collect(),
                )
                .to_string(),
                name: entry.name.clone(),
                keys: entry.at.clone(),
            };
            if is_toolhost(&entry) {
                continue;
            }
            match block::convert(source.frontend, &entry.name, &entry.raw) {
                Ok(c) => place(&mut plan, existing, origin, c),
                Err(reason) => plan.skipped.push(Skipped {
                    from: origin,
                    reason,
                }),
            }
        }
    }
    plan
}

/// Our own entry (from an earlier `--rewrite`, or added by hand) is not imported.
fn is_toolhost(entry: &Entry) -> bool {
    let command = entry.raw.get("command").and_then(Value::as_str);
    let first_arg = entry
        .raw
        .get("args")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str);
    entry.name == TOOLHOST
        || (command.is_some_and(|c| Path::new(c).file_name() == Some(TOOLHOST.as_ref()))
            && first_arg == Some("mcp"))
}

/// Adds one converted block: merged into an identical one of the same name, else under
/// its name, else (a different block holds the name) as `<name>-<frontend>`.
fn place(plan: &mut Plan, existing: &Map<String, Value>, origin: Origin, mut c: block::Converted) {
    let wanted = valid_name(&origin.name);
    let mut name = wanted.clone();
    for n in 0.. {
        if n > 0 {
            name = if n == 1 {
                format!("{wanted}-{}", origin.frontend.slug())
            } else {
                format!("{wanted}-{}-{n}", origin.frontend.slug())
            };
            if n == 1 {
                suffix_secrets(&mut c, origin.frontend.slug());
            }
        }
        if let Some(p) = plan.servers.iter_mut().find(|p| p.name == name) {
            if p.server == c.server && same_values(&p.secrets, &c.secrets) {
                p.from.push(origin);
                return;
            }
            continue;
        }
        let in_config = match existing.get(&name) {
            Some(Value::Object(have)) if *have == c.server => true,
            Some(_) => continue,
            None => false,
        };
        plan.servers.push(Planned {
            renamed_from: (name != origin.name).then(|| origin.name.clone()),
            name,
            server: c.server,
            from: vec![origin],
            in_config,
            secrets: c.secrets,
            ignored: c.ignored,
        });
        return;
    }
}

/// A frontend's server name as a config.json one (letters, digits, `_`, `-`).
fn valid_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() {
        "server".to_owned()
    } else {
        s
    }
}

fn same_values(a: &[Secret], b: &[Secret]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A renamed block's secrets get their own variables (`GITHUB_TOKEN_CURSOR`): its values
/// differ from those of the block that kept the name.
fn suffix_secrets(c: &mut block::Converted, slug: &str) {
    for s in c.secrets.iter_mut().filter(|s| s.value.is_some()) {
        let new = format!("{}_{}", s.var, block::env_name(slug));
        let (from, to) = (format!("${{{}}}", s.var), format!("${{{new}}}"));
        for (key, value) in c.server.iter_mut() {
            if key != "env" && key != "headers" {
                continue;
            }
            for v in value
                .as_object_mut()
                .into_iter()
                .flat_map(|m| m.values_mut())
            {
                if let Value::String(text) = v {
                    *text = text.replace(&from, &to);
                }
            }
        }
        s.var = new;
    }
}

/// The `toolhost` entry a frontend gets: `command mcp`, VS Code with its `type`.
fn entry_json(frontend: Frontend, command: &str) -> Value {
    let mut m = Map::new();
    if frontend == Frontend::VsCode {
        m.insert("type".into(), "stdio".into());
    }
    m.insert("command".into(), command.into());
    m.insert("args".into(), Value::Array(vec!["mcp".into()]));
    Value::Object(m)
}

/// The result of rewriting one file.
#[derive(Debug, Clone, Serialize)]
pub struct Rewritten {
    pub file: PathBuf,
    pub backup: PathBuf,
    /// The servers taken out (by their name in the file).
    pub removed: Vec<String>,
}

/// Rewrites `source`'s file: the blocks `origins` (those of this file whose server is now
/// in config.json) out, the `toolhost` entry (running `command mcp`) in, the original kept
/// as `<file>.toolhost-backup`. An existing backup is never overwritten: it may be the
/// only copy of the original, so the file is left alone and the error says so.
pub fn rewrite(source: &Source, origins: &[&Origin], command: &str) -> Result<Rewritten, String> {
    let file = &source.file;
    let backup = PathBuf::from(format!("{}{BACKUP_SUFFIX}", file.display()));
    if std::fs::symlink_metadata(&backup).is_ok() {
        return Err(format!(
            "{} exists (from an earlier --rewrite): move it away to rewrite {} again",
            backup.display(),
            file.display()
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let new = match source.block {
        Block::Json { .. } => {
            let remove: Vec<(Vec<String>, String)> = origins
                .iter()
                .map(|o| (o.keys.clone(), o.name.clone()))
                .collect();
            json::rewrite(source, &text, &remove, entry_json(source.frontend, command))
        }
        Block::CodexToml => {
            let remove: Vec<String> = origins.iter().map(|o| o.name.clone()).collect();
            codex::rewrite(&text, &remove, command, &["mcp"])
        }
    }
    .map_err(|e| format!("{}: {e}", file.display()))?;
    // The backup keeps the original's mode: these files hold tokens.
    std::fs::copy(file, &backup).map_err(|e| format!("cannot back up {}: {e}", file.display()))?;
    crate::atomic_file::write_atomic(file, new.as_bytes(), crate::atomic_file::Durability::Synced)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(Rewritten {
        file: file.clone(),
        backup,
        removed: origins.iter().map(|o| o.name.clone()).collect(),
    })
}
