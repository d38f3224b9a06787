//! Where tool modules are found, and which files of those folders are modules.
//!
//! Order (the first definition of a name wins, as for program tools): the program tools'
//! own folders of the user's (config `custom_tools.paths`, `$XDG_CONFIG_HOME/toolhost/tools`);
//! the user's `~/.musepi/agent/tools`, `~/.claude/tools`, `~/.codex/tools`; the plugins
//! installed under `~/.musepi/plugins/node_modules` (each package's `package.json` lists
//! its modules in `"musepi": {"tools": [...]}`); then the workspaces' folders: their
//! `.toolhost/tools`, then the `.musepi/tools`, `.claude/tools` and `.codex/tools` of the
//! daemon's workspace and of each session's. The user's own folders come before the
//! workspaces', so a module a workspace holds never takes the name of one of the user's.
//! With `custom_tools.discover: false` only `paths` are searched; with
//! `custom_tools.modules: false`, nothing.
//!
//! In a folder, a module is a `.js`, `.mjs`, `.ts` or `.mts` file (not `.d.ts`), or a
//! sub-folder without a `tool.json` that holds an `index.*` of those kinds.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::config::CustomTools as Settings;

/// The extensions of module files, in the order an `index.*` is looked for.
const EXTENSIONS: [&str; 4] = ["ts", "mts", "js", "mjs"];
/// A module file larger than this is refused (it is hashed whole at every scan).
const MAX_MODULE_BYTES: u64 = 16 * 1024 * 1024;
/// The field of a plugin's `package.json` that lists its tool modules.
pub const PLUGIN_FIELD: &str = "musepi.tools";

/// A folder searched for modules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    /// A workspace's folder: its modules pass the workspace-trust gate (`crate::trust`)
    /// before they are imported.
    pub workspace: bool,
    /// The session workspace whose sessions alone list its modules.
    pub scope: Option<PathBuf>,
    /// `~/.musepi/plugins/node_modules`: packages, not module files.
    pub plugins: bool,
}

/// One module file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub file: PathBuf,
    /// The folder it was found in (a workspace's `.claude/tools`, say).
    pub root: PathBuf,
    /// SHA-256 of what the module is made of (its file, or its folder's files): a new
    /// digest is a new module instance.
    pub digest: String,
    /// The files the digest covers (canonical), each with the SHA-256 of its bytes as
    /// hashed: a workspace module's host imports these bytes and nothing else.
    pub files: Vec<(PathBuf, String)>,
    pub workspace: bool,
    pub scope: Option<PathBuf>,
}

/// The folders searched, in precedence order (each once, in its first place):
/// `program_roots` (the custom tool programs' folders, which hold modules too) that are the
/// user's, the user's MusePi, Claude and Codex folders and the plugins, then the workspace
/// folders of `program_roots`, then the MusePi, Claude and Codex folders of the daemon's
/// workspace and of each of `session_workspaces` (the latter scoped to their sessions).
pub fn roots(
    cfg: &Settings,
    program_roots: &[Root],
    daemon_workspace: &Path,
    session_workspaces: &[PathBuf],
) -> Vec<Root> {
    if !cfg.modules {
        return Vec::new();
    }
    let folder = |path: PathBuf, workspace: bool, scope: Option<PathBuf>| Root {
        path,
        workspace,
        scope,
        plugins: false,
    };
    let (workspace_programs, user_programs): (Vec<&Root>, Vec<&Root>) =
        program_roots.iter().partition(|r| r.workspace);
    let mut out: Vec<Root> = user_programs.into_iter().cloned().collect();
    if cfg.discover {
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            let home = PathBuf::from(home);
            for sub in [".musepi/agent/tools", ".claude/tools", ".codex/tools"] {
                out.push(folder(home.join(sub), false, None));
            }
            out.push(Root {
                path: home.join(".musepi/plugins/node_modules"),
                workspace: false,
                scope: None,
                plugins: true,
            });
        }
    }
    out.extend(workspace_programs.into_iter().cloned());
    if cfg.discover {
        let workspaces = std::iter::once((daemon_workspace, None)).chain(
            session_workspaces
                .iter()
                .filter(|w| w.as_path() != daemon_workspace)
                .map(|w| (w.as_path(), Some(w.clone()))),
        );
        for (ws, scope) in workspaces {
            for sub in [".musepi/tools", ".claude/tools", ".codex/tools"] {
                out.push(folder(ws.join(sub), true, scope.clone()));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|r| seen.insert(r.path.clone()));
    out
}

/// Every module of `roots`, in precedence order (names sorted inside a folder), and the
/// problems met on the way (`<file>: <reason>`). A sub-folder holding a file named
/// `program_manifest` is a program tool (`tool.json`), never a module.
pub fn scan(roots: &[Root], program_manifest: &str) -> (Vec<Found>, Vec<String>) {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for root in roots {
        let files = if root.plugins {
            plugin_modules(&root.path, &mut problems)
        } else {
            folder_modules(&root.path, program_manifest)
        };
        for file in files {
            match digest(&file) {
                Ok((digest, files)) => found.push(Found {
                    file,
                    root: root.path.clone(),
                    digest,
                    files,
                    workspace: root.workspace,
                    scope: root.scope.clone(),
                }),
                Err(e) => problems.push(e),
            }
        }
    }
    (found, problems)
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    paths.sort();
    paths
}

/// Whether `path` names a module file by its name.
pub fn is_module_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    !name.starts_with('.')
        && !name.ends_with(".d.ts")
        && !name.ends_with(".d.mts")
        && path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
}

