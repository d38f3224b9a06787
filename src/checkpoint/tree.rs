//! A workspace's files as recorded: one walk of the tree (the `.gitignore`d and excluded
//! paths left out) and the stat table that spares re-reading files that did not change.
//!
//! Each row keeps what `lstat` said when the file was last read (size, mtime, ctime, inode,
//! device, mode). A file whose row still matches is taken as unchanged without being
//! opened — git's stat cache, at nanosecond precision — unless it was modified so close to
//! the scan that recorded it that a later change within the file system's timestamp
//! granularity could hide (git's "racy" rule): such a file is read again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ignore::gitignore::Gitignore;
use std::fs::Metadata;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::store::Objects;
use super::watch::{Plan, Watch};

/// A file modified less than this before a scan started is read again by the next scan.
const RACY_NS: i64 = 20_000_000;

/// A path relative to the workspace, as its bytes: not every path is UTF-8, and a path is
/// recorded and restored byte for byte. On disk and on the wire it is a string when it is
/// UTF-8, else `{"b64": …}`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RelPath(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum WirePath {
    Text(String),
    Bytes { b64: String },
}

impl Serialize for RelPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => WirePath::Text(text.to_owned()),
            Err(_) => WirePath::Bytes {
                b64: base64::engine::general_purpose::STANDARD.encode(&self.0),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match WirePath::deserialize(d)? {
            WirePath::Text(t) => Ok(RelPath(t.into_bytes())),
            WirePath::Bytes { b64 } => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(RelPath)
                .map_err(serde::de::Error::custom),
        }
    }
}

impl RelPath {
    /// As shown to people: lossy when not UTF-8.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
    /// The bytes in base64, when they are not UTF-8.
    pub fn b64(&self) -> Option<String> {
        std::str::from_utf8(&self.0)
            .is_err()
            .then(|| base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

/// What one path is, as recorded.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum Item {
    /// A regular file: its content's object and its permission bits.
    File {
        id: String,
        size: u64,
        mode: u32,
    },
    /// A symbolic link, never followed: its target's bytes are the object.
    Symlink {
        id: String,
    },
    /// A file over `checkpoint.max_file_bytes`: its size and digest only, not restorable.
    Large {
        sha256: String,
        size: u64,
    },
    /// Recorded as their kind, never opened.
    Fifo,
    Socket,
    Device,
}

impl Item {
    pub fn kind(&self) -> &'static str {
        match self {
            Item::File { .. } => "file",
            Item::Symlink { .. } => "symlink",
            Item::Large { .. } => "large",
            Item::Fifo => "fifo",
            Item::Socket => "socket",
            Item::Device => "device",
        }
    }
    /// The stored object it refers to.
    pub fn object(&self) -> Option<&str> {
        match self {
            Item::File { id, .. } | Item::Symlink { id } => Some(id),
            _ => None,
        }
    }
}

/// What `lstat` said of a file when it was read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stat {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    dev: u64,
    mode: u32,
}

impl Stat {
    fn of(m: &Metadata) -> Stat {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Stat {
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
            mode: m.mode(),
        }
    }
}

#[derive(Clone, Debug)]
struct Row {
    /// `None` for a row loaded from the store: its file is read again once.
    stat: Option<Stat>,
    item: Item,
}

/// The recorded state of a workspace's files.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    rows: BTreeMap<RelPath, Row>,
    /// When the scan that made it started (ns since the epoch).
    scanned_ns: i64,
}

