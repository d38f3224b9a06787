//! The workspace-trust gate: the one place every file-defined source asks whether an item a
//! workspace brings may be used (proto-docs/trust.md).
//!
//! A workspace — the daemon's, or a session's root — can be written by the programs the
//! host runs there (a sandboxed `bash` in `workspace-write`), and a cloned repository is
//! somebody else's work. So everything it brings — program tools (`.toolhost/tools/`), JS/TS
//! modules (`.toolhost/tools`, `.musepi/tools`, `.claude/tools`, `.codex/tools`), skills
//! (`.toolhost/skills`, `.agents/skills`, `.claude/skills`) and commands
//! (`.toolhost/commands`) — is untrusted until the user approves it: the sources do not
//! parse, import, run, list or show it before [`Trust::check`] admits it. They read only
//! what the digest needs ([`folder_digest`]; a command is hashed from the bytes it is then
//! parsed from, [`bytes_digest`]; a module's own digest).
//!
//! An approval is either of one item, keyed by (kind, absolute path) and bound to the digest
//! approved, so a changed item waits again; or of a folder as a whole ("trust this folder",
//! as Claude Code, Gemini CLI and VS Code ask), which admits every item of every workspace
//! beneath it, changed or not. Decisions are kept in `trust.json` in the data dir (small,
//! rewritten only on a decision, readable by an operator, like `pins.json`). The user's
//! own folders (config paths, `$XDG_CONFIG_HOME/toolhost`, `~/.claude`, …) are not
//! workspaces and never ask; nor does a workspace that is `$HOME` itself, whose folders are
//! the user's own.
//!
//! Each source reports, per scan, what it held back ([`Trust::report`]); `host.health`,
//! `approvals.list`, `trust.list`, the CLI (`toolhost trust`) and the operator page show it,
//! and a decision rescans the sources.

mod digest;
mod files;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use digest::{bytes_digest, folder_digest, folder_digest_copying, folder_digest_keeping};

use crate::atomic_file::{write_atomic, Durability};
use crate::lock;
use crate::protocol::{TrustDiffResult, TrustItem, TrustKind, TrustListResult};

/// The largest `trust.json` read.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The gate of one daemon (cheap to clone: one shared state).
#[derive(Clone)]
pub struct Trust(Arc<Inner>);

struct Inner {
    path: Option<PathBuf>,
    /// `$HOME`, canonical: a workspace that is the user's home is the user's own.
    home: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    decisions: Decisions,
    /// Why `trust.json` could not be read; while `Some`, nothing is written (the file
    /// stays for the operator) and only folders trusted since start are trusted.
    damage: Option<String>,
    /// What each kind's source held back at its last scan.
    waiting: BTreeMap<TrustKind, Vec<TrustItem>>,
}

/// What `trust.json` holds.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decisions {
    /// Folders trusted as a whole, canonical.
    #[serde(default)]
    folders: Vec<PathBuf>,
    /// Items approved one by one.
    #[serde(default)]
    items: Vec<TrustItem>,
}

impl Default for Trust {
    fn default() -> Self {
        Trust::in_memory()
    }
}

impl Trust {
    /// A gate whose decisions live in memory only (the CLI's one-shot scans, unit tests).
    pub fn in_memory() -> Trust {
        Trust::with(None, Decisions::default(), None)
    }

    /// Opens (or starts) the decisions in `path`. A file that cannot be read does not keep
    /// the daemon from starting: nothing it held is trusted, and it is not overwritten.
    pub fn open(path: &Path) -> Trust {
        let (decisions, damage) = match load(path) {
            Ok(d) => (d, None),
            Err(e) => {
                tracing::error!(file = %path.display(), "{e}; workspace items wait for approval again until it is repaired");
                (Decisions::default(), Some(e))
            }
        };
        Trust::with(Some(path.to_path_buf()), decisions, damage)
    }

    fn with(path: Option<PathBuf>, decisions: Decisions, damage: Option<String>) -> Trust {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .and_then(|h| PathBuf::from(h).canonicalize().ok());
        Trust(Arc::new(Inner {
            path,
            home,
            state: Mutex::new(State {
                decisions,
                damage,
                waiting: BTreeMap::new(),
            }),
        }))
    }

