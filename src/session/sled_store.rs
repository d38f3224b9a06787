//! The sled implementation of [`SessionStore`].
//!
//! Layout (one sled database in the session directory):
//! - tree `sessions`: key = session id (UTF-8), value = the JSON-serialised [`Session`];
//! - tree `by_time`: key = `(u64::MAX - created_at)` big-endian ++ id, value = id. Ascending
//!   key order is newest first, ties broken by id; `list` pages through it;
//! - tree `meta`: `schema_version` = [`SCHEMA_VERSION`] as a big-endian u32;
//! - tree `guards`: the guards' persisted counters (src/guards/), opaque here;
//! - trees `mcp_sessions` and `frontends` ([`RecordKind`]): key = id, value = JSON, opaque here.
//!
//! `sessions` and `by_time` change together in one sled transaction (create, delete);
//! `update` never changes `id` or `created_at`, so it touches only `sessions`, with a
//! compare-and-swap loop. `list` still skips index entries without a matching record.
//!
//! Damage: sled 0.34.7 panics on some cut logs and silently replays a prefix of others, and
//! replaying a damaged log rewrites it. So a clean shutdown leaves a record (ids, and the
//! log's length and digest once sled has closed it) that the next open checks *before*
//! sled reads the log; a sled panic during open is caught; either way the store is
//! refused as damaged with the way out (`toolhost session recover`, `recover.rs`).
//! Without a record (after a crash) a silently shortened log cannot be told apart.
//!
//! Nothing here waits for durability: writes become durable at the next [`SessionStore::flush`]
//! (the group committer in `store.rs` calls it).

use std::collections::HashSet;
use std::ffi::OsString;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use nix::fcntl::{Flock, FlockArg};
use sha2::Digest;
use sled::transaction::{abort, ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::backend::{Counter, CounterWrite, Page, Record, RecordKind, RecordWrite, SessionStore};
use crate::error::{Error, Result};
use crate::protocol::Session;

/// sled's log file inside the store dir (sled never `fsync`s it; we do it per flush).
pub(super) const LOG_FILE: &str = "db";
/// sled's directory of values too big for the log.
pub(super) const BLOBS_DIR: &str = "blobs";
/// Our record of the last clean shutdown (sled ignores other files in its dir).
pub(super) const SEAL_FILE: &str = "toolhost-clean-shutdown.json";

/// The on-disk schema this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;
const SCHEMA_KEY: &[u8] = b"schema_version";
const CACHE_BYTES: u64 = 64 << 20;

/// Sessions in a sled database.
pub struct SledStore {
    db: sled::Db,
    sessions: sled::Tree,
    by_time: sled::Tree,
    guards: sled::Tree,
    mcp_sessions: sled::Tree,
    frontends: sled::Tree,
    /// `sled::Tree::len` walks the whole tree, so the count is kept here (set at open).
    count: AtomicU64,
    /// sled's log file, for the `fdatasync` that `sled::Db::flush` leaves out (see `flush`).
    log_file: std::fs::File,
    /// sled's `blobs/` dir (values too big for the log) and the blob files already synced.
    blobs_dir: PathBuf,
    synced_blobs: Mutex<HashSet<OsString>>,
}

/// What a clean shutdown leaves behind: enough to notice sessions missing on the next open.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Seal {
    count: u64,
    /// SHA-256 over every session id (in key order), each followed by a NUL.
    ids_sha256: String,
    /// The ids themselves: `recover` looks for these in the raw log when sled can't
    /// replay it. Not compared on open (the digest covers them).
    #[serde(default)]
    ids: Vec<String>,
    /// The log file as the shutdown left it, checked before sled opens it.
    #[serde(default)]
    log: Option<LogPrint>,
}

/// Length and SHA-256 of sled's log file. Hashing reads the whole file (a few ms per MB)
/// once at shutdown and once at start; it catches any change, not only a cut tail.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct LogPrint {
    len: u64,
    sha256: String,
}

impl LogPrint {
    fn of(dir: &Path) -> std::io::Result<LogPrint> {
        let mut f = std::fs::File::open(dir.join(LOG_FILE))?;
        let mut h = sha2::Sha256::new();
        let len = std::io::copy(&mut f, &mut h)?;
        Ok(LogPrint {
            len,
            sha256: hex::encode(h.finalize()),
        })
    }
}