/// What a scan leaves out and how far it goes.
pub struct Rules {
    pub exclude: Vec<String>,
    pub max_file_bytes: u64,
    pub max_files: usize,
    /// Directories never walked (the store itself, if it lies inside the workspace).
    pub skip: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(
        "the workspace has more than {0} files (checkpoint.max_files): checkpoints are off for it"
    )]
    TooLarge(usize),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Tree {
    /// A tree of recorded items with no stat rows (each file is read again once).
    pub fn from_items(items: BTreeMap<RelPath, Item>) -> Tree {
        Tree {
            rows: items
                .into_iter()
                .map(|(p, item)| (p, Row { stat: None, item }))
                .collect(),
            scanned_ns: 0,
        }
    }
    pub fn items(&self) -> impl Iterator<Item = (&RelPath, &Item)> {
        self.rows.iter().map(|(p, r)| (p, &r.item))
    }
    pub fn get(&self, path: &RelPath) -> Option<&Item> {
        self.rows.get(path).map(|r| &r.item)
    }

    /// What changed from `self` to `new`, in path order: (path, before, after).
    pub fn changes(&self, new: &Tree) -> Vec<(RelPath, Option<Item>, Option<Item>)> {
        let mut out = Vec::new();
        let mut old = self.rows.iter().peekable();
        let mut cur = new.rows.iter().peekable();
        loop {
            match (old.peek(), cur.peek()) {
                (None, None) => break,
                (Some((p, r)), None) => {
                    out.push(((*p).clone(), Some(r.item.clone()), None));
                    old.next();
                }
                (None, Some((p, r))) => {
                    out.push(((*p).clone(), None, Some(r.item.clone())));
                    cur.next();
                }
                (Some((po, ro)), Some((pn, rn))) => match po.cmp(pn) {
                    std::cmp::Ordering::Less => {
                        out.push(((*po).clone(), Some(ro.item.clone()), None));
                        old.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.push(((*pn).clone(), None, Some(rn.item.clone())));
                        cur.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if ro.item != rn.item {
                            out.push(((*po).clone(), Some(ro.item.clone()), Some(rn.item.clone())));
                        }
                        old.next();
                        cur.next();
                    }
                },
            }
        }
        out
    }
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One path's change: (path, before, after).
pub type Changed = (RelPath, Option<Item>, Option<Item>);

/// The entries of `map` beneath `dir` (and `dir` itself when `this`), in order: the
/// whole map for the root ("").
pub fn under<'a, V>(
    map: &'a BTreeMap<RelPath, V>,
    dir: &RelPath,
    this: bool,
) -> Box<dyn Iterator<Item = (&'a RelPath, &'a V)> + 'a> {
    if dir.0.is_empty() {
        return Box::new(map.iter().filter(move |(k, _)| this || !k.0.is_empty()));
    }
    let mut from = dir.0.clone();
    from.push(b'/');
    let mut to = dir.0.clone();
    to.push(b'/' + 1);
    let own = if this { map.get_key_value(dir) } else { None };
    Box::new(own.into_iter().chain(map.range(RelPath(from)..RelPath(to))))
}

/// `dir`'s child `name`.
pub fn child(dir: &RelPath, name: &[u8]) -> RelPath {
    let mut p = dir.0.clone();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    RelPath(p)
}

/// Whether `path` lies directly in `dir` (`path` is known to be beneath it).
fn is_child(dir: &RelPath, path: &RelPath) -> bool {
    let skip = if dir.0.is_empty() { 0 } else { dir.0.len() + 1 };
    !path.0.get(skip..).unwrap_or_default().contains(&b'/')
}

/// The directory holding `path` ("" for the root's children).
pub fn parent(path: &RelPath) -> RelPath {
    match path.0.iter().rposition(|b| *b == b'/') {
        Some(i) => RelPath(path.0[..i].to_vec()),
        None => RelPath(Vec::new()),
    }
}

/// A scan's start: when it began, and what the watcher says it must list.
pub struct Start {
    ns: i64,
    pub plan: Plan,
}

/// Starts a scan: with a watcher, takes what it saw up to now (cheap, no walk).
pub fn start(rules: &Rules, watch: Option<&mut Watch>) -> Start {
    let ns = now_ns();
    let plan = match watch {
        Some(w) => w.plan((rules.exclude.clone(), rules.max_file_bytes)),
        None => Plan::Full,
    };
    Start { ns, plan }
}