    /// Whether the `kind` item at `path` (a folder or file of `workspace`) with `digest` may
    /// be used; if not, the item as it waits (for the source's [`Trust::report`]).
    pub fn check(
        &self,
        workspace: &Path,
        kind: TrustKind,
        path: &Path,
        digest: &str,
    ) -> Result<(), TrustItem> {
        let canonical = workspace.canonicalize().ok();
        let ws = canonical.as_deref().unwrap_or(workspace);
        if self.0.home.as_deref() == Some(ws) {
            return Ok(());
        }
        let item = TrustItem {
            workspace: workspace.display().to_string(),
            kind,
            item: path
                .strip_prefix(workspace)
                .unwrap_or(path)
                .display()
                .to_string(),
            path: path.display().to_string(),
            digest: digest.to_owned(),
        };
        let st = lock(&self.0.state);
        let folder_trusted = st.decisions.folders.iter().any(|f| ws.starts_with(f));
        let approved = st
            .decisions
            .items
            .iter()
            .any(|a| a.kind == kind && a.path == item.path && a.digest == digest);
        if folder_trusted || approved {
            Ok(())
        } else {
            Err(item)
        }
    }

    /// What the source of `kind` held back at the scan just done (replacing its last report).
    pub fn report(&self, kind: TrustKind, mut waiting: Vec<TrustItem>) {
        waiting.dedup_by(|a, b| a.path == b.path);
        for w in &waiting {
            tracing::debug!(kind = kind.as_str(), path = %w.path, "waits for workspace trust");
        }
        lock(&self.0.state).waiting.insert(kind, waiting);
    }

