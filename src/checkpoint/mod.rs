//! Checkpoints: one timeline of changes per workspace, whichever frontend made them
//! (proto-docs/checkpoints.md).
//!
//! The pipeline calls [`Checkpoints::before`] for each call that can change the workspace
//! and finishes the returned [`Pending`] when the call ends. Both take a scan of the
//! workspace ([`tree::scan`]) under the workspace's lock, so scans happen in order, and
//! each entry is the difference between one scan and the one before it:
//!
//! - at a call's start, when no other call of the workspace is running, whatever changed
//!   since the last scan was done by something else: an `outside` entry;
//! - at a call's end, what changed since the last scan is that call's entry. Calls that
//!   overlapped it in the same workspace are named in its `concurrent` (a scan cannot tell
//!   whose write a file was); a call's start scan is skipped while others run, so their
//!   changes are never split into an `outside` entry.
//!
//! Restores (`restore.rs`) go through the same lock and refuse while a call runs.

mod diff;
mod restore;
mod store;
mod tools;
mod tree;
mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::Error;
use crate::protocol::{
    CheckpointDiffResult, CheckpointEntry, CheckpointFile, CheckpointKind, CheckpointListParams,
    CheckpointListResult, FileChange,
};
use store::{Change, Record, Store};
use tree::{Item, RelPath, Rules, ScanError, Tree};

pub use restore::restore;
pub use tools::{tools, Reach};

/// Entries `checkpoint.list` returns unless asked for another number.
const DEFAULT_LIMIT: usize = 50;

/// The daemon's checkpoint stores, one per workspace, opened on first use.
pub struct Checkpoints {
    /// `<data_dir>/checkpoints`.
    dir: PathBuf,
    open: Arc<Mutex<Open>>,
}

/// The open workspaces, by root and by each directory they were asked for by.
type Open = HashMap<PathBuf, Arc<Workspace>>;

/// Who made a call, for its entry.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub call_id: Option<String>,
    pub tool: Option<String>,
    pub frontend: Option<String>,
    pub session: Option<String>,
    /// For a restore: the entry it restores.
    pub restores: Option<String>,
}

/// One workspace's timeline and the calls running in it.
pub(crate) struct Workspace {
    root: PathBuf,
    key: String,
    store: Arc<Store>,
    state: tokio::sync::Mutex<State>,
    running: Mutex<HashMap<String, HashSet<String>>>,
}

#[derive(Default)]
struct State {
    timeline: Option<Timeline>,
    /// Why this workspace records nothing (too large, a store that cannot be written).
    disabled: Option<String>,
}

/// A loaded timeline: the last scan, the base and the entries kept.
struct Timeline {
    tree: Tree,
    base: BTreeMap<RelPath, Item>,
    base_seq: u64,
    entries: Vec<Record>,
    next_seq: u64,
    lost: u64,
    /// The change watcher feeding the scans (`None`: it could not start; every scan walks).
    watch: Option<watch::Watch>,
}

/// Closes those of `roots` no call holds; returns the others. Only the `open` map hands
/// workspaces out, so under its lock a workspace referenced by nothing else is one no
/// call has or can get.
fn close_unheld(open: &Mutex<Open>, roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
    let mut held = Vec::new();
    for root in roots {
        let Some(ws) = open.get(root).cloned() else {
            continue;
        };
        let keys: Vec<PathBuf> = open
            .iter()
            .filter(|(_, w)| Arc::ptr_eq(w, &ws))
            .map(|(k, _)| k.clone())
            .collect();
        // The map's entries and `ws` above: nobody else.
        if Arc::strong_count(&ws) == keys.len() + 1 {
            for k in keys {
                open.remove(&k);
            }
        } else {
            held.push(root.clone());
        }
    }
    held
}

/// What the scans of one workspace obey, from config.
fn rules(config: &Config, store: &Store, root: &Path) -> Rules {
    Rules {
        exclude: config.checkpoint.exclude.clone(),
        max_file_bytes: config.checkpoint.max_file_bytes,
        max_files: config.checkpoint.max_files,
        // The daemon's data dir (`<data_dir>/checkpoints/<key>`'s grandparent: sessions,
        // audit log, this store) when the workspace holds it, e.g. a workspace at `$HOME`.
        skip: store
            .dir
            .parent()
            .and_then(Path::parent)
            .into_iter()
            .filter(|d| d.starts_with(root))
            .map(Path::to_path_buf)
            .collect(),
    }
}

