//! Watching config.json for changes: the *parent directory* is watched, non-recursively,
//! because editors save by writing a temp file and renaming it over the original (a watch
//! on the file itself would follow the old inode and go deaf).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

/// Events closer together than this are coalesced into one signal.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// However busy a burst, a signal goes out after this many debounce windows at the latest
/// (a program writing into a watched folder without pause must not postpone it for ever).
const MAX_WINDOWS: u32 = 10;

/// A watch that signals "look again" (see [`signal_on_change`]). Dropping it stops the
/// watcher's thread; its debouncing task then ends with the channel.
pub(crate) struct SignalDebouncer {
    watcher: notify::RecommendedWatcher,
}

impl SignalDebouncer {
    pub(crate) fn watch(&mut self, path: &Path, mode: RecursiveMode) -> notify::Result<()> {
        self.watcher.watch(path, mode)
    }

    pub(crate) fn unwatch(&mut self, path: &Path) -> notify::Result<()> {
        self.watcher.unwatch(path)
    }
}

/// The one way the daemon watches files (config.json here, the custom tool folders in
/// `source/watch.rs`): sends `()` on `tx` once a burst of events that holds a non-access
/// event `relevant` accepts has been quiet for `debounce` (or has lasted [`MAX_WINDOWS`]
/// windows). Watcher errors and the kernel's "events were lost" (an inotify queue overflow)
/// also send `()`, since a change may have been missed. The signal means "look again"; the
/// caller decides what changed. Nothing is watched until the caller calls `watch`. Must be
/// called inside a tokio runtime.
///
/// The debouncing is a task that waits in `recv` between bursts, so an idle watch costs no
/// wake-up: notify's own thread blocks in the kernel and the timer exists only while a burst
/// is pending. (notify-debouncer-full's thread ticked every quarter window, 40 times a
/// second per watch, whether anything happened or not.)
pub(crate) fn signal_on_change(
    debounce: Duration,
    relevant: impl Fn(&notify::Event) -> bool + Send + 'static,
    tx: UnboundedSender<()>,
    what: &'static str,
) -> notify::Result<SignalDebouncer> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| notify::Error::generic(&format!("{what}: no runtime to debounce on: {e}")))?;
    let (events, mut burst) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let signal = match res {
            Ok(ev) => {
                ev.need_rescan() || (!matches!(ev.kind, EventKind::Access(_)) && relevant(&ev))
            }
            Err(e) => {
                tracing::warn!("{what}: {e}");
                true
            }
        };
        if signal {
            let _ = events.send(());
        }
    })?;
    runtime.spawn(async move {
        while burst.recv().await.is_some() {
            let latest = tokio::time::Instant::now() + debounce * MAX_WINDOWS;
            loop {
                let quiet = tokio::time::Instant::now() + debounce;
                match tokio::time::timeout_at(quiet.min(latest), burst.recv()).await {
                    Ok(Some(())) if quiet < latest => continue,
                    Ok(None) => return,
                    _ => break,
                }
            }
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    Ok(SignalDebouncer { watcher })
}

/// Keeps the watch alive; dropping it stops the watching thread (and the wait for a
/// missing directory).
pub struct ConfigWatcher {
    /// Kept alive here (the climber replaces it as it moves the watch down).
    _armed: Arc<Mutex<Armed>>,
    watching: Watching,
    /// While config.json's directory does not exist: the task that moves the watch down
    /// towards it as its components appear.
    climber: Option<tokio::task::AbortHandle>,
}

/// One armed watch: on config.json's own directory, or on the nearest existing ancestor
/// of a directory that does not exist yet.
struct Armed {
    _debouncer: SignalDebouncer,
}

/// What a [`ConfigWatcher`] watches now, readable while it runs (`config.status`).
#[derive(Debug, Clone, Default)]
pub struct Watching(Arc<Mutex<Option<PathBuf>>>);

impl Watching {
    /// The directory watched now (config.json's own, or while that is missing, the nearest
    /// ancestor that exists), and whether it is config.json's own.
    pub fn now(&self) -> Option<PathBuf> {
        crate::lock(&self.0).clone()
    }

    fn set(&self, dir: &Path) {
        *crate::lock(&self.0) = Some(dir.to_path_buf());
    }
}

impl ConfigWatcher {
    /// A handle on what this watcher watches, for status.
    pub fn watching(&self) -> Watching {
        self.watching.clone()
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        if let Some(c) = self.climber.take() {
            c.abort();
        }
        *crate::lock(&self.watching.0) = None;
    }
}

impl std::fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWatcher")
            .field("watching", &self.watching.now())
            .finish()
    }
}

