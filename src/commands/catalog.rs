//! Every commands folder scanned into one immutable catalog, with the built-in commands
//! the files do not override; built once per change and read by every request (the
//! `list_commands` answer is serialised here, once).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::builtin::Builtin;
use super::command::{self, Body, Command, CommandError};
use super::Root;
use crate::protocol::{ListCommandsResult, TrustItem, TrustKind};
use crate::trust::Trust;

/// The commands in force, sorted by name, and the files skipped on the way.
pub struct Catalog {
    commands: Vec<Arc<Command>>,
    by_name: HashMap<String, usize>,
    by_prompt: HashMap<String, usize>,
    errors: Vec<CommandError>,
    /// Later definitions of a name, each with the path that keeps it.
    clashes: Vec<String>,
    etag: String,
    list_json: Box<RawValue>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::scan(&[], None).0
    }
}

impl Catalog {
    /// Scans `roots` in order (a missing one is skipped; files by path order, so the
    /// result is stable), then adds each built-in command no file overrides. With `trust`,
    /// a workspace's command file is only hashed until the gate admits it (it is not
    /// parsed, listed or offered as a prompt); what waits is returned.
    pub fn scan(roots: &[Root], trust: Option<&Trust>) -> (Catalog, Vec<TrustItem>) {
        let mut commands: Vec<Command> = Vec::new();
        let mut errors = Vec::new();
        let mut clashes = Vec::new();
        let mut waiting = Vec::new();
        for root in roots {
            let gate = trust.filter(|_| root.source.is_workspace());
            for rel in command_files(&root.path) {
                // Read once: the gate hashes the very bytes that are then parsed, so a file
                // swapped after its check is never what gets loaded.
                let bytes = match command::read(&root.path, &rel) {
                    Ok(b) => b,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                if let Some(trust) = gate {
                    let file = root.path.join(&rel);
                    let workspace = crate::trust::workspace_of(&root.path);
                    let digest = crate::trust::bytes_digest(&bytes);
                    if let Err(w) = trust.check(workspace, TrustKind::Command, &file, &digest) {
                        waiting.push(w);
                        continue;
                    }
                }
                match command::parse(&root.path, &rel, root.source, bytes) {
                    Ok(c) => match commands.iter().find(|k| k.entry.name == c.entry.name) {
                        Some(first) => clashes.push(format!(
                            "command '{}' is defined twice: {} is used, {} is ignored",
                            c.entry.name,
                            first.entry.path.as_deref().unwrap_or_default(),
                            root.path.join(&rel).display()
                        )),
                        None => commands.push(c),
                    },
                    Err(e) => errors.push(e),
                }
            }
        }
        for b in Builtin::ALL {
            let entry = b.entry();
            if !commands.iter().any(|c| c.entry.name == entry.name) {
                commands.push(Command {
                    entry,
                    body: Body::Builtin(b),
                });
            }
        }
        commands.sort_by(|a, b| a.entry.name.cmp(&b.entry.name));
        (Catalog::build(commands, errors, clashes), waiting)
    }

    fn build(commands: Vec<Command>, errors: Vec<CommandError>, clashes: Vec<String>) -> Catalog {
        let commands: Vec<Arc<Command>> = commands.into_iter().map(Arc::new).collect();
        let index = |key: fn(&Command) -> &String| {
            commands
                .iter()
                .enumerate()
                .map(|(i, c)| (key(c).clone(), i))
                .collect::<HashMap<_, _>>()
        };
        let by_name = index(|c| &c.entry.name);
        let by_prompt = index(|c| &c.entry.prompt);
        let mut h = Sha256::new();
        for c in &commands {
            // Entries always serialise (strings and booleans).
            h.update(serde_json::to_vec(&c.entry).unwrap_or_default());
            if let Body::Template { text, .. } = &c.body {
                h.update(text.as_bytes());
            }
            h.update([0]);
        }
        let etag = format!("sha256:{}", hex::encode(h.finalize()));
        let list = ListCommandsResult {
            commands: commands.iter().map(|c| c.entry.clone()).collect(),
            etag: etag.clone(),
        };
        let list_json = serde_json::value::to_raw_value(&list).unwrap_or_default();
        Catalog {
            commands,
            by_name,
            by_prompt,
            errors,
            clashes,
            etag,
            list_json,
        }
    }

    /// The `list_commands` answer, as serialised once.
    pub fn list_json(&self) -> &RawValue {
        &self.list_json
    }

    pub fn commands(&self) -> &[Arc<Command>] {
        &self.commands
    }

    /// By name as listed (`mcp status`); a leading `/` is ignored.
    pub fn get(&self, name: &str) -> Option<&Arc<Command>> {
        let name = name.strip_prefix('/').unwrap_or(name).trim();
        self.by_name.get(name).map(|&i| &self.commands[i])
    }

    /// By MCP prompt name (`mcp_status`).
    pub fn by_prompt(&self, prompt: &str) -> Option<&Arc<Command>> {
        self.by_prompt.get(prompt).map(|&i| &self.commands[i])
    }

    pub fn len(&self) -> usize {
        self.commands.len()
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// What `host.health` shows: each skipped file as `<file>: <field>: <reason>`, then
    /// each name defined twice, with both paths.
    pub fn problems(&self) -> impl Iterator<Item = String> + '_ {
        self.errors
            .iter()
            .map(ToString::to_string)
            .chain(self.clashes.iter().cloned())
    }
}

/// The command files of `root`, relative to it and sorted: `NAME.md`, and `NAME/SUB.md`
/// one level down (the subcommands). Hidden files (an editor's `.x.md.swp`) are not.
fn command_files(root: &Path) -> Vec<PathBuf> {
    let visible = |e: &std::fs::DirEntry| !e.file_name().to_string_lossy().starts_with('.');
    let is_md = |p: &Path| p.extension().is_some_and(|x| x == "md" || x == "toml");
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for e in entries.filter_map(Result::ok).filter(visible) {
        let path = e.path();
        let name = PathBuf::from(e.file_name());
        if path.is_dir() {
            let Ok(subs) = std::fs::read_dir(&path) else {
                continue;
            };
            files.extend(
                subs.filter_map(Result::ok)
                    .filter(visible)
                    .map(|s| name.join(s.file_name()))
                    .filter(|rel| is_md(rel) && !root.join(rel).is_dir()),
            );
        } else if is_md(&name) {
            files.push(name);
        }
    }
    files.sort();
    files
}