/// Whether a call of a session gets checkpoints: the session's meta
/// `{"checkpoint": {"enabled": …}}`, else its profile's `checkpoint.enabled`, else config
/// `checkpoint.enabled` (a throw-away sandbox session turns them off for itself).
pub fn enabled_for(
    config: &Config,
    profile: Option<&str>,
    session_meta: &serde_json::Value,
) -> bool {
    if let Some(on) = session_meta
        .get("checkpoint")
        .and_then(|c| c.get("enabled"))
        .and_then(serde_json::Value::as_bool)
    {
        return on;
    }
    profile
        .and_then(|p| config.profiles.get(p))
        .and_then(|p| p.checkpoint)
        .map_or(config.checkpoint.enabled, |c| c.enabled)
}

impl Checkpoints {
    pub fn new(data_dir: &Path) -> Checkpoints {
        Checkpoints {
            dir: data_dir.join("checkpoints"),
            open: Arc::default(),
        }
    }

    /// The store's directory: whatever sandbox a command runs in, it is never writable
    /// there (it is not beneath a workspace).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn key_of(root: &Path) -> String {
        use std::os::unix::ffi::OsStrExt;
        let mut key = hex::encode(Sha256::digest(root.as_os_str().as_bytes()));
        key.truncate(16);
        key
    }

    /// The workspace whose root is `dir` (canonicalised), opened on first use.
    fn workspace(&self, dir: &Path) -> std::io::Result<Arc<Workspace>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ws) = open.get(dir) {
            return Ok(ws.clone());
        }
        let root = std::fs::canonicalize(dir)?;
        if let Some(ws) = open.get(&root) {
            let ws = ws.clone();
            open.insert(dir.to_path_buf(), ws.clone());
            return Ok(ws);
        }
        let key = Self::key_of(&root);
        let ws = Arc::new(Workspace {
            store: Arc::new(Store::new(self.dir.join(&key))),
            root: root.clone(),
            key,
            state: tokio::sync::Mutex::new(State::default()),
            running: Mutex::new(HashMap::new()),
        });
        open.insert(root, ws.clone());
        open.insert(dir.to_path_buf(), ws.clone());
        Ok(ws)
    }

    /// Closes the timelines of `roots`, projects whose last session went: their scans, base
    /// and change watcher (inotify watches) are dropped; the store stays on disk and the
    /// next call there opens it again. A workspace some call still holds (the end of a
    /// call's entry) is closed once it is let go, looked at every 50 ms for 10 s.
    pub fn close(&self, roots: &[PathBuf]) {
        let held = close_unheld(&self.open, roots);
        if held.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let open = Arc::downgrade(&self.open);
        runtime.spawn(async move {
            let mut held = held;
            for _ in 0..200 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let Some(open) = open.upgrade() else { return };
                held = close_unheld(&open, &held);
                if held.is_empty() {
                    return;
                }
            }
        });
    }

    /// The root of every workspace with a store.
    fn recorded(&self) -> Vec<PathBuf> {
        use std::os::unix::ffi::OsStringExt;
        let Ok(stores) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        stores
            .flatten()
            .filter_map(|store| std::fs::read(store.path().join("workspace")).ok())
            .map(|bytes| PathBuf::from(std::ffi::OsString::from_vec(bytes)))
            .collect()
    }

    /// The workspace of a store that exists: the one whose root holds `dir` most closely,
    /// else `None`.
    fn find(&self, dir: &Path) -> Option<Arc<Workspace>> {
        let dir = std::fs::canonicalize(dir).ok()?;
        let mut best: Option<PathBuf> = None;
        for root in self.recorded() {
            if dir.starts_with(&root)
                && best
                    .as_ref()
                    .is_none_or(|b| root.as_os_str().len() > b.as_os_str().len())
            {
                best = Some(root);
            }
        }
        self.workspace(&best?).ok()
    }

    /// Whether entry `id` belongs to the recorded workspace holding `dir` most closely
    /// (what a tool call in `dir` may see and restore).
    pub fn holds(&self, dir: &Path, id: &str) -> bool {
        match (self.find(dir), self.by_id(id)) {
            (Some(a), Ok((b, _))) => Arc::ptr_eq(&a, &b),
            _ => false,
        }
    }

    /// The workspace of an entry id (`cp_<key>_<n>`) and the entry's number.
    fn by_id(&self, id: &str) -> Result<(Arc<Workspace>, u64), Error> {
        use std::os::unix::ffi::OsStringExt;
        let unknown = || Error::InvalidParams(format!("no checkpoint entry {id:?}"));
        let rest = id.strip_prefix("cp_").ok_or_else(unknown)?;
        let (key, seq) = rest.split_once('_').ok_or_else(unknown)?;
        let seq: u64 = seq.parse().map_err(|_| unknown())?;
        if key.len() != 16 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(unknown());
        }
        let bytes = std::fs::read(self.dir.join(key).join("workspace")).map_err(|_| unknown())?;
        let root = PathBuf::from(std::ffi::OsString::from_vec(bytes));
        let ws = self.workspace(&root).map_err(|_| unknown())?;
        Ok((ws, seq))
    }

    /// Called before a call that can change `workspace` runs (checkpoints on for it:
    /// [`enabled_for`]): registers it as running and, when it is the only one, records
    /// what changed since the last scan as an `outside` entry. `None` when the workspace
    /// records nothing.
    pub async fn before(
        &self,
        config: &Arc<Config>,
        workspace: &Path,
        caller: Caller,
    ) -> Option<Pending> {
        let call_id = caller.call_id.clone()?;
        let ws = match self.workspace(workspace) {
            Ok(ws) => ws,
            Err(e) => {
                tracing::debug!(workspace = %workspace.display(), "no checkpoints: {e}");
                return None;
            }
        };
        let mut state = ws.state.lock().await;
        if state.disabled.is_some() {
            return None;
        }
        let alone = {
            let mut running = ws.running.lock().unwrap_or_else(|e| e.into_inner());
            let others: HashSet<String> = running.keys().cloned().collect();
            for (_, seen) in running.iter_mut() {
                seen.insert(call_id.clone());
            }
            let alone = others.is_empty();
            running.insert(call_id.clone(), others);
            alone
        };
        if alone {
            let outside = Caller::default();
            ws.scan_and_record(&mut state, config, CheckpointKind::Outside, outside, None)
                .await;
        }
        drop(state);
        Some(Pending {
            ws,
            config: config.clone(),
            caller,
            done: false,
        })
    }

    pub async fn list(
        &self,
        config: &Arc<Config>,
        default_ws: &Path,
        p: CheckpointListParams,
    ) -> Result<CheckpointListResult, Error> {
        let dir = p.workspace.as_deref().map(Path::new).unwrap_or(default_ws);
        let mut workspaces: Vec<String> = self
            .recorded()
            .iter()
            .map(|w| w.display().to_string())
            .collect();
        workspaces.sort();
        let Some(ws) = self.find(dir) else {
            return Ok(CheckpointListResult {
                workspace: dir.display().to_string(),
                entries: Vec::new(),
                lost: 0,
                disabled: (!config.checkpoint.enabled)
                    .then(|| "checkpoint.enabled is false".to_owned()),
                watched: false,
                workspaces,
            });
        };
        let mut state = ws.state.lock().await;
        let (entries, lost, watched) = match ws.loaded(&mut state, config).await {
            Some(tl) => {
                let limit = p.limit.unwrap_or(DEFAULT_LIMIT);
                let entries = tl
                    .entries
                    .iter()
                    .rev()
                    .filter(|r| p.since.is_none_or(|s| r.time >= s))
                    .filter(|r| p.session.is_none() || r.session == p.session)
                    .filter(|r| p.frontend.is_none() || r.frontend == p.frontend)
                    .take(limit)
                    .map(|r| ws.entry(r))
                    .collect();
                let watched = tl.watch.as_ref().is_some_and(watch::Watch::watching);
                (entries, tl.lost, watched)
            }
            None => (Vec::new(), 0, false),
        };
        Ok(CheckpointListResult {
            workspace: ws.root.display().to_string(),
            entries,
            lost,
            disabled: state.disabled.clone(),
            watched,
            workspaces,
        })
    }

    pub async fn diff(
        &self,
        config: &Arc<Config>,
        id: &str,
        path: Option<&str>,
    ) -> Result<CheckpointDiffResult, Error> {
        let (ws, seq) = self.by_id(id)?;
        let mut state = ws.state.lock().await;
        let tl = ws
            .loaded(&mut state, config)
            .await
            .ok_or_else(|| Error::InvalidParams(format!("no checkpoint entry {id:?}")))?;
        let record = tl
            .entries
            .iter()
            .find(|r| r.seq == seq)
            .ok_or_else(|| {
                Error::InvalidParams(format!("no checkpoint entry {id:?} (pruned, or lost)"))
            })?
            .clone();
        drop(state);
        let store = ws.store.clone();
        let path = path.map(str::to_owned);
        let diff = tokio::task::spawn_blocking(move || {
            let mut out = String::new();
            for c in &record.changes {
                if path.as_deref().is_none_or(|p| c.path.shown() == p) {
                    diff::unified(&store.objects, c, &mut out);
                }
            }
            out
        })
        .await
        .map_err(|e| Error::Server(e.to_string()))?;
        Ok(CheckpointDiffResult {
            id: id.to_owned(),
            diff,
        })
    }
}