/// Sends `()` on `tx` (at most once per [`DEBOUNCE`] window) when the file at `path` may have
/// changed: any non-access event in its directory whose paths include its file name
/// (create, write, rename onto it, delete, metadata). Watcher errors (e.g. an inotify queue
/// overflow) also send `()`, since a change may have been missed.
///
/// The signal means "look again", not "it changed": the caller reloads with
/// [`load`](super::load) and compares `content_hash` (from `Loaded`, or from `ConfigError`
/// when the file is bad) with the hash of the *last file read* — not the last config
/// applied — and skips only when they are equal (proto-docs/config.md, "Hot reload"). Explicit
/// reloads (`config.reload`, SIGHUP) should not skip, since the environment may have
/// changed.
///
/// When the directory does not exist yet (a fresh machine: no `~/.config/toolhost`), its
/// nearest existing ancestor is watched for the next component on the way to it, and the
/// watch moves down as each appears; once the directory is there, the file is watched as
/// above and `()` is sent (the file may have come with it). Must be called inside a tokio
/// runtime. Limits: a symlinked config is watched at the link's directory (edits to the
/// target elsewhere are not seen); Kubernetes-style `..data` symlink swaps are not seen
/// either.
pub fn watch(path: &Path, tx: UnboundedSender<()>) -> anyhow::Result<ConfigWatcher> {
    watch_with(path, tx, DEBOUNCE)
}

pub(crate) fn watch_with(
    path: &Path,
    tx: UnboundedSender<()>,
    debounce: Duration,
) -> anyhow::Result<ConfigWatcher> {
    let file = path
        .file_name()
        .with_context(|| format!("cannot watch {}: it has no file name", path.display()))?
        .to_os_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let watching = Watching::default();
    if dir.is_dir() {
        let armed = arm_file(&dir, &file, tx, debounce)?;
        watching.set(&dir);
        return Ok(ConfigWatcher {
            _armed: Arc::new(Mutex::new(armed)),
            watching,
            climber: None,
        });
    }
    let (step_tx, mut steps) = tokio::sync::mpsc::unbounded_channel();
    let armed = Arc::new(Mutex::new(arm_ancestor(
        &dir, &step_tx, debounce, &watching,
    )?));
    let (slot, seen) = (armed.clone(), watching.clone());
    let climber = tokio::spawn(async move {
        while steps.recv().await.is_some() {
            while steps.try_recv().is_ok() {}
            let next = if dir.is_dir() {
                arm_file(&dir, &file, tx.clone(), debounce).map(|a| (a, true))
            } else {
                arm_ancestor(&dir, &step_tx, debounce, &seen).map(|a| (a, false))
            };
            match next {
                Ok((a, done)) => {
                    *crate::lock(&slot) = a;
                    if done {
                        seen.set(&dir);
                        tracing::info!(dir = %dir.display(), "the config directory appeared; watching it");
                        let _ = tx.send(());
                        return;
                    }
                }
                // It may have gone again: the next event says where to look.
                Err(e) => tracing::debug!("config watcher: {e:#}"),
            }
        }
    })
    .abort_handle();
    Ok(ConfigWatcher {
        _armed: armed,
        watching,
        climber: Some(climber),
    })
}

