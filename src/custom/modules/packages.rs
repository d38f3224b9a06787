//! A module that failed to load (zod not installed, a package it imports missing) is loaded
//! again when something is installed where it looks for packages: the `node_modules`
//! folders from its folder upward (Node's resolution) and config `custom_tools.node_modules`.
//!
//! Each such folder is watched non-recursively, and so is its parent (to see it appear):
//! `npm install` adds a package folder and rewrites `.package-lock.json` at the top, so a big
//! `node_modules` costs one watch, not one per folder inside it. Only failed modules' folders
//! are watched; with none failing nothing is.

use std::path::{Path, PathBuf};
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
}