/// A call that may change its workspace, between its start and its end.
pub struct Pending {
    ws: Arc<Workspace>,
    config: Arc<Config>,
    caller: Caller,
    done: bool,
}

impl Pending {
    /// The call ended: records what changed since the last scan as its entry.
    pub async fn finish(mut self) {
        self.done = true;
        finish(
            self.ws.clone(),
            self.config.clone(),
            std::mem::take(&mut self.caller),
        )
        .await;
    }
}

impl Drop for Pending {
    /// A call dropped before it ended (its caller went away) still gets its entry.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (ws, config, caller) = (
            self.ws.clone(),
            self.config.clone(),
            std::mem::take(&mut self.caller),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(finish(ws, config, caller));
        }
    }
}

async fn finish(ws: Arc<Workspace>, config: Arc<Config>, caller: Caller) {
    let mut state = ws.state.lock().await;
    let concurrent = {
        let mut running = ws.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = caller.call_id.clone().unwrap_or_default();
        let mut seen: Vec<String> = running
            .remove(&id)
            .unwrap_or_default()
            .into_iter()
            .collect();
        seen.sort();
        seen
    };
    ws.scan_and_record(
        &mut state,
        &config,
        CheckpointKind::Call,
        caller,
        Some(concurrent),
    )
    .await;
}