/// Watches `dir` for events on `file` and on its secrets file ([`crate::secrets::file_for`]:
/// beside it, or in a folder of its own, watched too).
fn arm_file(
    dir: &Path,
    file: &std::ffi::OsStr,
    tx: UnboundedSender<()>,
    debounce: Duration,
) -> anyhow::Result<Armed> {
    let wanted = file.to_os_string();
    let secrets = crate::secrets::file_for(&dir.join(file));
    let secrets_dir = secrets
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && *d != dir)
        .map(Path::to_path_buf);
    // Beside config.json, its name is enough (the one folder watched); elsewhere, its path.
    let beside = secrets_dir
        .is_none()
        .then(|| secrets.file_name().map(std::ffi::OsStr::to_os_string))
        .flatten();
    let mut debouncer = signal_on_change(
        debounce,
        move |ev| {
            ev.paths.iter().any(|p| {
                p.file_name() == Some(wanted.as_os_str())
                    || *p == secrets
                    || (beside.is_some() && p.file_name() == beside.as_deref())
            })
        },
        tx,
        "config watcher",
    )
    .context("cannot start the config file watcher")?;
    debouncer
        .watch(dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {} for config changes", dir.display()))?;
    if let Some(d) = &secrets_dir {
        debouncer
            .watch(d, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch {} for secrets changes", d.display()))?;
    }
    Ok(Armed {
        _debouncer: debouncer,
    })
}

/// Watches the nearest existing ancestor of the missing `dir` for events on the paths
/// leading to it; signals `step` on one (and at once, when the next component appeared
/// while the watch was being armed).
fn arm_ancestor(
    dir: &Path,
    step: &UnboundedSender<()>,
    debounce: Duration,
    watching: &Watching,
) -> anyhow::Result<Armed> {
    let ancestor = dir
        .ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .map(Path::to_path_buf)
        .with_context(|| format!("no directory above {} exists", dir.display()))?;
    let target = dir.to_path_buf();
    let mut debouncer = signal_on_change(
        debounce,
        move |ev| ev.paths.iter().any(|p| target.starts_with(p)),
        step.clone(),
        "config watcher",
    )
    .context("cannot start the config file watcher")?;
    debouncer
        .watch(&ancestor, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {} for config changes", ancestor.display()))?;
    watching.set(&ancestor);
    let next = dir.ancestors().take_while(|a| *a != ancestor).last();
    if next.is_some_and(Path::exists) {
        let _ = step.send(());
    }
    Ok(Armed {
        _debouncer: debouncer,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
    use tokio::time::timeout;

    async fn expect_signal(rx: &mut UnboundedReceiver<()>, what: &str) {
        match timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(())) => {}
            other => panic!("no watcher signal after {what}: {other:?}"),
        }
    }

    /// Waits out the debounce window and drains whatever arrived.
    async fn settle(rx: &mut UnboundedReceiver<()>) {
        tokio::time::sleep(Duration::from_millis(600)).await;
        while rx.try_recv().is_ok() {}
    }

    #[tokio::test]
    async fn sees_rename_saves_and_in_place_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        let (tx, mut rx) = unbounded_channel();
        let _w = watch(&path, tx).unwrap();

        // An editor-style save: write a temp file, rename it over the config.
        let tmp = dir.path().join(".config.json.swp");
        std::fs::write(&tmp, "{\"workspace\": \"/a\"}").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        expect_signal(&mut rx, "an atomic rename").await;
        settle(&mut rx).await;

        // An in-place write.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"workspace\": \"/b\"}").unwrap();
        drop(f);
        expect_signal(&mut rx, "an in-place write").await;
        settle(&mut rx).await;

        // Our own write-back goes through a rename too.
        let server = serde_json::json!({"command": "x"});
        super::super::add_mcp_server(&path, "fs", server.as_object().unwrap()).unwrap();
        expect_signal(&mut rx, "add_mcp_server").await;
        settle(&mut rx).await;

        // Deleting the file is a change (back to defaults).
        std::fs::remove_file(&path).unwrap();
        expect_signal(&mut rx, "a delete").await;
    }

    #[tokio::test]
    async fn ignores_other_files_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let (tx, mut rx) = unbounded_channel();
        let _w = watch_with(&path, tx, Duration::from_millis(100)).unwrap();
        std::fs::write(dir.path().join("other.json"), "{}").unwrap();
        std::fs::write(dir.path().join("config.json.bak"), "{}").unwrap();
        // Nothing may arrive within a few debounce windows...
        assert!(timeout(Duration::from_millis(700), rx.recv())
            .await
            .is_err());
        // ...but creating the config itself is seen.
        std::fs::write(&path, "{}").unwrap();
        expect_signal(&mut rx, "creating the file").await;
    }

    /// A fresh machine: no config directory at all. The watch waits on the nearest
    /// ancestor, follows the directories down as they appear and signals once the file's
    /// directory is there, then sees the file's edits.
    #[tokio::test]
    async fn a_missing_directory_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/config.json");
        let (tx, mut rx) = unbounded_channel();
        let w = watch_with(&path, tx, Duration::from_millis(50)).unwrap();
        assert_eq!(w.watching().now().as_deref(), Some(dir.path()));
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::create_dir(dir.path().join("a/b")).unwrap();
        expect_signal(&mut rx, "the directory appearing").await;
        assert_eq!(
            w.watching().now().as_deref(),
            Some(dir.path().join("a/b").as_path())
        );
        settle(&mut rx).await;
        std::fs::write(&path, "{}").unwrap();
        expect_signal(&mut rx, "the file appearing").await;
    }
}