/// The module files of one folder: its module files, and the `index.*` of its sub-folders
/// that are not program tools (no `program_manifest`).
pub fn folder_modules(dir: &Path, program_manifest: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for path in sorted_entries(dir) {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "node_modules")
                || path.join(program_manifest).exists()
            {
                continue;
            }
            if let Some(index) = EXTENSIONS
                .iter()
                .map(|e| path.join(format!("index.{e}")))
                .find(|p| p.is_file())
            {
                out.push(index);
            }
        } else if path.is_file() && is_module_file(&path) {
            out.push(path);
        }
    }
    out
}

/// The modules the installed plugins list (`package.json` → `musepi.tools`), scoped
/// packages (`@scope/name`) included. A listed path must stay inside its package.
fn plugin_modules(node_modules: &Path, problems: &mut Vec<String>) -> Vec<PathBuf> {
    let mut packages = Vec::new();
    for path in sorted_entries(node_modules) {
        let scoped = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('@'));
        if scoped {
            packages.extend(sorted_entries(&path).into_iter().filter(|p| p.is_dir()));
        } else if path.is_dir() {
            packages.push(path);
        }
    }
    let mut out = Vec::new();
    for package in packages {
        let manifest = package.join("package.json");
        let Ok(bytes) = crate::safe_read::read_in_folder(&manifest, 1024 * 1024) else {
            continue;
        };
        let listed = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => v.pointer("/musepi/tools").cloned(),
            Err(e) => {
                problems.push(format!("{}: not JSON: {e}", manifest.display()));
                continue;
            }
        };
        let Some(listed) = listed else {
            continue;
        };
        let Some(listed) = listed.as_array() else {
            problems.push(format!(
                "{}: {PLUGIN_FIELD} must be a list of module paths",
                manifest.display()
            ));
            continue;
        };
        for entry in listed {
            let Some(rel) = entry.as_str() else {
                problems.push(format!(
                    "{}: {PLUGIN_FIELD}: {entry} is not a path",
                    manifest.display()
                ));
                continue;
            };
            let file = package.join(rel);
            let inside = file
                .canonicalize()
                .ok()
                .zip(package.canonicalize().ok())
                .is_some_and(|(f, p)| f.starts_with(p));
            if inside && file.is_file() && is_module_file(&file) {
                out.push(file);
            } else {
                problems.push(format!(
                    "{}: {PLUGIN_FIELD}: {rel} is not a .js, .mjs, .ts or .mts file inside the package",
                    manifest.display()
                ));
            }
        }
    }
    out
}

/// How deep an `index.*` module's folder is walked, and how many files it may hold, for
/// its digest.
const MAX_FOLDER_DEPTH: usize = 8;
const MAX_FOLDER_FILES: usize = 1000;