/// Why [`SledStore::open`] failed; decides the message.
enum OpenError {
    Locked,
    /// Unreadable, or readable with sessions missing: only `toolhost session recover` helps.
    Damaged(String),
    /// A complete message (it names the store).
    Refused(anyhow::Error),
    Other(anyhow::Error),
}

impl From<sled::Error> for OpenError {
    fn from(e: sled::Error) -> OpenError {
        match e {
            sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                OpenError::Locked
            }
            e @ (sled::Error::Corruption { .. } | sled::Error::ReportableBug(_)) => {
                OpenError::Damaged(e.to_string())
            }
            e => OpenError::Other(anyhow::anyhow!(e)),
        }
    }
}

impl OpenError {
    fn into_anyhow(self, dir: &Path) -> anyhow::Error {
        match self {
            OpenError::Locked => anyhow::anyhow!(
                "session store {} is locked by another process (is another toolhost running with this data dir?)",
                dir.display()
            ),
            OpenError::Damaged(why) => {
                let data_dir = dir.parent().unwrap_or(dir);
                anyhow::anyhow!(
                    "session store {} is damaged: {why}. The daemon will not start on it, so no session is \
                     dropped silently. To salvage every readable session into a new store (the damaged one is \
                     kept as {}/sessions.corrupt-<time>), run: toolhost session recover --data-dir {}",
                    dir.display(),
                    data_dir.display(),
                    data_dir.display()
                )
            }
            OpenError::Refused(e) => e,
            OpenError::Other(e) => anyhow::anyhow!("cannot open session store {}: {e:#}", dir.display()),
        }
    }
}