impl Workspace {
    fn id(&self, seq: u64) -> String {
        format!("cp_{}_{seq}", self.key)
    }

    /// Whether a call is running in it (a restore must wait).
    fn busy(&self) -> Vec<String> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mut ids: Vec<String> = running.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The timeline, loaded (and for a new store, its first scan taken) on first use.
    async fn loaded<'a>(
        &self,
        state: &'a mut State,
        config: &Arc<Config>,
    ) -> Option<&'a mut Timeline> {
        if state.timeline.is_none() && state.disabled.is_none() {
            let store = self.store.clone();
            let root = self.root.clone();
            let config = config.clone();
            let loaded = tokio::task::spawn_blocking(move || load(&store, &root, &config)).await;
            match loaded {
                Ok(Ok(tl)) => state.timeline = Some(tl),
                Ok(Err(e)) => state.disabled = Some(e.to_string()),
                Err(e) => tracing::warn!("checkpoint load: {e}"),
            }
        }
        state.timeline.as_mut()
    }

    /// Scans the workspace and records what changed since the last scan as an entry of
    /// `kind` (nothing when nothing changed). Returns the new entry.
    async fn scan_and_record(
        &self,
        state: &mut State,
        config: &Arc<Config>,
        kind: CheckpointKind,
        caller: Caller,
        concurrent: Option<Vec<String>>,
    ) -> Option<Record> {
        let tl = self.loaded(state, config).await?;
        let rules = rules(config, &self.store, &self.root);
        let start = tree::start(&rules, tl.watch.as_mut());
        if start.plan.is_quiet() {
            // The watcher saw nothing since the last scan: nothing to list, read or write,
            // so no hop to a blocking thread either.
            tl.tree.quiet(&start);
            return None;
        }
        let mut tl = state.timeline.take()?;
        let store = self.store.clone();
        let root = self.root.clone();
        let config = config.clone();
        let done = tokio::task::spawn_blocking(move || {
            let result = tree::scan(
                &root,
                &mut tl.tree,
                start,
                &rules,
                &store.objects,
                tl.watch.as_mut(),
            )
            .map(|changes| record(&store, &mut tl, changes, kind, caller, concurrent, &config));
            (tl, result)
        })
        .await;
        match done {
            Ok((tl, Ok(record))) => {
                state.timeline = Some(tl);
                record
            }
            Ok((tl, Err(ScanError::TooLarge(n)))) => {
                state.timeline = Some(tl);
                state.disabled = Some(ScanError::TooLarge(n).to_string());
                None
            }
            Ok((tl, Err(e))) => {
                // Calls are never blocked by the store: this one simply gets no entry.
                tracing::warn!(workspace = %self.root.display(), "checkpoint scan failed: {e}");
                state.timeline = Some(tl);
                None
            }
            Err(e) => {
                tracing::warn!("checkpoint scan: {e}");
                None
            }
        }
    }

    /// An entry as the wire shows it.
    fn entry(&self, r: &Record) -> CheckpointEntry {
        CheckpointEntry {
            id: self.id(r.seq),
            kind: r.kind,
            call_id: r.call_id.clone(),
            tool: r.tool.clone(),
            frontend: r.frontend.clone(),
            session: r.session.clone(),
            time: r.time,
            files: r.changes.iter().map(file_of).collect(),
            restores: r.restores.clone(),
            concurrent: r.concurrent.clone(),
        }
    }
}

