//! The packages a module finds: the module host's own (zod and TypeBox for `pi.zod` and
//! `pi.typebox`, pinned, installed by `toolhost modules setup`), and the retry of a module
//! that failed for want of one.
//!
//! A module that failed to load (zod not installed, a package it imports missing) is loaded
//! again when something is installed where it looks for packages: the `node_modules`
//! folders from its folder upward (Node's resolution) and config `custom_tools.node_modules`.
//!
//! Each such folder is watched non-recursively, and so is its parent (to see it appear):
//! `npm install` adds a package folder and rewrites `.package-lock.json` at the top, so a big
//! `node_modules` costs one watch, not one per folder inside it. Only failed modules' folders
//! are watched; with none failing nothing is.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::RecursiveMode;

use crate::config::{signal_on_change, SignalDebouncer};
use crate::lock;

/// How long a burst of installs may last before the failed modules are tried again.
const SETTLE: Duration = Duration::from_millis(300);
/// How many folders up from a module its `node_modules` are looked for (Node walks to `/`;
/// a package installed that far up is left to `config reload`).
const MAX_LEVELS: usize = 8;

pub(crate) struct PackageWatch {
    debouncer: SignalDebouncer,
    /// The `node_modules` folders whose changes count.
    wanted: Arc<Mutex<Vec<PathBuf>>>,
    /// The folders watched now.
    watched: Vec<PathBuf>,
}

impl PackageWatch {
    /// Starts a watch (of nothing yet) that runs `changed` after each burst of changes in
    /// the folders of [`PackageWatch::set`], until `shutdown`.
    pub(crate) fn start(
        tracker: &tokio_util::task::TaskTracker,
        shutdown: tokio_util::sync::CancellationToken,
        changed: impl Fn() + Send + 'static,
    ) -> notify::Result<PackageWatch> {
        let wanted: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
        let filter = wanted.clone();
        let (tx, mut signals) = tokio::sync::mpsc::unbounded_channel();
        let debouncer = signal_on_change(
            SETTLE,
            move |ev| {
                ev.paths
                    .iter()
                    .any(|p| lock(&filter).iter().any(|w| p.starts_with(w)))
            },
            tx,
            "module package folder",
        )?;
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    Some(()) = signals.recv() => {
                        while signals.try_recv().is_ok() {}
                        changed();
                    }
                    _ = shutdown.cancelled() => return,
                }
            }
        });
        Ok(PackageWatch {
            debouncer,
            wanted,
            watched: Vec::new(),
        })
    }

    /// Watches `folders` (`node_modules` folders) and the parent of each, nothing else.
    pub(crate) fn set(&mut self, folders: Vec<PathBuf>) {
        let mut want: Vec<PathBuf> = Vec::new();
        for f in &folders {
            for dir in [Some(f.as_path()), f.parent()].into_iter().flatten() {
                if dir.is_dir() && !want.iter().any(|w| w == dir) {
                    want.push(dir.to_path_buf());
                }
            }
        }
        *lock(&self.wanted) = folders;
        for old in std::mem::take(&mut self.watched) {
            if want.contains(&old) {
                self.watched.push(old);
            } else {
                let _ = self.debouncer.unwatch(&old);
            }
        }
        for dir in want {
            if self.watched.contains(&dir) {
                continue;
            }
            match self.debouncer.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => self.watched.push(dir),
                Err(e) => {
                    tracing::warn!(path = %dir.display(), "cannot watch a module package folder: {e}")
                }
            }
        }
    }
}

/// The `node_modules` folders Node looks in for a package of the module `file` (from its
/// folder upward, [`MAX_LEVELS`] deep, `/` left out).
pub(crate) fn folders_of(file: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    file.ancestors()
        .skip(1)
        .take(MAX_LEVELS)
        .filter(|d| d.parent().is_some())
        .map(|d| d.join("node_modules"))
}

/// The module host's own packages, pinned (exact versions and integrity): what
/// `toolhost modules setup` installs with `npm ci`. MusePi gives modules zod 4 and TypeBox
/// itself, so a module written for it imports neither; shipping them here means a module
/// loads with nothing installed next to it.
const OWN_MANIFEST: &str = include_str!("own-packages/package.json");
const OWN_LOCK: &str = include_str!("own-packages/package-lock.json");
/// How long `npm ci` may take (two small packages; a slow registry).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Where the module host's own packages are looked for, each a folder holding a
/// `node_modules`: the user's (`$XDG_DATA_HOME/toolhost/modules`, what `toolhost modules
/// setup` fills), then the installation's (`lib/toolhost/modules` beside the binary's
/// `bin`: `/usr/lib/toolhost/modules` for `/usr/bin/toolhost`, filled by
/// `modules setup --system` when the Docker image is built). They come after the module's
/// own folders and config `custom_tools.node_modules`: a module's own zod always wins.
pub fn own_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![user_dir()];
    dirs.extend(system_dir());
    dirs
}