thread_local! {
    /// Set while [`catch_quietly`] runs on this thread: the panic message goes here, not stderr.
    static CAUGHT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`, turning a panic on this thread into `Err(message)` without printing it.
///
/// sled 0.34.7 panics while replaying some damaged logs ("tried to serialize
/// Uninitialized", sled#1387). The panic happens on the thread calling `open`, before sled
/// starts its flusher, so catching it there is enough; the half-opened database is dropped
/// and the caller must not reopen the same dir in this process (refuse, or use a
/// subprocess, as `recover` does). Panics on other threads still reach the previous hook.
fn catch_quietly<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let quiet = CAUGHT.with(|c| {
                let mut c = c.borrow_mut();
                match c.as_mut() {
                    Some(slot) => {
                        let msg = info
                            .payload()
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| info.payload().downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown failure".into());
                        *slot = match info.location() {
                            Some(l) => format!(
                                "{msg} ({}:{})",
                                l.file().rsplit('/').next().unwrap_or(""),
                                l.line()
                            ),
                            None => msg,
                        };
                        true
                    }
                    None => false,
                }
            });
            if !quiet {
                previous(info);
            }
        }));
    });
    CAUGHT.with(|c| *c.borrow_mut() = Some(String::new()));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let msg = CAUGHT.with(|c| c.borrow_mut().take()).unwrap_or_default();
    r.map_err(|_| msg)
}

fn time_key(created_at: u64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + id.len());
    k.extend_from_slice(&(u64::MAX - created_at).to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

fn storage(e: sled::Error) -> Error {
    Error::Server(format!("session store: {e}"))
}

fn decode(id: &str, bytes: &[u8]) -> Result<Session> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::Server(format!("session {id} is corrupt in the store: {e}")))
}

fn encode(s: &Session) -> Result<Vec<u8>> {
    serde_json::to_vec(s).map_err(|e| Error::Server(format!("cannot encode session {}: {e}", s.id)))
}

impl SledStore {
    /// Opens (creating if needed) the store in `dir`; refuses a newer schema, a database
    /// another process holds, and a damaged one (see [`OpenError::Damaged`]).
    pub fn open(dir: &Path) -> anyhow::Result<SledStore> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create session dir {}", dir.display()))?;
        let store = match catch_quietly(|| SledStore::open_checked(dir)) {
            Ok(r) => r,
            Err(panic) => Err(OpenError::Damaged(format!(
                "sled failed while replaying its log: {panic}"
            ))),
        };
        store.map_err(|e| e.into_anyhow(dir))
    }

    /// Opens without the clean-shutdown check or the schema refusal, for `recover`'s export.
    pub(super) fn open_for_export(dir: &Path) -> anyhow::Result<SledStore> {
        let store = match catch_quietly(|| SledStore::open_raw(dir)) {
            Ok(r) => r,
            Err(panic) => Err(OpenError::Damaged(format!(
                "sled failed while replaying its log: {panic}"
            ))),
        };
        store.map_err(|e| e.into_anyhow(dir))
    }

    fn open_checked(dir: &Path) -> Result<SledStore, OpenError> {
        let seal = SledStore::read_seal(dir)?;
        // Before sled sees the log: replaying a damaged one rewrites it (and its snapshot),
        // which would destroy what `recover` can still find in it.
        if let Some(before) = seal.as_ref().and_then(|s| s.log.as_ref()) {
            let now = LogPrint::of(dir).map_err(|e| {
                OpenError::Other(anyhow::anyhow!(
                    "cannot read {}: {e}",
                    dir.join(LOG_FILE).display()
                ))
            })?;
            if now != *before {
                return Err(OpenError::Damaged(format!(
                    "its log changed since the last clean shutdown ({} bytes then, {} now; \
                     content digest differs: {})",
                    before.len,
                    now.len,
                    before.sha256 != now.sha256
                )));
            }
        }
        let store = SledStore::open_raw(dir)?;
        store.check_schema(dir)?;
        store.check_seal(dir, seal)?;
        Ok(store)
    }

    fn open_raw(dir: &Path) -> Result<SledStore, OpenError> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .mode(sled::Mode::HighThroughput)
            // No flusher thread: it woke twice a second and fsynced even with nothing
            // written. Every write is flushed by the group committer in `store.rs` before it
            // is acknowledged, so the timer added no durability.
            .flush_every_ms(None)
            .open()
            .map_err(OpenError::from)?;
        let sessions = db.open_tree("sessions")?;
        let by_time = db.open_tree("by_time")?;
        let guards = db.open_tree("guards")?;
        let mcp_sessions = db.open_tree(RecordKind::McpSession.tree())?;
        let frontends = db.open_tree(RecordKind::Frontend.tree())?;
        let mut n = 0u64;
        for k in sessions.iter().keys() {
            k?;
            n += 1;
        }
        let log_path = dir.join(LOG_FILE);
        let log_file = std::fs::File::open(&log_path).map_err(|e| {
            OpenError::Other(anyhow::anyhow!(
                "cannot open {} for fsync: {e}",
                log_path.display()
            ))
        })?;
        Ok(SledStore {
            db,
            sessions,
            by_time,
            guards,
            mcp_sessions,
            frontends,
            count: AtomicU64::new(n),
            log_file,
            blobs_dir: dir.join(BLOBS_DIR),
            synced_blobs: Mutex::new(HashSet::new()),
        })
    }

    fn check_schema(&self, dir: &Path) -> Result<(), OpenError> {
        let meta = self.db.open_tree("meta")?;
        match meta.get(SCHEMA_KEY)? {
            None if self.count() == 0 => {
                meta.insert(SCHEMA_KEY, &SCHEMA_VERSION.to_be_bytes())?;
                self.db.flush()?;
            }
            // Sessions without a schema record: the record was lost with part of the log.
            None => {
                return Err(OpenError::Damaged(
                    "it holds sessions but no schema_version record".into(),
                ))
            }
            Some(v) => {
                let found = <[u8; 4]>::try_from(v.as_ref())
                    .map(u32::from_be_bytes)
                    .map_err(|_| {
                        OpenError::Damaged(format!("unreadable schema_version {:?}", v.as_ref()))
                    })?;
                if found > SCHEMA_VERSION {
                    return Err(OpenError::Refused(anyhow::anyhow!(
                        "session store {} has schema version {found}, newer than the {SCHEMA_VERSION} this toolhost \
                         supports; upgrade toolhost or use another data dir",
                        dir.display()
                    )));
                }
                if found < SCHEMA_VERSION {
                    return Err(OpenError::Refused(anyhow::anyhow!(
                        "session store {} has unknown older schema version {found}",
                        dir.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// The record the last clean shutdown left ([`SledStore::seal`]), if any. An unreadable
    /// one is ignored (with a warning): it only ever adds checks.
    fn read_seal(dir: &Path) -> Result<Option<Seal>, OpenError> {
        let path = dir.join(SEAL_FILE);
        match std::fs::read(&path) {
            Ok(t) => Ok(serde_json::from_slice::<Seal>(&t)
                .inspect_err(|e| {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring an unreadable clean-shutdown record")
                })
                .ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(OpenError::Other(anyhow::anyhow!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// Compares the opened store with the clean-shutdown record, then removes the record:
    /// it only describes the store as it was at that shutdown.
    ///
    /// sled replays its log up to the first unreadable entry and silently drops the rest,
    /// so a damaged tail shows up as sessions missing against this record. Not detected:
    /// damage after a crash (no record then; logged as a warning), and damage that keeps
    /// the same ids but loses an update to one of them.
    fn check_seal(&self, dir: &Path, seal: Option<Seal>) -> Result<(), OpenError> {
        let Some(seal) = seal else {
            if self.count() > 0 {
                tracing::warn!(
                    store = %dir.display(),
                    "the session store was not shut down cleanly last time; \
                     damage to the end of its log cannot be detected on this start"
                );
            }
            return Ok(());
        };
        let now = self.seal_now()?;
        if (now.count, &now.ids_sha256) != (seal.count, &seal.ids_sha256) {
            return Err(OpenError::Damaged(format!(
                "at the last clean shutdown it held {} sessions, now {} are readable: \
                 the end of its log was lost",
                seal.count, now.count
            )));
        }
        let path = dir.join(SEAL_FILE);
        std::fs::remove_file(&path)
            .and_then(|()| std::fs::File::open(dir)?.sync_all())
            .map_err(|e| OpenError::Other(anyhow::anyhow!("cannot remove {}: {e}", path.display())))
    }

    /// The count and id digest the clean-shutdown record holds.
    fn seal_now(&self) -> Result<Seal, OpenError> {
        let mut h = sha2::Sha256::new();
        let mut count = 0u64;
        let mut ids = Vec::new();
        for k in self.sessions.iter().keys() {
            let k = k?;
            h.update(&k);
            h.update([0u8]);
            count += 1;
            ids.push(String::from_utf8_lossy(&k).into_owned());
        }
        Ok(Seal {
            count,
            ids_sha256: hex::encode(h.finalize()),
            ids,
            log: None,
        })
    }

    /// Records a clean shutdown, so the next open can tell a damaged log (see
    /// `open_checked` and `check_seal`): the ids now, then the log's length and digest once
    /// sled has closed it. sled still writes to the log while its `Db` drops, so this waits
    /// until `store` is the last handle; closing is confirmed by taking sled's own lock on the log
    /// (waiting at most 5 s; otherwise the record has no log digest and only the ids are
    /// checked). Written with temp + fsync + rename: a crash leaves no record, not a bad one.
    pub(super) fn seal(mut store: Arc<SledStore>, dir: &Path) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // A write still running on a blocking thread holds a handle: wait for it, so the
        // record describes the final state (a stale record would refuse the next start).
        let store = loop {
            match Arc::try_unwrap(store) {
                Ok(s) => break s,
                Err(s) if std::time::Instant::now() < deadline => {
                    store = s;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(_) => bail!("the session store is still in use; no clean-shutdown record"),
            }
        };
        let mut seal = store.seal_now().map_err(|e| e.into_anyhow(dir))?;
        drop(store);
        let log = dir.join(LOG_FILE);
        let mut file = std::fs::File::open(&log)?;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(l) => break Some(l),
                Err((f, _)) if std::time::Instant::now() < deadline => {
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(_) => {
                    tracing::warn!(store = %dir.display(), "sled did not close its log within 5 s; the clean-shutdown record has no log digest");
                    break None;
                }
            }
        };
        if lock.is_some() {
            seal.log =
                Some(LogPrint::of(dir).with_context(|| format!("cannot read {}", log.display()))?);
        }
        let path = dir.join(SEAL_FILE);
        let bytes = serde_json::to_vec(&seal)?;
        crate::atomic_file::write_atomic(&path, &bytes, crate::atomic_file::Durability::Synced)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Every record that decodes, and how many did not (for `recover`).
    pub(super) fn export(&self) -> anyhow::Result<(Vec<Session>, u64)> {
        let mut out = Vec::new();
        let mut bad = 0;
        for kv in self.sessions.iter() {
            let (k, v) = kv?;
            match serde_json::from_slice::<Session>(&v) {
                Ok(s) if s.id.as_bytes() == k.as_ref() => out.push(s),
                _ => bad += 1,
            }
        }
        Ok((out, bad))
    }

    /// sled writes a blob file (a log item over segment_size / 4 = 128 KiB, e.g. a leaf of
    /// 16 sessions of ~8 KiB) and never `fsync`s it; do that for blobs not synced yet.
    fn sync_new_blobs(&self) -> std::io::Result<()> {
        let mut synced = crate::lock(&self.synced_blobs);
        let mut present = HashSet::new();
        let mut any = false;
        let entries = match std::fs::read_dir(&self.blobs_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            r => r?,
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if !synced.contains(&name) {
                match std::fs::File::open(entry.path()) {
                    Ok(f) => f.sync_data()?,
                    // Garbage-collected by sled meanwhile.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                any = true;
            }
            present.insert(name);
        }
        if any {
            std::fs::File::open(&self.blobs_dir)?.sync_all()?;
        }
        *synced = present;
        Ok(())
    }

    /// The session a `by_time` entry points to, or `None` (with a log line) when the entry
    /// is dangling, stale or its record is corrupt.
    fn resolve(&self, key: &[u8], id: &[u8]) -> Result<Option<Session>> {
        let Ok(id) = std::str::from_utf8(id) else {
            tracing::warn!(key = %hex::encode(key), "session index entry with a non-UTF-8 id; skipped");
            return Ok(None);
        };
        let Some(bytes) = self.sessions.get(id.as_bytes()).map_err(storage)? else {
            // A deleted session whose index entry is left behind; never expected, harmless.
            tracing::debug!(id, "session index entry without a record; skipped");
            return Ok(None);
        };
        match decode(id, &bytes) {
            Ok(s) if time_key(s.created_at, &s.id) == key => Ok(Some(s)),
            Ok(_) => {
                tracing::debug!(id, "stale session index entry; skipped");
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(id, error = %e, "corrupt session record skipped in list");
                Ok(None)
            }
        }
    }
}

impl SessionStore for SledStore {
    fn get(&self, id: &str) -> Result<Option<Session>> {
        match self.sessions.get(id.as_bytes()).map_err(storage)? {
            None => Ok(None),
            Some(b) => decode(id, &b).map(Some),
        }
    }

    fn insert(&self, session: &Session) -> Result<bool> {
        let value = encode(session)?;
        let tkey = time_key(session.created_at, &session.id);
        let id = session.id.as_bytes();
        let r = (&self.sessions, &self.by_time).transaction(|(s, t)| {
            if s.get(id)?.is_some() {
                return abort(());
            }
            s.insert(id, value.as_slice())?;
            t.insert(tkey.as_slice(), id)?;
            Ok(())
        });
        match r {
            Ok(()) => {
                self.count.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(TransactionError::Abort(())) => Ok(false),
            Err(TransactionError::Storage(e)) => Err(storage(e)),
        }
    }

    fn update(&self, id: &str, f: &dyn Fn(&mut Session)) -> Result<Option<Session>> {
        loop {
            let Some(old) = self.sessions.get(id.as_bytes()).map_err(storage)? else {
                return Ok(None);
            };
            let mut s = decode(id, &old)?;
            let (keep_id, keep_created) = (s.id.clone(), s.created_at);
            f(&mut s);
            // The index key depends on these two; they never change after create.
            s.id = keep_id;
            s.created_at = keep_created;
            let new = encode(&s)?;
            match self
                .sessions
                .compare_and_swap(id.as_bytes(), Some(&old), Some(new))
                .map_err(storage)?
            {
                Ok(()) => return Ok(Some(s)),
                Err(_) => continue, // someone else wrote in between: re-read and re-apply
            }
        }
    }

    fn delete(&self, id: &str) -> Result<bool> {
        let key = id.as_bytes();
        let r = (&self.sessions, &self.by_time).transaction(|(s, t)| {
            let Some(old) = s.remove(key)? else {
                return Ok(false);
            };
            match serde_json::from_slice::<Session>(&old) {
                Ok(rec) => {
                    t.remove(time_key(rec.created_at, &rec.id))?;
                }
                // The index entry can't be found; `list` skips it since the record is gone.
                Err(e) => tracing::warn!(id, error = %e, "deleting a corrupt session record"),
            }
            Ok::<_, ConflictableTransactionError<()>>(true)
        });
        match r {
            Ok(existed) => {
                if existed {
                    self.count.fetch_sub(1, Ordering::Relaxed);
                }
                Ok(existed)
            }
            Err(TransactionError::Abort(())) => Ok(false),
            Err(TransactionError::Storage(e)) => Err(storage(e)),
        }
    }

    fn list(&self, limit: usize, after: Option<&str>) -> Result<Page> {
        let lo = match after {
            None => Bound::Unbounded,
            Some(c) => {
                let k = hex::decode(c)
                    .ok()
                    .filter(|k| k.len() > 8)
                    .ok_or_else(|| Error::InvalidParams(format!("invalid cursor: {c:?}")))?;
                Bound::Excluded(k)
            }
        };
        let mut iter = self.by_time.range::<Vec<u8>, _>((lo, Bound::Unbounded));
        let mut sessions = Vec::with_capacity(limit.min(1024));
        let mut last: Option<sled::IVec> = None;
        if limit == 0 {
            return Ok(Page {
                sessions,
                next: None,
            });
        }
        for kv in iter.by_ref() {
            let (k, id) = kv.map_err(storage)?;
            if let Some(s) = self.resolve(&k, &id)? {
                sessions.push(s);
                last = Some(k);
                if sessions.len() >= limit {
                    break;
                }
            }
        }
        // A `next` only when the page is full and the index goes on (a trailing stale entry
        // may still yield one last empty page).
        let more = sessions.len() >= limit && iter.next().is_some();
        let next = if more {
            last.map(|k| hex::encode(&k))
        } else {
            None
        };
        Ok(Page { sessions, next })
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// `sled::Db::flush` writes the log and, on Linux, waits with `sync_file_range`, which
    /// neither flushes the drive's write cache nor commits the file's new length (sled
    /// `fsync`s only from its background flusher, which we do not start). That survives a killed process
    /// but not a power loss, so an `fdatasync` of new blob files and the log file follows.
    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(storage)?;
        self.sync_new_blobs()
            .and_then(|()| self.log_file.sync_data())
            .map_err(|e| Error::Server(format!("session store: fsync failed: {e}")))
    }

    fn counters(&self) -> Result<Vec<Counter>> {
        self.guards
            .iter()
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(storage))
            .collect()
    }

    fn set_counters(&self, writes: &[CounterWrite]) -> Result<()> {
        for (key, value) in writes {
            match value {
                Some(v) => self.guards.insert(key.as_slice(), v.as_slice()),
                None => self.guards.remove(key.as_slice()),
            }
            .map_err(storage)?;
        }
        Ok(())
    }

    fn records(&self, kind: RecordKind) -> Result<Vec<Record>> {
        self.tree(kind)
            .iter()
            .map(|kv| {
                let (k, v) = kv.map_err(storage)?;
                Ok((String::from_utf8_lossy(&k).into_owned(), v.to_vec()))
            })
            .collect()
    }

    fn record(&self, kind: RecordKind, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .tree(kind)
            .get(key.as_bytes())
            .map_err(storage)?
            .map(|v| v.to_vec()))
    }

    fn set_records(&self, kind: RecordKind, writes: &[RecordWrite]) -> Result<()> {
        let tree = self.tree(kind);
        for (key, value) in writes {
            match value {
                Some(v) => tree.insert(key.as_bytes(), v.as_slice()),
                None => tree.remove(key.as_bytes()),
            }
            .map_err(storage)?;
        }
        Ok(())
    }
}

impl SledStore {
    fn tree(&self, kind: RecordKind) -> &sled::Tree {
        match kind {
            RecordKind::McpSession => &self.mcp_sessions,
            RecordKind::Frontend => &self.frontends,
        }
    }
}

#[cfg(test)]
impl SledStore {
    /// Writes raw bytes as a record (and its index entry) to simulate corruption.
    pub(crate) fn put_raw(&self, id: &str, created_at: u64, bytes: &[u8]) {
        self.sessions.insert(id.as_bytes(), bytes).unwrap();
        self.by_time
            .insert(time_key(created_at, id), id.as_bytes())
            .unwrap();
    }

    pub(crate) fn put_meta(&self, key: &[u8], value: &[u8]) {
        self.db
            .open_tree("meta")
            .unwrap()
            .insert(key, value)
            .unwrap();
        self.db.flush().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_quietly_turns_a_panic_into_its_message() {
        assert_eq!(catch_quietly(|| 5), Ok(5));
        let line = line!() + 1;
        let r = catch_quietly(|| -> u32 { panic!("tried to serialize {}", "Uninitialized") });
        assert_eq!(
            r,
            Err(format!(
                "tried to serialize Uninitialized (sled_store.rs:{line})"
            ))
        );
        // The slot is cleared: a later panic elsewhere reaches the normal hook again.
        assert!(CAUGHT.with(|c| c.borrow().is_none()));
    }
}