fn file_of(c: &Change) -> CheckpointFile {
    CheckpointFile {
        path: c.path.shown(),
        path_b64: c.path.b64(),
        change: match (&c.before, &c.after) {
            (None, _) => FileChange::Added,
            (_, None) => FileChange::Deleted,
            _ => FileChange::Modified,
        },
        before: c.before.as_ref().map(|i| i.kind().to_owned()),
        after: c.after.as_ref().map(|i| i.kind().to_owned()),
        added_lines: c.plus,
        removed_lines: c.minus,
    }
}

/// Reads a store; a new one gets its first scan as its base (no entry: nothing changed yet).
fn load(store: &Store, root: &Path, config: &Config) -> Result<Timeline, ScanError> {
    // A whole home directory or file system is no project: recording it would copy it.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if root == Path::new("/") || home.is_some_and(|h| h == root) {
        return Err(ScanError::Io(std::io::Error::other(format!(
            "{} is the home directory or the root: no checkpoints there",
            root.display()
        ))));
    }
    store.create(root)?;
    let loaded = store.load()?;
    let mut watch = match watch::Watch::new(root) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(workspace = %root.display(), "no change watcher, each checkpoint walks the workspace: {e}");
            None
        }
    };
    let next_seq = loaded
        .entries
        .iter()
        .map(|r| r.seq)
        .max()
        .unwrap_or(loaded.base_seq)
        + 1;
    let Some(base) = loaded.base else {
        let mut tree = Tree::default();
        let rules = rules(config, store, root);
        let start = tree::start(&rules, watch.as_mut());
        tree::scan(
            root,
            &mut tree,
            start,
            &rules,
            &store.objects,
            watch.as_mut(),
        )?;
        let base: BTreeMap<RelPath, Item> =
            tree.items().map(|(p, i)| (p.clone(), i.clone())).collect();
        store.rewrite(&base, next_seq - 1, &[])?;
        return Ok(Timeline {
            tree,
            base,
            base_seq: next_seq - 1,
            entries: Vec::new(),
            next_seq,
            lost: loaded.lost,
            watch,
        });
    };
    // The state after the last entry: the base with every entry's changes applied.
    let mut head = base.clone();
    for r in &loaded.entries {
        for c in &r.changes {
            match &c.after {
                Some(item) => head.insert(c.path.clone(), item.clone()),
                None => head.remove(&c.path),
            };
        }
    }
    let tl = Timeline {
        tree: Tree::from_items(head),
        base,
        base_seq: loaded.base_seq,
        entries: loaded.entries,
        next_seq,
        lost: loaded.lost,
        watch,
    };
    // Repair after a crash: objects of a scan whose entry was never written are dropped
    // (the next scan stores what is still there), and the store's size is counted.
    collect(store, &tl);
    Ok(tl)
}

