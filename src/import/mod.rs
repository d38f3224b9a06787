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

/// The largest frontend file read (`~/.claude.json` keeps every project's history).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Reads a frontend's file (symlinks followed, at most [`MAX_FILE_BYTES`], never a FIFO or
/// device): `Ok(None)` when it is not there.
fn read_text(file: &Path) -> Result<Option<String>, String> {
    use crate::safe_read::{read_path, ReadError};
    match read_path(file, MAX_FILE_BYTES) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| format!("{} is not UTF-8", file.display())),
        Err(ReadError::NotFound) => Ok(None),
        Err(e) => Err(format!("{} {e}", file.display())),
    }
}

/// The SHA-256 of a frontend's file as read.
type Hash = [u8; 32];

/// Reads one source: `Ok(None)` when the file is not there; else its entries and the hash
/// of what was read (a rewrite refuses a file that changed since).
pub fn read(source: &Source) -> Result<Option<(Vec<Entry>, Hash)>, String> {
    let Some(text) = read_text(&source.file)? else {
        return Ok(None);
    };
    match source.block {
        Block::Json { .. } => json::read(source, &text),
        Block::CodexToml => codex::read(&text),
    }
    .map(|entries| Some((entries, hash(&text))))
    .map_err(|e| format!("{}: {e}", source.file.display()))
}

fn hash(text: &str) -> Hash {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).into()
}

/// What tells toolhost's own entries from upstream servers.
#[derive(Debug, Clone, Default)]
pub struct Itself {
    /// The daemon's `listen.tcp` (`host:port`): an HTTP entry or an `mcp-remote` URL
    /// there is toolhost's own `/mcp`.
    pub listen_tcp: Option<String>,
    /// This binary (an absolute path to it, whatever its name, is toolhost).
    pub exe: Option<PathBuf>,
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
    /// What runs: the block with its secrets' values in place of their references. Two
    /// blocks that run the same are one server, whatever their names.
    #[serde(skip)]
    runs: Map<String, Value>,
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
    /// toolhost's own entries (an earlier `--rewrite`, the README's HTTP entry): never
    /// imported.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub itself: Vec<Origin>,
    /// Files that could not be read or parsed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The hash of each file as read, so `--rewrite` can refuse one changed since.
    #[serde(skip)]
    read: Vec<(PathBuf, Hash)>,
}

