//! The change watcher that spares a checkpointed call a walk of its whole workspace.
//!
//! One inotify instance per workspace, read directly (no watcher thread, no marker file):
//! one non-recursive watch on each directory a scan walked — never on `.gitignore`d ones —
//! for changes only (reads, ours included, make no event). Events only mark their
//! directory dirty; the next scan lists the dirty directories again and nothing else
//! (`tree::scan`).
//!
//! It stays exact:
//! - the kernel queues an event inside the system call that made the change, before that
//!   call returns, and in order: a scan that first reads the queue dry ([`Watch::plan`],
//!   on the scanning thread) has seen every change made before it started. Between scans
//!   a task of the runtime reads the queue whenever it becomes readable, so a burst of
//!   changes between calls does not overflow it;
//! - a directory renamed away or deleted loses its watch, so it is dropped from the known
//!   set and its parent lists it again as new;
//! - an overflowed queue (`IN_Q_OVERFLOW`), a queue that cannot be read, or a change of the
//!   scan's rules make the next scan a full walk; a watch that cannot be added (the user's
//!   inotify watch limit) turns the watcher off for good.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use super::tree::{child, parent, RelPath};
use crate::lock;

/// What a watch reports: changes to the directory's entries, and the directory itself going.
const MASK: WatchMask = WatchMask::MODIFY
    .union(WatchMask::ATTRIB)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::EXCL_UNLINK);

/// What the queue held since the last scan took it.
#[derive(Default)]
struct Seen {
    /// Directories something changed in.
    dirty: BTreeSet<RelPath>,
    /// Paths renamed away or deleted: any watch at or beneath them is gone.
    lost: Vec<RelPath>,
    /// Events were lost (queue overflow, a read error): only a full walk is exact.
    overflow: bool,
}

/// The inotify instance, the directory of each of its watches, and what it reported.
struct Queue {
    inotify: Inotify,
    dirs: HashMap<WatchDescriptor, RelPath>,
    seen: Seen,
}

impl Queue {
    /// Reads every event queued so far.
    fn drain(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.inotify.read_events(&mut buf) {
                Ok(events) => {
                    for ev in events {
                        note(&mut self.dirs, &mut self.seen, ev.wd, ev.mask, ev.name);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.seen.overflow = true;
                    return;
                }
            }
        }
    }
}

/// Marks what one event says changed.
fn note(
    dirs: &mut HashMap<WatchDescriptor, RelPath>,
    seen: &mut Seen,
    wd: WatchDescriptor,
    mask: EventMask,
    name: Option<&std::ffi::OsStr>,
) {
    if mask.contains(EventMask::Q_OVERFLOW) {
        seen.overflow = true;
        return;
    }
    // A watch already removed (ours, or gone with its directory).
    let Some(dir) = dirs.get(&wd).cloned() else {
        return;
    };
    if mask.contains(EventMask::IGNORED) {
        dirs.remove(&wd);
    }
    match name {
        Some(name) => {
            if mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
                seen.lost.push(child(&dir, name.as_bytes()));
            }
            seen.dirty.insert(dir);
        }
        // The directory itself went (deleted, renamed, its watch dropped): its parent says
        // what is there now.
        None if mask
            .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED) =>
        {
            seen.dirty.insert(parent(&dir));
            seen.lost.push(dir);
        }
        None => {}
    }
}

/// The identity of a watched directory: a directory replaced by another of the same name
/// is a new one (its watch went with the old inode).
pub type DirId = (u64, u64);

/// The queue as the runtime's reactor holds it: its descriptor stays open while this lives.
struct Readable {
    queue: Arc<Mutex<Queue>>,
    fd: RawFd,
}

impl AsRawFd for Readable {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

/// A workspace's watcher and the directories it watches.
pub struct Watch {
    root: PathBuf,
    queue: Arc<Mutex<Queue>>,
    /// Reads the queue between scans; stopped with the watch.
    reader: Option<tokio::task::JoinHandle<()>>,
    /// The watch of each directory watched.
    watches: HashMap<RelPath, WatchDescriptor>,
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

impl Plan {
    /// Nothing changed since the last scan: nothing to list or read.
    pub fn is_quiet(&self) -> bool {
        matches!(self, Plan::Dirty { dirty, lost } if dirty.is_empty() && lost.is_empty())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(r) = &self.reader {
            r.abort();
        }
    }
}

impl Watch {
    /// Starts a watcher for `root` (inotify's queue read between scans by a task of the
    /// current runtime, when there is one).
    pub fn new(root: &Path) -> io::Result<Watch> {
        let inotify = Inotify::init()?;
        let fd = inotify.as_raw_fd();
        let queue = Arc::new(Mutex::new(Queue {
            inotify,
            dirs: HashMap::new(),
            seen: Seen::default(),
        }));
        let reader = match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let _entered = rt.enter();
                let readable = Readable {
                    queue: queue.clone(),
                    fd,
                };
                // SAFETY: `fd` is the descriptor of the inotify instance `readable.queue`
                // owns, never replaced, so it stays open and the same for as long as the
                // `AsyncFd` (which owns `readable`) lives.
                let ready = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        readable,
                        tokio::io::Interest::READABLE,
                    )
                }
                .map_err(io::Error::from)?;
                Some(rt.spawn(async move {
                    while let Ok(mut guard) = ready.readable().await {
                        lock(&ready.get_ref().queue).drain();
                        guard.clear_ready();
                    }
                }))
            }
            Err(_) => None,
        };
        Ok(Watch {
            root: root.to_path_buf(),
            queue,
            reader,
            watches: HashMap::new(),
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

    /// What the next scan must do under `rules` (`exclude`, `max_file_bytes`): reads the
    /// queue dry and takes what it held. A full walk is planned when anything could have
    /// been missed.
    pub fn plan(&mut self, rules: (Vec<String>, u64)) -> Plan {
        if self.broken.is_some() {
            return Plan::Full;
        }
        let seen = {
            let mut q = lock(&self.queue);
            q.drain();
            std::mem::take(&mut q.seen)
        };
        if seen.overflow || !self.ready || self.rules_seen.as_ref() != Some(&rules) {
            if seen.overflow {
                tracing::debug!(root = %self.root.display(), "checkpoint watcher lost events: a full walk");
            }
            self.ready = false;
            self.rules_seen = Some(rules);
            return Plan::Full;
        }
        Plan::Dirty {
            dirty: seen.dirty,
            lost: seen.lost,
        }
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
        let mut q = lock(&self.queue);
        match q.inotify.watches().add(&abs, MASK) {
            Ok(wd) => {
                // The same inode under a new name (a rename the scan has not seen yet)
                // gets the same watch: it is this directory's now.
                q.dirs.insert(wd.clone(), dir.clone());
                drop(q);
                self.watches.insert(dir.clone(), wd);
                self.dirs.insert(dir.clone(), id);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                drop(q);
                let why = "the inotify watch limit was reached (fs.inotify.max_user_watches): every checkpoint walks the workspace".to_owned();
                tracing::warn!(root = %self.root.display(), "{why}");
                self.broken = Some(why);
                self.ready = false;
                self.drop_under(&RelPath(Vec::new()));
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
        let mut q = lock(&self.queue);
        for d in gone {
            self.dirs.remove(&d);
            self.gitignores.remove(&d);
            let Some(wd) = self.watches.remove(&d) else {
                continue;
            };
            // Unless the watch has moved on to a directory of another name.
            if q.dirs.get(&wd) == Some(&d) {
                q.dirs.remove(&wd);
                let _ = q.inotify.watches().remove(wd);
            }
        }
    }
}