/// `$XDG_DATA_HOME/toolhost/modules`.
pub fn user_dir() -> PathBuf {
    crate::config::xdg_dir("XDG_DATA_HOME", ".local/share").join("toolhost/modules")
}

/// `lib/toolhost/modules` beside the folder of the running binary.
pub fn system_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("lib/toolhost/modules"))
}

/// The pinned packages, `(name, version)`.
pub fn pinned() -> Vec<(String, String)> {
    let manifest: serde_json::Value = serde_json::from_str(OWN_MANIFEST).unwrap_or_default();
    manifest["dependencies"]
        .as_object()
        .map(|deps| {
            deps.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The first of [`own_dirs`] holding every pinned package at its pinned version.
pub fn installed() -> Option<PathBuf> {
    own_dirs().into_iter().find(|d| missing_in(d).is_empty())
}

/// The pinned packages `dir` lacks, or holds at another version, as `name@version`.
fn missing_in(dir: &Path) -> Vec<String> {
    pinned()
        .into_iter()
        .filter(|(name, version)| {
            let manifest = dir.join("node_modules").join(name).join("package.json");
            let have = std::fs::read(&manifest)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            have.as_ref().and_then(|m| m["version"].as_str()) != Some(version.as_str())
        })
        .map(|(name, version)| format!("{name}@{version}"))
        .collect()
}

/// Installs the pinned packages into `dir/node_modules` with `npm ci` (the `npm` beside
/// `node` when there is one, else on `PATH`; npm's own settings and cache apply, so
/// `npm_config_offline=true` installs from the cache alone). npm runs in its own process
/// group, ended with it on timeout. Returns what was installed, `name@version`.
pub async fn install(dir: &Path, node: Option<&Path>) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, text) in [
        ("package.json", OWN_MANIFEST),
        ("package-lock.json", OWN_LOCK),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let npm = node
        .and_then(Path::parent)
        .map(|d| d.join("npm"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("npm"));
    let mut cmd = tokio::process::Command::new(&npm);
    cmd.args([
        "ci",
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ])
    .current_dir(dir)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0)
    .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| {
        format!(
            "cannot run {}: {e} (npm comes with Node; install it, or put the packages of {} into {} yourself)",
            npm.display(),
            dir.join("package.json").display(),
            dir.join("node_modules").display()
        )
    })?;
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let out = tokio::time::timeout(INSTALL_TIMEOUT, child.wait_with_output()).await;
    if let Some(pgid) = pgid {
        // Whatever npm left running (it is done, or out of time).
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let out = match out {
        Err(_) => {
            return Err(format!(
                "npm ci did not finish within {} s",
                INSTALL_TIMEOUT.as_secs()
            ))
        }
        Ok(Err(e)) => return Err(format!("npm ci: {e}")),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = last[last.len().saturating_sub(6)..].join("\n");
        return Err(format!(
            "npm ci in {} failed ({}):\n{tail}",
            dir.display(),
            out.status
        ));
    }
    let missing = missing_in(dir);
    if !missing.is_empty() {
        return Err(format!(
            "npm ci finished but {} lacks {}",
            dir.join("node_modules").display(),
            missing.join(", ")
        ));
    }
    Ok(pinned()
        .into_iter()
        .map(|(name, version)| format!("{name}@{version}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modules_package_folders_go_up_from_its_folder_short_of_the_root() {
        let got: Vec<PathBuf> = folders_of(Path::new("/a/b/tools/x.ts")).collect();
        assert_eq!(
            got,
            [
                PathBuf::from("/a/b/tools/node_modules"),
                PathBuf::from("/a/b/node_modules"),
                PathBuf::from("/a/node_modules"),
            ]
        );
    }

    #[test]
    fn the_pins_are_exact_and_the_lockfile_holds_them() {
        let lock: serde_json::Value = serde_json::from_str(OWN_LOCK).unwrap();
        let pins = pinned();
        assert!(pins.iter().any(|(n, _)| n == "zod"), "{pins:?}");
        for (name, version) in pins {
            assert!(
                version.chars().all(|c| c.is_ascii_digit() || c == '.'),
                "{name}@{version}"
            );
            let entry = &lock["packages"][format!("node_modules/{name}")];
            assert_eq!(entry["version"], version.as_str(), "{name}");
            assert!(entry["integrity"]
                .as_str()
                .is_some_and(|i| i.starts_with("sha512-")));
        }
    }
}