/// The digest of a module — its file's bytes, and for an `index.*` every other regular
/// file beneath its folder too (helpers it imports, nested or not; `node_modules` and
/// symlinked folders left out) — and each of those files (canonical) with the SHA-256 of
/// the very bytes hashed: what a workspace module's host may import, and nothing else
/// (`host.mjs` serves exactly those bytes; see proto-docs/trust.md).
pub(super) fn digest(file: &Path) -> Result<(String, Vec<(PathBuf, String)>), String> {
    let mut hash = Sha256::new();
    let mut files = Vec::new();
    let mut add = |path: &Path| -> Result<(), String> {
        let bytes = read_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
        hash.update(path.as_os_str().as_encoded_bytes());
        hash.update([0]);
        hash.update(&bytes);
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        files.push((canonical, hex::encode(Sha256::digest(&bytes))));
        Ok(())
    };
    add(file)?;
    if file.file_stem().is_some_and(|s| s == "index") {
        if let Some(dir) = file.parent() {
            let mut others = Vec::new();
            folder_files(dir, 0, &mut others)?;
            for path in others.iter().filter(|p| p.as_path() != file) {
                add(path)?;
            }
        }
    }
    Ok((hex::encode(&hash.finalize()[..16]), files))
}

/// The regular files beneath `dir` (symlinks to files included), in name order, without
/// `node_modules` or symlinked folders, bounded.
fn folder_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if depth > MAX_FOLDER_DEPTH {
        return Err(format!(
            "{}: nested deeper than {MAX_FOLDER_DEPTH} levels",
            dir.display()
        ));
    }
    for path in sorted_entries(dir) {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if path.file_name().is_some_and(|n| n != "node_modules") {
                folder_files(&path, depth + 1, out)?;
            }
        } else if path.is_file() {
            out.push(path);
            if out.len() > MAX_FOLDER_FILES {
                return Err(format!(
                    "{}: holds more than {MAX_FOLDER_FILES} files",
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

/// A regular file's bytes, at most [`MAX_MODULE_BYTES`] (never waiting on a FIFO).
fn read_regular(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_MODULE_BYTES {
        return Err(format!("larger than {MAX_MODULE_BYTES} bytes"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_MODULE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(format!("larger than {MAX_MODULE_BYTES} bytes"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_files_are_told_by_their_names() {
        for yes in ["a.ts", "a.mts", "a.js", "a.mjs", "dir/repo_stats.ts"] {
            assert!(is_module_file(Path::new(yes)), "{yes}");
        }
        for no in ["a.d.ts", ".hidden.js", "a.json", "a.cjs", "README.md", "a"] {
            assert!(!is_module_file(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn a_folder_holds_files_and_index_folders_but_not_program_tools() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("b.ts"), "").unwrap();
        std::fs::write(d.join("a.mjs"), "").unwrap();
        std::fs::write(d.join("notes.md"), "").unwrap();
        std::fs::create_dir_all(d.join("folder")).unwrap();
        std::fs::write(d.join("folder/index.js"), "").unwrap();
        std::fs::create_dir_all(d.join("program")).unwrap();
        std::fs::write(d.join("program/tool.json"), "{}").unwrap();
        std::fs::write(d.join("program/index.js"), "").unwrap();
        std::fs::create_dir_all(d.join("node_modules/x")).unwrap();
        std::fs::write(d.join("node_modules/index.js"), "").unwrap();
        assert_eq!(
            folder_modules(d, "tool.json"),
            vec![d.join("a.mjs"), d.join("b.ts"), d.join("folder/index.js")]
        );
    }

    #[test]
    fn plugins_list_their_modules_in_package_json() {
        let dir = tempfile::tempdir().unwrap();
        let nm = dir.path();
        let pkg = nm.join("@acme/tools");
        std::fs::create_dir_all(pkg.join("dist")).unwrap();
        std::fs::write(pkg.join("dist/t.js"), "").unwrap();
        std::fs::write(
            pkg.join("package.json"),
            r#"{"name": "@acme/tools", "musepi": {"tools": ["dist/t.js", "../../escape.js"]}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(nm.join("plain")).unwrap();
        std::fs::write(nm.join("plain/package.json"), r#"{"name": "plain"}"#).unwrap();
        let mut problems = Vec::new();
        assert_eq!(
            plugin_modules(nm, &mut problems),
            vec![pkg.join("dist/t.js")]
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("../../escape.js"), "{problems:?}");
    }
}
