//! Watching a folder source's folders (custom tools, skills, commands: each the same way).
//! A folder that exists is watched recursively (a tool's manifest and program live one level
//! down); a folder that does not exist yet is covered
//! by a watch on its nearest existing ancestor, so a project's `.toolhost/tools/` created
//! after start is picked up. Events go through the same debouncer as config.json's
//! ([`crate::config::signal_on_change`]): one `()`, "scan again", per burst (editors and
//! `cp -r` write in bursts).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::RecursiveMode;
use tokio::sync::mpsc::UnboundedSender;

use crate::config::{signal_on_change, SignalDebouncer};
use crate::lock;

/// How long a burst of events may last before the folders are scanned.
const SETTLE: Duration = Duration::from_millis(100);

pub struct Watch {
    what: &'static str,
    debouncer: SignalDebouncer,
    roots: Arc<Mutex<Vec<PathBuf>>>,
    /// What is watched now, and how.
    watched: Vec<(PathBuf, RecursiveMode)>,
}

impl Watch {
    /// `what` names the folders in log lines ("custom tool folder", "skill folder").
    pub fn new(
        roots: &[PathBuf],
        tx: UnboundedSender<()>,
        what: &'static str,
    ) -> notify::Result<Watch> {
        let shared: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
        let filter = shared.clone();
        let debouncer = signal_on_change(
            SETTLE,
            move |ev| {
                ev.paths.iter().any(|p| {
                    lock(&filter)
                        .iter()
                        .any(|r| p.starts_with(r) || r.starts_with(p))
                })
            },
            tx,
            what,
        )?;
        let mut w = Watch {
            what,
            debouncer,
            roots: shared,
            watched: Vec::new(),
        };
        w.set_roots(roots);
        Ok(w)
    }

    /// Watches each root (or its nearest existing ancestor) and drops watches no longer
    /// needed.
    pub fn set_roots(&mut self, roots: &[PathBuf]) {
        *lock(&self.roots) = roots.to_vec();
        let mut want: Vec<(PathBuf, RecursiveMode)> = Vec::new();
        for root in roots {
            let target = if root.is_dir() {
                (root.clone(), RecursiveMode::Recursive)
            } else {
                match nearest_existing(root) {
                    Some(a) => (a, RecursiveMode::NonRecursive),
                    None => continue,
                }
            };
            if !want.contains(&target) {
                want.push(target);
            }
        }
        for old in std::mem::take(&mut self.watched) {
            if want.contains(&old) {
                self.watched.push(old);
            } else {
                let _ = self.debouncer.unwatch(&old.0);
            }
        }
        for w in want {
            if self.watched.contains(&w) {
                continue;
            }
            match self.debouncer.watch(&w.0, w.1) {
                Ok(()) => self.watched.push(w),
                Err(e) => {
                    tracing::warn!(path = %w.0.display(), "cannot watch {}: {e}", self.what)
                }
            }
        }
    }
}

fn nearest_existing(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .map(Path::to_path_buf)
}

/// Session workspaces a folder source learns of (a session was made in one) or forgets
/// (the last session in it ended). Custom tools, skills and commands each keep their list
/// of session workspaces this way.
#[derive(Debug, Clone, Copy)]
pub enum Workspaces<'a> {
    Learn(&'a [PathBuf]),
    Forget(&'a [PathBuf]),
}

impl Workspaces<'_> {
    /// Applies the change to `known`, keeping its order (a new workspace goes last); true
    /// when it changed, so the caller rescans: a workspace learnt twice, or one never
    /// learnt forgotten, costs no rescan.
    pub fn apply(self, known: &mut Vec<PathBuf>) -> bool {
        let before = known.len();
        match self {
            Workspaces::Learn(workspaces) => {
                for w in workspaces {
                    if !known.contains(w) {
                        known.push(w.clone());
                    }
                }
            }
            Workspaces::Forget(workspaces) => known.retain(|w| !workspaces.contains(w)),
        }
        known.len() != before
    }
}

/// Watches `folders` (kept in `slot`, so roots can be changed later) and, after each
/// signal until `shutdown`, runs `rescan(owner)` as one [`Apply`](super::Apply): signals
/// that come while a rescan runs are folded into the next one, so a burst of changes costs
/// one rescan. Custom tools, skills and commands each follow their folders this way
/// (`owner` is their cheap clone). A watcher that cannot start is logged; nothing rescans.
#[allow(clippy::too_many_arguments)]
pub fn follow<T, F, Fut>(
    folders: &[PathBuf],
    what: &'static str,
    slot: &Mutex<Option<Watch>>,
    tracker: &tokio_util::task::TaskTracker,
    shutdown: tokio_util::sync::CancellationToken,
    apply: super::Apply,
    owner: T,
    rescan: F,
) where
    T: Clone + Send + 'static,
    F: Fn(T) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = super::Contribution> + Send,
{
    let (tx, mut signals) = tokio::sync::mpsc::unbounded_channel();
    match Watch::new(folders, tx, what) {
        Ok(w) => *lock(slot) = Some(w),
        Err(e) => {
            tracing::warn!("not watching {what}s: {e:#}");
            return;
        }
    }
    tracker.spawn(async move {
        loop {
            tokio::select! {
                Some(()) = signals.recv() => {
                    while signals.try_recv().is_ok() {}
                    apply.run(rescan(owner.clone())).await;
                }
                _ = shutdown.cancelled() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learning_workspaces_keeps_order_and_reports_only_new_ones() {
        let (a, b, c) = (
            PathBuf::from("/a"),
            PathBuf::from("/b"),
            PathBuf::from("/c"),
        );
        let mut known = vec![a.clone()];
        assert!(Workspaces::Learn(&[b.clone(), a.clone(), b.clone()]).apply(&mut known));
        assert_eq!(known, [a.clone(), b.clone()]);
        assert!(!Workspaces::Learn(&[b.clone(), a.clone()]).apply(&mut known));
        assert!(!Workspaces::Learn(&[]).apply(&mut known));
        assert!(Workspaces::Learn(std::slice::from_ref(&c)).apply(&mut known));
        assert_eq!(known, [a, b, c]);
    }

    #[test]
    fn forgetting_workspaces_keeps_the_others_order_and_reports_only_known_ones() {
        let (a, b, c) = (
            PathBuf::from("/a"),
            PathBuf::from("/b"),
            PathBuf::from("/c"),
        );
        let mut known = vec![a.clone(), b.clone(), c.clone()];
        assert!(Workspaces::Forget(std::slice::from_ref(&b)).apply(&mut known));
        assert_eq!(known, [a.clone(), c.clone()]);
        assert!(!Workspaces::Forget(std::slice::from_ref(&b)).apply(&mut known));
        assert!(Workspaces::Learn(std::slice::from_ref(&b)).apply(&mut known));
        assert_eq!(known, [a, c, b]);
    }
}