/// Records a scan's changes as an entry.
fn record(
    store: &Store,
    tl: &mut Timeline,
    changes: Vec<tree::Changed>,
    kind: CheckpointKind,
    caller: Caller,
    concurrent: Option<Vec<String>>,
    config: &Config,
) -> Option<Record> {
    if changes.is_empty() {
        return None;
    }
    let changes = changes
        .into_iter()
        .map(|(path, before, after)| {
            let mut c = Change {
                path,
                before,
                after,
                plus: None,
                minus: None,
            };
            diff::count_lines(&store.objects, &mut c);
            c
        })
        .collect();
    let r = Record {
        seq: tl.next_seq,
        kind,
        call_id: caller.call_id,
        tool: caller.tool,
        frontend: caller.frontend,
        session: caller.session,
        time: crate::now_ms(),
        changes,
        restores: caller.restores,
        concurrent: concurrent.unwrap_or_default(),
    };
    tl.next_seq += 1;
    if let Err(e) = store.append(&r) {
        tracing::warn!("checkpoint journal: {e}");
    }
    tl.entries.push(r.clone());
    prune(store, tl, config);
    Some(r)
}

/// Keeps the timeline within `checkpoint.keep`: entries past the age, then (when the
/// store has grown past the size) the oldest, are folded into the base, oldest first,
/// never the newest; then objects nothing refers to any more are removed.
fn prune(store: &Store, tl: &mut Timeline, config: &Config) {
    let keep = &config.checkpoint.keep;
    let cutoff = crate::now_ms().saturating_sub(keep.age_s.saturating_mul(1000));
    let old = tl
        .entries
        .iter()
        .take(tl.entries.len().saturating_sub(1))
        .take_while(|r| r.time < cutoff)
        .count();
    let over = store.objects.written() > keep.max_bytes;
    if old == 0 && !over {
        return;
    }
    fold(tl, old);
    loop {
        let kept = collect(store, tl);
        if kept <= keep.max_bytes || tl.entries.len() <= 1 {
            break;
        }
        fold(tl, 1);
    }
    if let Err(e) = store.rewrite(&tl.base, tl.base_seq, &tl.entries) {
        tracing::warn!("checkpoint prune: {e}");
    }
}

/// Folds the `n` oldest entries into the base.
fn fold(tl: &mut Timeline, n: usize) {
    for r in tl.entries.drain(..n.min(tl.entries.len())) {
        for c in r.changes {
            match c.after {
                Some(item) => tl.base.insert(c.path, item),
                None => tl.base.remove(&c.path),
            };
        }
        tl.base_seq = r.seq;
    }
}

/// Removes the objects nothing refers to; returns the bytes of those kept.
fn collect(store: &Store, tl: &Timeline) -> u64 {
    let mut keep: HashSet<&str> = HashSet::new();
    keep.extend(tl.base.values().filter_map(Item::object));
    keep.extend(tl.tree.items().filter_map(|(_, i)| i.object()));
    for r in &tl.entries {
        for c in &r.changes {
            keep.extend(c.before.as_ref().and_then(Item::object));
            keep.extend(c.after.as_ref().and_then(Item::object));
        }
    }
    store.objects.collect(&keep).unwrap_or(0)
}