impl Tree {
    /// A started scan that has nothing to list ([`Plan::is_quiet`]) is done: nothing changed.
    pub fn quiet(&mut self, start: &Start) {
        self.scanned_ns = start.ns;
    }
}

/// Scans `root` into `tree` from `start` and returns what changed. With a watcher that saw
/// every event since the last scan, only the directories it marked are listed again;
/// otherwise (no watcher, lost events, first scan) the whole tree is walked. Either way a
/// file whose stat still matches its row is not read again.
pub fn scan(
    root: &Path,
    tree: &mut Tree,
    start: Start,
    rules: &Rules,
    objects: &Objects,
    watch: Option<&mut Watch>,
) -> Result<Vec<Changed>, ScanError> {
    let Start {
        ns: scanned_ns,
        plan,
    } = start;
    let mut overrides = ignore::overrides::OverrideBuilder::new(root);
    for glob in &rules.exclude {
        overrides
            .add(&format!("!{glob}"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    }
    let overrides = overrides
        .build()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut walker = Walker {
        root,
        rules,
        overrides,
        old: &tree.rows,
        old_ns: tree.scanned_ns,
        objects,
        updates: BTreeMap::new(),
        found: 0,
        watch,
    };
    match plan {
        Plan::Full => {
            if let Some(w) = walker.watch.as_deref_mut() {
                // Every watch is set again as the walk meets its directory.
                w.drop_under(&RelPath(Vec::new()));
            }
            walker.walk(&RelPath(Vec::new()), &[])?;
            if let Some(w) = walker.watch.as_deref_mut() {
                w.ready = w.broken.is_none();
            }
            let rows = walker.updates;
            let rows: BTreeMap<RelPath, Row> = rows
                .into_iter()
                .filter_map(|(p, r)| r.map(|r| (p, r)))
                .collect();
            let new = Tree { rows, scanned_ns };
            let changes = tree.changes(&new);
            *tree = new;
            Ok(changes)
        }
        Plan::Dirty { dirty, lost } => {
            walker.dirty(dirty, lost)?;
            let updates = walker.updates;
            let mut changes = Vec::new();
            for (path, row) in updates {
                let before = tree.rows.get(&path).map(|r| r.item.clone());
                let after = row.as_ref().map(|r| r.item.clone());
                if before != after {
                    changes.push((path.clone(), before, after));
                }
                match row {
                    Some(r) => tree.rows.insert(path, r),
                    None => tree.rows.remove(&path),
                };
            }
            tree.scanned_ns = scanned_ns;
            if tree.rows.len() > rules.max_files {
                return Err(ScanError::TooLarge(rules.max_files));
            }
            Ok(changes)
        }
    }
}

/// One scan's walk: the rows it found or lost, and the directories it watched.
struct Walker<'a, 'w> {
    root: &'a Path,
    rules: &'a Rules,
    overrides: ignore::overrides::Override,
    old: &'a BTreeMap<RelPath, Row>,
    old_ns: i64,
    objects: &'a Objects,
    /// New rows, and `None` for paths gone.
    updates: BTreeMap<RelPath, Option<Row>>,
    /// Rows found so far (for `max_files`).
    found: usize,
    watch: Option<&'w mut Watch>,
}

/// A directory's entries that are recorded: (name, is a directory, lstat).
type Listing = Vec<(Vec<u8>, bool, Metadata)>;

impl Walker<'_, '_> {
    fn abs(&self, rel: &RelPath) -> PathBuf {
        if rel.0.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(std::ffi::OsStr::from_bytes(&rel.0))
        }
    }

    /// Lists `dir` (whose ancestors' `.gitignore`s are `chain`), leaving out what is
    /// ignored; returns the listing and `dir`'s own `.gitignore`.
    fn list(
        &self,
        dir: &RelPath,
        chain: &[Arc<Gitignore>],
    ) -> io::Result<(Listing, Option<Arc<Gitignore>>)> {
        let abs = self.abs(dir);
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&abs)? {
            // An entry that vanished mid-listing is not there.
            let Ok(e) = e else { continue };
            let Ok(meta) = e.metadata() else { continue };
            entries.push((e.file_name().as_bytes().to_vec(), meta));
        }
        let own = entries
            .iter()
            .any(|(n, m)| n == b".gitignore" && m.is_file())
            .then(|| Arc::new(Gitignore::new(abs.join(".gitignore")).0));
        let mut out = Vec::with_capacity(entries.len());
        for (name, meta) in entries {
            let is_dir = meta.is_dir();
            let path = abs.join(std::ffi::OsStr::from_bytes(&name));
            if name == b".git" || self.rules.skip.contains(&path) {
                continue;
            }
            if self.ignored(&path, is_dir, chain, own.as_ref()) {
                continue;
            }
            out.push((name, is_dir, meta));
        }
        Ok((out, own))
    }

    /// `checkpoint.exclude` first, then the nearest `.gitignore` that has a say.
    fn ignored(
        &self,
        path: &Path,
        is_dir: bool,
        chain: &[Arc<Gitignore>],
        own: Option<&Arc<Gitignore>>,
    ) -> bool {
        match self.overrides.matched(path, is_dir) {
            ignore::Match::Ignore(_) => return true,
            ignore::Match::Whitelist(_) => return false,
            ignore::Match::None => {}
        }
        for g in own.into_iter().chain(chain.iter().rev()) {
            match g.matched(path, is_dir) {
                ignore::Match::Ignore(_) => return true,
                ignore::Match::Whitelist(_) => return false,
                ignore::Match::None => {}
            }
        }
        false
    }

    /// The `.gitignore`s of `dir`'s ancestors and itself, as the watcher last read them.
    fn chain_of(&self, dir: &RelPath) -> Vec<Arc<Gitignore>> {
        let Some(w) = self.watch.as_deref() else {
            return Vec::new();
        };
        let mut dirs = vec![RelPath(Vec::new())];
        for (i, b) in dir.0.iter().enumerate() {
            if *b == b'/' {
                dirs.push(RelPath(dir.0[..i].to_vec()));
            }
        }
        if !dir.0.is_empty() {
            dirs.push(dir.clone());
        }
        dirs.iter()
            .filter_map(|d| w.gitignores.get(d).cloned())
            .collect()
    }

    /// The row of a listed file: its old one when its stat still matches, else read.
    fn file(&mut self, rel: RelPath, meta: &Metadata) -> Result<(), ScanError> {
        self.found += 1;
        if self.found > self.rules.max_files {
            return Err(ScanError::TooLarge(self.rules.max_files));
        }
        let stat = Stat::of(meta);
        if let Some(row) = self.old.get(&rel) {
            if row.stat == Some(stat) && stat.mtime_ns < self.old_ns - RACY_NS {
                self.updates.insert(rel, Some(row.clone()));
                return Ok(());
            }
        }
        let abs = self.abs(&rel);
        match record(&abs, meta, self.rules, self.objects) {
            Ok(row) => {
                self.updates.insert(rel, Some(row));
            }
            // It vanished between the listing and the read: it is not there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Walks `top` and everything beneath it, watching each directory before listing it
    /// (so a change made after the listing is an event, one made before is listed).
    fn walk(&mut self, top: &RelPath, chain: &[Arc<Gitignore>]) -> Result<(), ScanError> {
        let mut stack: Vec<(RelPath, Vec<Arc<Gitignore>>)> = vec![(top.clone(), chain.to_vec())];
        while let Some((dir, chain)) = stack.pop() {
            let abs = self.abs(&dir);
            let Ok(meta) = std::fs::symlink_metadata(&abs) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let id = (meta.dev(), meta.ino());
            if let Some(w) = self.watch.as_deref_mut() {
                w.add(&dir, id);
            }
            let (listing, own) = match self.list(&dir, &chain) {
                Ok(l) => l,
                // A directory that vanished or cannot be read mid-walk: what it held is
                // not seen.
                Err(_) => continue,
            };
            if let Some(w) = self.watch.as_deref_mut() {
                match &own {
                    Some(g) => w.gitignores.insert(dir.clone(), g.clone()),
                    None => w.gitignores.remove(&dir),
                };
            }
            let mut sub_chain = chain.clone();
            sub_chain.extend(own);
            for (name, is_dir, meta) in listing {
                let rel = child(&dir, &name);
                if is_dir {
                    stack.push((rel, sub_chain.clone()));
                } else {
                    self.file(rel, &meta)?;
                }
            }
        }
        Ok(())
    }

    /// Forgets `dir` and all beneath it: its rows become `None` unless walked again.
    fn forget(&mut self, dir: &RelPath) {
        let gone: Vec<RelPath> = under(self.old, dir, false)
            .map(|(p, _)| p.clone())
            .collect();
        for p in gone {
            self.updates.entry(p).or_insert(None);
        }
        if let Some(w) = self.watch.as_deref_mut() {
            w.drop_under(dir);
        }
    }

    /// Walks `dir` afresh: what it held before is forgotten, what it holds now is found.
    fn rewalk(&mut self, dir: &RelPath) -> Result<(), ScanError> {
        self.forget(dir);
        let chain = self.chain_of(&parent(dir));
        let chain = if dir.0.is_empty() { Vec::new() } else { chain };
        self.walk(dir, &chain)
    }

    /// Lists again the directories the watcher marked.
    fn dirty(&mut self, dirty: BTreeSet<RelPath>, lost: Vec<RelPath>) -> Result<(), ScanError> {
        let mut dirty = dirty;
        // Watches the watcher dropped (renamed away, deleted): their parents list them anew.
        for l in lost {
            let watched = self
                .watch
                .as_deref()
                .is_some_and(|w| w.dirs.contains_key(&l));
            if watched {
                self.forget(&l);
            }
            dirty.insert(parent(&l));
        }
        let mut rewalked: Vec<RelPath> = Vec::new();
        for dir in dirty {
            let within = |r: &RelPath| {
                r.0.is_empty() || dir == *r || dir.0.starts_with(&[r.0.as_slice(), b"/"].concat())
            };
            if rewalked.iter().any(within) {
                continue;
            }
            let Some(id) = self
                .watch
                .as_deref()
                .and_then(|w| w.dirs.get(&dir).copied())
            else {
                // Not a directory we watch (a file's event, or one already forgotten).
                continue;
            };
            let abs = self.abs(&dir);
            let same = std::fs::symlink_metadata(&abs)
                .is_ok_and(|m| m.is_dir() && (m.dev(), m.ino()) == id);
            if !same {
                // Gone or replaced: its parent (marked too) lists what is there now.
                self.forget(&dir);
                continue;
            }
            let chain = self.chain_of(&parent(&dir));
            let chain = if dir.0.is_empty() { Vec::new() } else { chain };
            let (listing, own) = match self.list(&dir, &chain) {
                Ok(l) => l,
                Err(_) => {
                    self.forget(&dir);
                    continue;
                }
            };
            // A changed `.gitignore` changes what is recorded beneath it: walk it all.
            let ignore_row = child(&dir, b".gitignore");
            let ignore_now = listing
                .iter()
                .find(|(n, d, _)| n == b".gitignore" && !d)
                .map(|(_, _, m)| Stat::of(m));
            let ignore_before = self.old.get(&ignore_row).and_then(|r| r.stat);
            let known_ignore = self
                .watch
                .as_deref()
                .is_some_and(|w| w.gitignores.contains_key(&dir));
            if ignore_now != ignore_before || known_ignore != own.is_some() {
                self.rewalk(&dir)?;
                rewalked.push(dir);
                continue;
            }
            if let Some(w) = self.watch.as_deref_mut() {
                if let Some(g) = &own {
                    w.gitignores.insert(dir.clone(), g.clone());
                }
            }
            let mut files = BTreeSet::new();
            let mut subdirs = BTreeSet::new();
            for (name, is_dir, meta) in listing {
                let rel = child(&dir, &name);
                if is_dir {
                    let id = (meta.dev(), meta.ino());
                    let known = self
                        .watch
                        .as_deref()
                        .and_then(|w| w.dirs.get(&rel).copied());
                    if known != Some(id) {
                        self.rewalk(&rel)?;
                        rewalked.push(rel.clone());
                    }
                    subdirs.insert(rel);
                } else {
                    self.file(rel.clone(), &meta)?;
                    files.insert(rel);
                }
            }
            // Files and directories listed before and not now.
            let gone: Vec<RelPath> = under(self.old, &dir, false)
                .map(|(p, _)| p)
                .filter(|p| is_child(&dir, p) && !files.contains(*p))
                .cloned()
                .collect();
            for p in gone {
                self.updates.entry(p).or_insert(None);
            }
            let old_subdirs: Vec<RelPath> = self
                .watch
                .as_deref()
                .map(|w| {
                    under(&w.dirs, &dir, false)
                        .map(|(d, _)| d)
                        .filter(|d| is_child(&dir, d) && !subdirs.contains(*d))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            for d in old_subdirs {
                self.forget(&d);
            }
        }
        Ok(())
    }
}

/// Reads one path into a row. Only regular files are opened, with `O_NOFOLLOW` and
/// `O_NONBLOCK` (a file swapped for a FIFO after the walk cannot block the read), and
/// the row's stat is the open file's own.
fn record(path: &Path, meta: &Metadata, rules: &Rules, objects: &Objects) -> io::Result<Row> {
    let ft = meta.file_type();
    let special = |ft: std::fs::FileType| {
        if ft.is_fifo() {
            Some(Item::Fifo)
        } else if ft.is_socket() {
            Some(Item::Socket)
        } else if ft.is_block_device() || ft.is_char_device() {
            Some(Item::Device)
        } else {
            None
        }
    };
    if ft.is_symlink() {
        let target = std::fs::read_link(path)?;
        let id = objects.put(target.as_os_str().as_bytes())?;
        return Ok(Row {
            stat: Some(Stat::of(meta)),
            item: Item::Symlink { id },
        });
    }
    if let Some(item) = special(ft) {
        return Ok(Row {
            stat: Some(Stat::of(meta)),
            item,
        });
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let fmeta = file.metadata()?;
    if let Some(item) = special(fmeta.file_type()) {
        return Ok(Row {
            stat: Some(Stat::of(&fmeta)),
            item,
        });
    }
    let stat = Stat::of(&fmeta);
    let mode = fmeta.mode() & 0o7777;
    if fmeta.len() > rules.max_file_bytes {
        let mut hasher = Sha256::new();
        let size = io::copy(&mut io::BufReader::new(file), &mut hasher)?;
        return Ok(Row {
            stat: Some(stat),
            item: Item::Large {
                sha256: hex::encode(hasher.finalize()),
                size,
            },
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(fmeta.len()).unwrap_or(0));
    file.take(rules.max_file_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    let size = bytes.len() as u64;
    if size > rules.max_file_bytes {
        // It grew while being read: its size and digest only.
        return Ok(Row {
            stat: None,
            item: Item::Large {
                sha256: hex::encode(Sha256::digest(&bytes)),
                size,
            },
        });
    }
    let id = objects.put(&bytes)?;
    Ok(Row {
        stat: Some(stat),
        item: Item::File { id, size, mode },
    })
}