/// Reads every source and plans against `existing` (config.json's server blocks).
pub fn plan(sources: &[Source], existing: &Map<String, Value>, itself: &Itself) -> Plan {
    let mut plan = Plan::default();
    for source in sources {
        let entries = match read(source) {
            Ok(Some((entries, hash))) => {
                plan.read.push((source.file.clone(), hash));
                entries
            }
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
            if is_toolhost(&entry, itself) {
                plan.itself.push(origin);
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

/// Our own entry is not imported: one named `toolhost`, one running this binary (by any
/// path) or a `toolhost` binary with `mcp`, or one whose URL — in `url`, or among the args
/// of a stdio bridge such as `mcp-remote` — is the daemon's own TCP listener.
pub fn is_toolhost(entry: &Entry, itself: &Itself) -> bool {
    let raw = &entry.raw;
    let command = raw.get("command").and_then(Value::as_str);
    let args: Vec<&str> = raw
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let ours = |url: &str| {
        itself
            .listen_tcp
            .as_deref()
            .is_some_and(|tcp| crate::config::is_own_listener(url, tcp))
    };
    let this_binary = |c: &str| {
        let c = Path::new(c);
        c.is_absolute()
            && itself
                .exe
                .as_deref()
                .is_some_and(|exe| c == exe || std::fs::canonicalize(c).is_ok_and(|c| c == exe))
    };
    entry.name == TOOLHOST
        || command.is_some_and(|c| {
            this_binary(c)
                || (Path::new(c).file_name() == Some(TOOLHOST.as_ref())
                    && args.first() == Some(&"mcp"))
        })
        || ["url", "httpUrl", "serverUrl"]
            .iter()
            .filter_map(|k| raw.get(*k).and_then(Value::as_str))
            .any(ours)
        || (command.is_some() && args.iter().any(|a| ours(a)))
}

/// Adds one converted block: merged into a planned one that runs the same (whatever its
/// name); else marked present when config.json holds it; else under its name, or (a
/// different block holds the name) as `<name>-<frontend>`.
fn place(plan: &mut Plan, existing: &Map<String, Value>, origin: Origin, mut c: block::Converted) {
    let runs = runs(&c);
    if let Some(p) = plan.servers.iter_mut().find(|p| p.runs == runs) {
        p.from.push(origin);
        return;
    }
    if let Some((name, _)) = existing.iter().find(|(_, have)| match have {
        Value::Object(have) => same_server(have, &c.server),
        _ => false,
    }) {
        plan.servers.push(Planned {
            renamed_from: (*name != origin.name).then(|| origin.name.clone()),
            name: name.clone(),
            server: c.server,
            from: vec![origin],
            in_config: true,
            secrets: c.secrets,
            ignored: c.ignored,
            runs,
        });
        return;
    }
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
        if plan.servers.iter().any(|p| p.name == name) || existing.contains_key(&name) {
            continue;
        }
        // A variable another server's secret holds with another value gets this one's name.
        let clash = |s: &Secret| {
            plan.servers
                .iter()
                .flat_map(|p| &p.secrets)
                .any(|o| o.var == s.var && o.value != s.value)
        };
        if c.secrets.iter().any(|s| s.value.is_some() && clash(s)) {
            suffix_secrets(&mut c, &name);
        }
        plan.servers.push(Planned {
            renamed_from: (name != origin.name).then(|| origin.name.clone()),
            name,
            server: c.server,
            from: vec![origin],
            in_config: false,
            secrets: c.secrets,
            ignored: c.ignored,
            runs,
        });
        return;
    }
}

/// The block with each secret's value in place of its `${var}` reference.
fn runs(c: &block::Converted) -> Map<String, Value> {
    fn fill(v: &mut Value, secrets: &[Secret]) {
        match v {
            Value::String(text) => {
                for s in secrets {
                    if let Some(value) = &s.value {
                        *text = text.replace(&format!("${{{}}}", s.var), value);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| fill(v, secrets)),
            Value::Object(m) => m.values_mut().for_each(|v| fill(v, secrets)),
            _ => {}
        }
    }
    let mut server = c.server.clone();
    server.values_mut().for_each(|v| fill(v, &c.secrets));
    server
}

/// Whether two server blocks (config.json's, or planned) are the same once each
/// frontend's spelling is normalised ([`block::normalise`]).
pub fn same_server(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    block::normalise(&mut a);
    block::normalise(&mut b);
    a == b
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

/// A renamed block's secrets get their own variables (`GITHUB_TOKEN_CURSOR`): its values
/// differ from those of the block that kept the name.
fn suffix_secrets(c: &mut block::Converted, slug: &str) {
    for s in c.secrets.iter_mut().filter(|s| s.value.is_some()) {
        let new = format!("{}_{}", s.var, block::env_name(slug));
        let (from, to) = (format!("${{{}}}", s.var), format!("${{{new}}}"));
        for value in c.server.values_mut() {
            replace_in(value, &from, &to);
        }
        s.var = new;
    }
}

/// Replaces `from` by `to` in every string of `v`.
fn replace_in(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(text) => *text = text.replace(from, to),
        Value::Array(a) => a.iter_mut().for_each(|v| replace_in(v, from, to)),
        Value::Object(m) => m.values_mut().for_each(|v| replace_in(v, from, to)),
        _ => {}
    }
}

/// The `toolhost` entry a frontend gets: `command args…`, VS Code with its `type`.
fn entry_json(frontend: Frontend, command: &str, args: &[&str]) -> Value {
    let mut m = Map::new();
    if frontend == Frontend::VsCode {
        m.insert("type".into(), "stdio".into());
    }
    m.insert("command".into(), command.into());
    m.insert(
        "args".into(),
        Value::Array(args.iter().map(|a| Value::from(*a)).collect()),
    );
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
/// in config.json) out, the `toolhost` entry (running `command args…`) in unless the file
/// already has one of toolhost's own (`has_toolhost`), the original kept as
/// `<file>.toolhost-backup`. An existing backup is never overwritten: it may be the only
/// copy of the original, so the file is left alone and the error says so. A file changed
/// since the plan read it is refused (the plan is stale), and a symlink (a dotfiles
/// repository) is written through, never replaced by a file.
pub fn rewrite(
    plan: &Plan,
    source: &Source,
    origins: &[&Origin],
    command: &str,
    args: &[&str],
    has_toolhost: bool,
) -> Result<Rewritten, String> {
    let file = &source.file;
    let backup = PathBuf::from(format!("{}{BACKUP_SUFFIX}", file.display()));
    if std::fs::symlink_metadata(&backup).is_ok() {
        return Err(format!(
            "{} exists (from an earlier --rewrite): move it away to rewrite {} again",
            backup.display(),
            file.display()
        ));
    }
    let changed = || {
        format!(
            "{} changed since it was read: not rewritten (run the import again)",
            file.display()
        )
    };
    let expected = plan
        .read
        .iter()
        .find(|(f, _)| f == file)
        .map(|(_, h)| *h)
        .ok_or_else(changed)?;
    // The file itself, not a symlink to it: the link stays, its target gets the new text.
    let target = std::fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let text = read_text(&target)?.ok_or_else(changed)?;
    if hash(&text) != expected {
        return Err(changed());
    }
    let new = match source.block {
        Block::Json { .. } => {
            let remove: Vec<(Vec<String>, String)> = origins
                .iter()
                .map(|o| (o.keys.clone(), o.name.clone()))
                .collect();
            let entry = (!has_toolhost).then(|| entry_json(source.frontend, command, args));
            json::rewrite(source, &text, &remove, entry)
        }
        Block::CodexToml => {
            let remove: Vec<String> = origins.iter().map(|o| o.name.clone()).collect();
            let entry = (!has_toolhost).then_some((command, args));
            codex::rewrite(&text, &remove, entry)
        }
    }
    .map_err(|e| format!("{}: {e}", file.display()))?;
    // The backup keeps the original's mode: these files hold tokens. It holds exactly the
    // text checked above.
    std::fs::write(&backup, &text)
        .and_then(|()| std::fs::set_permissions(&backup, std::fs::metadata(&target)?.permissions()))
        .map_err(|e| format!("cannot back up {}: {e}", file.display()))?;
    // Once more right before the write: the window for a frontend's own save is the
    // time this function took, not the time since the plan.
    if read_text(&target)?.is_none_or(|t| hash(&t) != expected) {
        let _ = std::fs::remove_file(&backup);
        return Err(changed());
    }
    crate::atomic_file::write_atomic(
        &target,
        new.as_bytes(),
        crate::atomic_file::Durability::Synced,
    )
    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(Rewritten {
        file: file.clone(),
        backup,
        removed: origins.iter().map(|o| o.name.clone()).collect(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A frontend saving its file after the plan read it (a race no outside test can
    /// time) makes the rewrite refuse, leaving the file and no backup; a symlinked file
    /// is written through.
    #[test]
    fn a_file_changed_since_the_plan_is_not_rewritten_and_links_stay_links() {
        let dir = tempfile::tempdir().unwrap();
        let (home, ws) = (dir.path().join("home"), dir.path().join("ws"));
        let dotfiles = dir.path().join("dotfiles/cursor.json");
        std::fs::create_dir_all(dotfiles.parent().unwrap()).unwrap();
        std::fs::create_dir_all(home.join(".cursor")).unwrap();
        let original = r#"{"mcpServers": {"a": {"command": "a-mcp"}}}"#;
        std::fs::write(&dotfiles, original).unwrap();
        let link = home.join(".cursor/mcp.json");
        std::os::unix::fs::symlink(&dotfiles, &link).unwrap();
        let sources = sources(&home, &ws, None);
        let cursor = sources.iter().find(|s| s.file == link).unwrap();
        let backup = PathBuf::from(format!("{}{BACKUP_SUFFIX}", link.display()));

        let plan1 = plan(&sources, &Map::new(), &Itself::default());
        let origins: Vec<&Origin> = plan1.servers.iter().flat_map(|p| &p.from).collect();
        assert_eq!(origins.len(), 1);
        let saved = r#"{"mcpServers": {"a": {"command": "a-mcp"}, "b": {"command": "b"}}}"#;
        std::fs::write(&dotfiles, saved).unwrap();
        let e = rewrite(&plan1, cursor, &origins, TOOLHOST, &["mcp"], false).unwrap_err();
        assert!(e.contains("changed since it was read"), "{e}");
        assert_eq!(std::fs::read_to_string(&dotfiles).unwrap(), saved);
        assert!(!backup.exists());

        let plan2 = plan(&sources, &Map::new(), &Itself::default());
        let origins: Vec<&Origin> = plan2
            .servers
            .iter()
            .filter(|p| p.name == "a")
            .flat_map(|p| &p.from)
            .collect();
        rewrite(&plan2, cursor, &origins, TOOLHOST, &["mcp"], false).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let now: Value =
            serde_json::from_str(&std::fs::read_to_string(&dotfiles).unwrap()).unwrap();
        assert_eq!(
            now["mcpServers"],
            serde_json::json!({"b": {"command": "b"}, "toolhost": {"command": "toolhost", "args": ["mcp"]}})
        );
        assert_eq!(std::fs::read_to_string(&backup).unwrap(), saved);
    }
}
