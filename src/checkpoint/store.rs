//! One workspace's store under `<data_dir>/checkpoints/<key>/`: content-addressed objects
//! (`objects/ab/cdef…`, named by the SHA-256 of their bytes, so an unchanged file is stored
//! once however many entries refer to it), the timeline as an append-only journal
//! (`timeline.jsonl`, one entry a line), and `base.json`, the recorded state before the
//! first entry kept (the first scan, then whatever pruning folded into it).
//!
//! Never inside the workspace and never a `.git` of the user's: a shadow store of our
//! own. A line that cannot be read (a daemon killed while writing it, a damaged disk) is
//! counted as lost and skipped; the rest of the timeline stays readable.
//!
//! No git library (gix was weighed: ~104 more crates, and its status walks the whole tree
//! anyway): a content-addressed directory and a journal are all a timeline needs, and the
//! scan (`tree.rs`, with the watcher's marks) decides what to read, not an index.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::tree::{Item, RelPath};
use crate::atomic_file::{write_atomic, Durability};
use crate::protocol::CheckpointKind;

/// The content-addressed objects of one store.
pub struct Objects {
    dir: PathBuf,
    /// The store's size: what the last count found, plus new objects written since.
    written: AtomicU64,
}

impl Objects {
    pub fn new(dir: PathBuf) -> Objects {
        Objects {
            dir,
            written: AtomicU64::new(0),
        }
    }

    fn path(&self, id: &str) -> Option<PathBuf> {
        let ok = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| self.dir.join(&id[..2]).join(&id[2..]))
    }

    /// Stores `bytes` (unless stored already) and returns its id.
    pub fn put(&self, bytes: &[u8]) -> io::Result<String> {
        let id = hex::encode(Sha256::digest(bytes));
        let Some(path) = self.path(&id) else {
            return Err(io::Error::other("bad object id"));
        };
        if path.exists() {
            return Ok(id);
        }
        let dir = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(dir)?;
        let mut tmp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
        tmp.write_all(bytes)?;
        tmp.persist(&path).map_err(|e| e.error)?;
        self.written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(id)
    }

    pub fn get(&self, id: &str) -> io::Result<Vec<u8>> {
        let path = self
            .path(id)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad object id"))?;
        fs::read(path)
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Removes every object not in `keep`; returns the bytes of those kept.
    pub fn collect(&self, keep: &HashSet<&str>) -> io::Result<u64> {
        let mut kept = 0;
        let Ok(fans) = fs::read_dir(&self.dir) else {
            return Ok(0);
        };
        for fan in fans.flatten() {
            let prefix = fan.file_name().to_string_lossy().into_owned();
            let Ok(files) = fs::read_dir(fan.path()) else {
                continue;
            };
            for f in files.flatten() {
                let id = format!("{prefix}{}", f.file_name().to_string_lossy());
                if keep.contains(id.as_str()) {
                    kept += f.metadata().map(|m| m.len()).unwrap_or(0);
                } else {
                    let _ = fs::remove_file(f.path());
                }
            }
        }
        self.written.store(kept, Ordering::Relaxed);
        Ok(kept)
    }
}

/// One file's change in an entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Change {
    pub path: RelPath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Item>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Item>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plus: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minus: Option<u64>,
}

/// One entry of the timeline, as the journal keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub kind: CheckpointKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub time: u64,
    pub changes: Vec<Change>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restores: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concurrent: Vec<String>,
}

#[derive(Serialize, Deserialize, Default)]
struct Base {
    /// The last entry folded into it (the next entry's `seq` is higher).
    seq: u64,
    items: Vec<(RelPath, Item)>,
}

/// What is read back from a store.
pub struct Loaded {
    /// `None`: a new store, with no first scan yet.
    pub base: Option<BTreeMap<RelPath, Item>>,
    pub base_seq: u64,
    pub entries: Vec<Record>,
    /// Journal lines that could not be read.
    pub lost: u64,
}

/// The files of one workspace's store.
pub struct Store {
    pub dir: PathBuf,
    pub objects: Objects,
}

impl Store {
    pub fn new(dir: PathBuf) -> Store {
        Store {
            objects: Objects::new(dir.join("objects")),
            dir,
        }
    }

    fn journal(&self) -> PathBuf {
        self.dir.join("timeline.jsonl")
    }

    /// Creates the store's folder (private to the daemon's user) and records which
    /// workspace it belongs to.
    pub fn create(&self, workspace: &Path) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let marker = self.dir.join("workspace");
        if !marker.exists() {
            write_atomic(
                &marker,
                workspace.as_os_str().as_bytes(),
                Durability::Atomic,
            )?;
        }
        Ok(())
    }

    pub fn load(&self) -> io::Result<Loaded> {
        let (base, base_seq) = match fs::read(self.dir.join("base.json")) {
            Ok(bytes) => match serde_json::from_slice::<Base>(&bytes) {
                Ok(b) => (Some(b.items.into_iter().collect()), b.seq),
                // A damaged base: the next scan starts a new one (nothing before it).
                Err(_) => (None, 0),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, 0),
            Err(e) => return Err(e),
        };
        let mut entries = Vec::new();
        let mut lost = 0;
        match fs::read(self.journal()) {
            Ok(bytes) => {
                for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    match serde_json::from_slice::<Record>(line) {
                        Ok(r) if r.seq > base_seq => entries.push(r),
                        Ok(_) => {}
                        Err(_) => lost += 1,
                    }
                }
                // A torn last line: end it, so the next entry starts a line of its own.
                if bytes.last().is_some_and(|&b| b != b'\n') {
                    OpenOptions::new()
                        .append(true)
                        .open(self.journal())?
                        .write_all(b"\n")?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Loaded {
            base,
            base_seq,
            entries,
            lost,
        })
    }

    /// Appends one entry to the journal (one `write`, so a reader never sees half of it
    /// unless the daemon dies inside the call).
    pub fn append(&self, record: &Record) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.journal())?
            .write_all(&line)
    }

    /// Replaces base and journal whole (a new store's first scan, pruning).
    pub fn rewrite(
        &self,
        base: &BTreeMap<RelPath, Item>,
        base_seq: u64,
        entries: &[Record],
    ) -> io::Result<()> {
        let base = Base {
            seq: base_seq,
            items: base.iter().map(|(p, i)| (p.clone(), i.clone())).collect(),
        };
        let bytes = serde_json::to_vec(&base).map_err(io::Error::other)?;
        // The base first: a journal line at or below its seq is skipped on load.
        write_atomic(&self.dir.join("base.json"), &bytes, Durability::Atomic)?;
        let mut journal = Vec::new();
        for r in entries {
            serde_json::to_writer(&mut journal, r).map_err(io::Error::other)?;
            journal.push(b'\n');
        }
        write_atomic(&self.journal(), &journal, Durability::Atomic)
    }
}
