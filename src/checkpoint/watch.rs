//! The change watcher that spares a checkpointed call a walk of its whole workspace.
//!
//! One inotify instance per workspace (through `notify`, whose thread blocks in the kernel
//! between events: an idle watch costs no wake-up), with one non-recursive watch on each
//! directory a scan walked — never on `.gitignore`d ones (notify's recursive mode would
//! watch `target/` too). Events only mark their directory dirty; the next scan lists the
//! dirty directories again and nothing else (`tree::scan`).
//!
//! It stays exact:
//! - before a scan takes the dirty set, it creates a marker file in a directory of the
//!   store watched by the same instance and waits for that event: inotify queues events
//!   in order, so every change made before the scan started has been seen by then;
//! - a directory renamed away or deleted loses its watches (notify drops them), so it is
//!   dropped from the known set and its parent lists it again as new;
//! - an overflowed queue (`IN_Q_OVERFLOW`), a watcher error, a marker that does not
//!   arrive, or a change of the scan's rules make the next scan a full walk; a watch that
//!   cannot be added (the user's inotify watch limit) turns the watcher off for good.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher};

use super::tree::RelPath;

/// How long a scan waits for its marker's event before walking the whole tree instead.
const SYNC_WAIT: Duration = Duration::from_secs(2);

/// What the watcher's thread has seen since the last scan took it.
#[derive(Default)]
struct Seen {
    /// Directories (absolute) something changed in.
    dirty: BTreeSet<PathBuf>,
    /// Paths renamed away or deleted: any watch at or beneath them is gone.
    lost: Vec<PathBuf>,
    /// Events were lost (queue overflow, a watcher error): only a full walk is exact.
    overflow: bool,
    /// The highest marker whose event arrived.
    synced: u64,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Seen>,
    arrived: Condvar,
}

/// The identity of a watched directory: a directory replaced by another of the same name
/// is a new one (its watch went with the old inode).
pub type DirId = (u64, u64);

/// A workspace's watcher and the directories it watches.
pub struct Watch {
    root: PathBuf,
    watcher: notify::RecommendedWatcher,
    shared: Arc<Shared>,
    marker_dir: PathBuf,
    next_marker: u64,
    /// The directories watched, relative to the root ("" for the root).
    pub(super) dirs: BTreeMap<RelPath, DirId>,
    /// The parsed `.gitignore` of each known directory that has one.
    pub(super) gitignores: HashMap<RelPath, Arc<ignore::gitignore::Gitignore>>,
    /// The rules the known state was walked with (`exclude`, `max_file_bytes`).
    pub(super) rules_seen: Option<(Vec<String>, u64)>,
    /// The known state mirrors the watches (a full walk has run since the last loss).
    pub(super) ready: bool,
    /// Why the watcher is off for good (a full walk each scan).
    pub(super) broken: Option<String>,
}

/// What a scan must do.
pub enum Plan {
    /// Walk the whole tree (the state is not known, or events were lost).
    Full,
    /// List these directories again (relative); `lost` dropped their watches.
    Dirty {
        dirty: BTreeSet<RelPath>,
        lost: Vec<RelPath>,
    },
}

