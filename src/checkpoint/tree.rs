//! A workspace's files as recorded: one walk of the tree (the `.gitignore`d and excluded
//! paths left out) and the stat table that spares re-reading files that did not change.
//!
//! Each row keeps what `lstat` said when the file was last read (size, mtime, ctime, inode,
//! device, mode). A file whose row still matches is taken as unchanged without being
//! opened — git's stat cache, at nanosecond precision — unless it was modified so close to
//! the scan that recorded it that a later change within the file system's timestamp
//! granularity could hide (git's "racy" rule): such a file is read again.

use std::collections::BTreeMap;
use std::fs::Metadata;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::store::Objects;

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

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Walks `root` and records every file, reusing `prev`'s row for each file whose stat
/// still matches it and storing the content of every other one in `objects`.
pub fn scan(root: &Path, prev: &Tree, rules: &Rules, objects: &Objects) -> Result<Tree, ScanError> {
    let scanned_ns = now_ns();
    let mut overrides = ignore::overrides::OverrideBuilder::new(root);
    for glob in &rules.exclude {
        overrides
            .add(&format!("!{glob}"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    }
    let overrides = overrides
        .build()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let skip = rules.skip.clone();
    let walk = ignore::WalkBuilder::new(root)
        .hidden(false)
        .parents(false)
        .ignore(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .overrides(overrides)
        .filter_entry(move |e| e.file_name() != ".git" && !skip.iter().any(|s| e.path() == s))
        .build();
    let mut rows = BTreeMap::new();
    for entry in walk {
        // A directory that vanished or cannot be read mid-walk: what it held is not seen.
        let Ok(entry) = entry else { continue };
        let Some(ft) = entry.file_type() else {
            continue;
        };
        if ft.is_dir() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let rel = RelPath(rel.as_os_str().as_bytes().to_vec());
        if rows.len() >= rules.max_files {
            return Err(ScanError::TooLarge(rules.max_files));
        }
        // The walk does not follow links: this is `lstat`.
        let Ok(meta) = entry.metadata() else { continue };
        let stat = Stat::of(&meta);
        if let Some(row) = prev.rows.get(&rel) {
            if row.stat == Some(stat) && stat.mtime_ns < prev.scanned_ns - RACY_NS {
                rows.insert(rel, row.clone());
                continue;
            }
        }
        match record(entry.path(), &meta, rules, objects) {
            Ok(row) => {
                rows.insert(rel, row);
            }
            // It vanished between the walk and the read: it is not there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Tree { rows, scanned_ns })
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