    /// Every item waiting now, by kind.
    pub fn waiting(&self) -> Vec<TrustItem> {
        lock(&self.0.state)
            .waiting
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    pub fn list(&self) -> TrustListResult {
        let st = lock(&self.0.state);
        TrustListResult {
            waiting: st.waiting.values().flatten().cloned().collect(),
            folders: st
                .decisions
                .folders
                .iter()
                .map(|f| f.display().to_string())
                .collect(),
            approved: st.decisions.items.clone(),
        }
    }

    /// Why `trust.json` cannot be read, while it cannot.
    pub fn damage(&self) -> Option<String> {
        lock(&self.0.state).damage.clone()
    }

    /// Approves the waiting items that `pick` selects, with the digest they waited with
    /// (an item changed since is seen with a new digest at the next scan, and waits again).
    fn approve_where(&self, pick: impl Fn(&TrustItem) -> bool) -> Result<Vec<TrustItem>, String> {
        let mut st = lock(&self.0.state);
        if let Some(damage) = &st.damage {
            return Err(format!(
                "nothing can be approved while {damage}; repair or delete the file"
            ));
        }
        let mut admitted = Vec::new();
        for list in st.waiting.values_mut() {
            list.retain(|w| {
                if pick(w) {
                    admitted.push(w.clone());
                    false
                } else {
                    true
                }
            });
        }
        for a in &admitted {
            st.decisions
                .items
                .retain(|old| !(old.kind == a.kind && old.path == a.path));
            st.decisions.items.push(a.clone());
        }
        if !admitted.is_empty() {
            self.save(&st.decisions)?;
        }
        Ok(admitted)
    }

    /// Approves the waiting item at `path`, or every waiting item beneath `path`. Refused
    /// when nothing waits there. Reads the admitted items' files (to keep them for a later
    /// review), so it is called off the async runtime.
    pub fn approve(&self, path: &Path) -> Result<Vec<TrustItem>, String> {
        let admitted = self.approve_where(|w| Path::new(&w.path).starts_with(path))?;
        if admitted.is_empty() {
            return Err(format!(
                "nothing waits for approval at {} (`toolhost trust` lists what does)",
                path.display()
            ));
        }
        self.keep_files(&admitted);
        Ok(admitted)
    }

    /// Approves the waiting program tools and modules named `name` ([`names_tool`]): what
    /// `tools.approve NAME` means for a tool that waits before it could even be read.
    /// Reads files as [`Trust::approve`] does.
    pub fn approve_tool_named(&self, name: &str) -> Result<Vec<TrustItem>, String> {
        let admitted = self.approve_where(|w| names_tool(w, name))?;
        self.keep_files(&admitted);
        Ok(admitted)
    }

    /// Where the files of the item approved with `digest` are kept (none for a gate kept
    /// in memory).
    fn kept_path(&self, digest: &str) -> Option<PathBuf> {
        let dir = self.0.path.as_deref()?.parent()?.join("trust-files");
        Some(dir.join(format!("{digest}.json")))
    }

    /// Keeps the files of items just approved, if they still are what was approved, and
    /// drops the kept files no decision names any more. Failures only cost the review.
    fn keep_files(&self, admitted: &[TrustItem]) {
        for a in admitted {
            let Some(target) = self.kept_path(&a.digest) else {
                return;
            };
            let path = Path::new(&a.path);
            let kept = files::read(a.kind, path)
                .ok()
                .filter(|f| files::matches(a.kind, path, f, &a.digest))
                .and_then(|f| serde_json::to_vec(&f).ok());
            let Some(bytes) = kept else {
                tracing::debug!(path = %a.path, "approved item's files not kept: they changed or cannot be read");
                continue;
            };
            let written = target
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| write_atomic(&target, &bytes, Durability::Atomic));
            if let Err(e) = written {
                tracing::warn!(file = %target.display(), "cannot keep an approved item's files: {e}");
            }
        }
        let named: Vec<String> = lock(&self.0.state)
            .decisions
            .items
            .iter()
            .map(|i| format!("{}.json", i.digest))
            .collect();
        let Some(dir) = self
            .kept_path("x")
            .and_then(|p| p.parent().map(Path::to_path_buf))
        else {
            return;
        };
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") && !named.contains(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// What changed in the item waiting at `path` since it was approved (or, never approved
    /// or its files not kept, every file as added). Reads files: called off the runtime.
    pub fn diff(&self, path: &Path) -> Result<TrustDiffResult, String> {
        let item = lock(&self.0.state)
            .waiting
            .values()
            .flatten()
            .find(|w| Path::new(&w.path) == path)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "nothing waits for approval at {} (`toolhost trust` lists what does)",
                    path.display()
                )
            })?;
        self.diff_item(item)
    }

    /// [`Trust::diff`] of the waiting program tool or module named `name`, if one waits.
    pub fn diff_tool_named(&self, name: &str) -> Option<Result<TrustDiffResult, String>> {
        self.waiting_tool(name).map(|item| self.diff_item(item))
    }

    fn diff_item(&self, item: TrustItem) -> Result<TrustDiffResult, String> {
        let approved = lock(&self.0.state)
            .decisions
            .items
            .iter()
            .find(|a| a.kind == item.kind && a.path == item.path)
            .map(|a| a.digest.clone());
        let kept: Option<files::Files> = approved
            .as_deref()
            .and_then(|d| self.kept_path(d))
            .and_then(|p| crate::safe_read::read_in_folder(&p, MAX_FILE_BYTES).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let note = match (&approved, &kept) {
            (None, _) => Some("never approved: every file is new".to_owned()),
            (Some(_), None) => Some(
                "the files approved before were not kept (approved by an older toolhost, or they changed while being approved): every file is shown as new".to_owned(),
            ),
            (Some(_), Some(_)) => None,
        };
        let now = files::read(item.kind, Path::new(&item.path))?;
        Ok(TrustDiffResult {
            changes: files::changes(kept.as_ref(), &now),
            item,
            approved,
            note,
        })
    }

    /// A waiting program tool or module named `name` ([`names_tool`]), for the error of a
    /// call that names it.
    pub fn waiting_tool(&self, name: &str) -> Option<TrustItem> {
        lock(&self.0.state)
            .waiting
            .values()
            .flatten()
            .find(|w| names_tool(w, name))
            .cloned()
    }

    /// Trusts `folder` as a whole (or takes that trust back): returns the canonical folder
    /// and the waiting items it admits.
    pub fn set_folder(
        &self,
        folder: &Path,
        trusted: bool,
    ) -> Result<(PathBuf, Vec<TrustItem>), String> {
        let canonical = folder
            .canonicalize()
            .map_err(|e| format!("{}: {e}", folder.display()))?;
        if !canonical.is_dir() {
            return Err(format!("{} is not a folder", folder.display()));
        }
        let mut st = lock(&self.0.state);
        if let Some(damage) = &st.damage {
            return Err(format!(
                "nothing can be decided while {damage}; repair or delete the file"
            ));
        }
        let mut admitted = Vec::new();
        if trusted {
            if !st.decisions.folders.contains(&canonical) {
                st.decisions.folders.push(canonical.clone());
            }
            for list in st.waiting.values_mut() {
                list.retain(|w| {
                    let ws = Path::new(&w.workspace);
                    let ws = ws.canonicalize().unwrap_or_else(|_| ws.to_path_buf());
                    if ws.starts_with(&canonical) {
                        admitted.push(w.clone());
                        false
                    } else {
                        true
                    }
                });
            }
        } else {
            st.decisions.folders.retain(|f| *f != canonical);
        }
        self.save(&st.decisions)?;
        Ok((canonical, admitted))
    }

    fn save(&self, decisions: &Decisions) -> Result<(), String> {
        let Some(path) = &self.0.path else {
            return Ok(());
        };
        let bytes = serde_json::to_vec_pretty(decisions).map_err(|e| e.to_string())?;
        write_atomic(path, &bytes, Durability::Synced)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Whether waiting item `w` is a tool by the name it goes by before it is read: a program
/// tool's folder name, a module's file stem (its folder's name for an `index.*`). The tool
/// inside may call itself otherwise; this is only how a user or caller refers to it.
fn names_tool(w: &TrustItem, name: &str) -> bool {
    let path = Path::new(&w.path);
    let file_name = |p: &Path| p.file_name().and_then(|s| s.to_str()).map(str::to_owned);
    let stem = path.file_stem().and_then(|s| s.to_str());
    let named = match w.kind {
        TrustKind::Tool => file_name(path),
        TrustKind::Module if stem == Some("index") => path.parent().and_then(file_name),
        TrustKind::Module => stem.map(str::to_owned),
        TrustKind::Skill | TrustKind::Command => None,
    };
    named.as_deref() == Some(name)
}

/// The workspace a source folder belongs to: `<workspace>/.claude/skills` →
/// `<workspace>` (every workspace folder a source searches is two levels down).
pub fn workspace_of(root: &Path) -> &Path {
    root.parent().and_then(Path::parent).unwrap_or(root)
}

/// The decisions in `path`: none when there is no file, else the damage in words.
fn load(path: &Path) -> Result<Decisions, String> {
    let name = path.display();
    match crate::safe_read::read_in_folder(path, MAX_FILE_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("trust file {name} is damaged (not a trust table: {e})")),
        Err(crate::safe_read::ReadError::NotFound) => Ok(Decisions::default()),
        Err(e) => Err(format!("trust file {name} is damaged (it {e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_admitted_with_its_digest_or_by_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".claude/skills/a")).unwrap();
        let file = dir.path().join("trust.json");
        let trust = Trust::open(&file);
        let item = ws.join(".claude/skills/a");
        let waiting = trust.check(&ws, TrustKind::Skill, &item, "d1").unwrap_err();
        assert_eq!(waiting.item, ".claude/skills/a");
        trust.report(TrustKind::Skill, vec![waiting]);
        assert_eq!(trust.approve(&item).unwrap().len(), 1);
        assert!(trust.check(&ws, TrustKind::Skill, &item, "d1").is_ok());
        // Changed: waits again; another kind at the same path is another item.
        assert!(trust.check(&ws, TrustKind::Skill, &item, "d2").is_err());
        assert!(trust.check(&ws, TrustKind::Module, &item, "d1").is_err());
        // Kept across a restart.
        let again = Trust::open(&file);
        assert!(again.check(&ws, TrustKind::Skill, &item, "d1").is_ok());
        // A trusted folder admits everything beneath it, changed or not.
        again.set_folder(dir.path(), true).unwrap();
        assert!(again.check(&ws, TrustKind::Module, &item, "d3").is_ok());
        again.set_folder(dir.path(), false).unwrap();
        assert!(again.check(&ws, TrustKind::Module, &item, "d3").is_err());
    }

    #[test]
    fn a_damaged_file_trusts_nothing_and_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("trust.json");
        std::fs::write(&file, "{not json").unwrap();
        let trust = Trust::open(&file);
        assert!(trust.damage().is_some());
        assert!(trust.set_folder(dir.path(), true).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{not json");
    }
}