impl Watch {
    /// Starts a watcher for `root`, its markers in `marker_dir` (a directory of the store).
    pub fn new(root: &Path, marker_dir: &Path) -> Result<Watch, String> {
        std::fs::create_dir_all(marker_dir).map_err(|e| e.to_string())?;
        let shared = Arc::new(Shared::default());
        let (seen, markers) = (shared.clone(), marker_dir.to_path_buf());
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let mut s = seen.seen.lock().unwrap_or_else(|e| e.into_inner());
            match res {
                Err(_) => s.overflow = true,
                Ok(ev) => {
                    if ev.need_rescan() {
                        s.overflow = true;
                    }
                    // Reads (ours included) change nothing.
                    let read = matches!(
                        ev.kind,
                        EventKind::Access(AccessKind::Open(_))
                            | EventKind::Access(AccessKind::Close(AccessMode::Read))
                    );
                    let gone = matches!(
                        ev.kind,
                        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
                    );
                    for p in &ev.paths {
                        let Some(parent) = p.parent() else { continue };
                        if parent == markers {
                            if let Some(n) = p.file_name().and_then(|n| n.to_str()?.parse().ok()) {
                                s.synced = s.synced.max(n);
                            }
                            continue;
                        }
                        if read {
                            continue;
                        }
                        if gone {
                            s.lost.push(p.clone());
                        }
                        s.dirty.insert(parent.to_path_buf());
                    }
                }
            }
            drop(s);
            seen.arrived.notify_all();
        })
        .map_err(|e| e.to_string())?;
        watcher
            .watch(marker_dir, RecursiveMode::NonRecursive)
            .map_err(|e| e.to_string())?;
        Ok(Watch {
            root: root.to_path_buf(),
            watcher,
            shared,
            marker_dir: marker_dir.to_path_buf(),
            next_marker: 0,
            dirs: BTreeMap::new(),
            gitignores: HashMap::new(),
            rules_seen: None,
            ready: false,
            broken: None,
        })
    }

    /// Whether scans are fed by the watcher (`checkpoint.list`'s `watched`).
    pub fn watching(&self) -> bool {
        self.ready && self.broken.is_none()
    }

    /// Waits until every event queued before now has been seen; false when it timed out.
    fn sync(&mut self) -> bool {
        self.next_marker += 1;
        let n = self.next_marker;
        let marker = self.marker_dir.join(n.to_string());
        if std::fs::write(&marker, b"").is_err() {
            return false;
        }
        let _ = std::fs::remove_file(&marker);
        let seen = self.shared.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, _) = self
            .shared
            .arrived
            .wait_timeout_while(seen, SYNC_WAIT, |s| s.synced < n)
            .unwrap_or_else(|e| e.into_inner());
        seen.synced >= n
    }

    /// What the next scan must do under `rules` (`exclude`, `max_file_bytes`); takes what
    /// was seen. A full walk is planned when anything could have been missed.
    pub fn plan(&mut self, rules: (Vec<String>, u64)) -> Plan {
        if self.broken.is_some() {
            return Plan::Full;
        }
        let synced = self.sync();
        let seen = std::mem::take(&mut *self.shared.seen.lock().unwrap_or_else(|e| e.into_inner()));
        if !synced || seen.overflow || !self.ready || self.rules_seen.as_ref() != Some(&rules) {
            if seen.overflow {
                tracing::debug!(root = %self.root.display(), "checkpoint watcher lost events: a full walk");
            }
            self.ready = false;
            self.rules_seen = Some(rules);
            return Plan::Full;
        }
        let rel = |p: &Path| {
            p.strip_prefix(&self.root)
                .ok()
                .map(|r| RelPath(r.as_os_str().as_bytes().to_vec()))
        };
        Plan::Dirty {
            dirty: seen.dirty.iter().filter_map(|p| rel(p)).collect(),
            lost: seen.lost.iter().filter_map(|p| rel(p)).collect(),
        }
    }

    /// Marks a directory to be listed again by the next scan (a file in it changed so
    /// close to this scan that a later change could keep its stat).
    pub fn recheck(&self, dir: &RelPath) {
        let abs = self.abs(dir);
        let mut s = self.shared.seen.lock().unwrap_or_else(|e| e.into_inner());
        s.dirty.insert(abs);
    }

    fn abs(&self, rel: &RelPath) -> PathBuf {
        if rel.0.is_empty() {
            self.root.clone()
        } else {
            self.root.join(std::ffi::OsStr::from_bytes(&rel.0))
        }
    }

    /// Watches a directory before it is listed. A watch limit turns the watcher off.
    pub fn add(&mut self, dir: &RelPath, id: DirId) {
        if self.broken.is_some() {
            return;
        }
        let abs = self.abs(dir);
        match self.watcher.watch(&abs, RecursiveMode::NonRecursive) {
            Ok(()) => {
                self.dirs.insert(dir.clone(), id);
            }
            Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => {
                let why = "the inotify watch limit was reached (fs.inotify.max_user_watches): every checkpoint walks the workspace".to_owned();
                tracing::warn!(root = %self.root.display(), "{why}");
                self.broken = Some(why);
                self.ready = false;
                for d in std::mem::take(&mut self.dirs).into_keys() {
                    let _ = self.watcher.unwatch(&self.abs(&d));
                }
            }
            // It went away between the parent's listing and now: the parent's event says so.
            Err(e) => tracing::debug!(dir = %abs.display(), "checkpoint watch: {e}"),
        }
    }

    /// Forgets the directories at and beneath `dir`, removing their watches.
    pub fn drop_under(&mut self, dir: &RelPath) {
        let gone: Vec<RelPath> = super::tree::under(&self.dirs, dir, true)
            .map(|(d, _)| d.clone())
            .collect();
        for d in gone {
            self.dirs.remove(&d);
            self.gitignores.remove(&d);
            let _ = self.watcher.unwatch(&self.abs(&d));
        }
    }
}
