//! The session store: a small synchronous [`SessionStore`] trait (implemented with sled in
//! `sled_store.rs`) and [`Sessions`], the async service the host uses.
//!
//! Durability: a write is acknowledged only once it is on disk. Writers don't flush
//! themselves; they use GROUP COMMIT. Each write, once done in the store, takes the next
//! write generation; one flusher thread loops "take the newest generation, flush, publish it
//! as flushed", and each writer awaits `flushed >= its generation`. All writes done while a
//! flush runs share the next flush, so the fsync rate is bounded by the disk, not the client
//! count.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

use super::backend::{Counter, CounterWrite, Page, Record, RecordKind, RecordWrite, SessionStore};
use super::sled_store::SledStore;
use crate::error::{Error, Result};
use crate::protocol::Session;

/// What the flusher has published.
#[derive(Debug, Clone, Default)]
struct Flushed {
    /// Every write generation `<=` this is on disk.
    upto: u64,
    /// The last failed flush: the generation it tried to cover, and why. Cleared on success.
    failed: Option<(u64, String)>,
}

#[derive(Default)]
struct Pending {
    /// The newest write generation handed out.
    written: u64,
    shutdown: bool,
}

/// The group committer shared by writers and the flusher thread.
struct Committer {
    pending: Mutex<Pending>,
    wake: Condvar,
    flushed: watch::Sender<Flushed>,
}

impl Committer {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        crate::lock(&self.pending)
    }

    /// Called after a write is done in the store: its generation, for [`Committer::durable`].
    fn note_write(&self) -> u64 {
        let mut p = self.lock();
        p.written += 1;
        self.wake.notify_one();
        p.written
    }

    /// Waits until generation `g` is flushed; `Error::Server` if the flush covering it failed.
    async fn durable(&self, g: u64) -> Result<()> {
        let mut rx = self.flushed.subscribe();
        let st = rx
            .wait_for(|f| f.upto >= g || f.failed.as_ref().is_some_and(|(t, _)| *t >= g))
            .await
            .map_err(|_| Error::Server("session store flusher stopped".into()))?;
        if st.upto >= g {
            return Ok(());
        }
        let why = st
            .failed
            .as_ref()
            .map(|(_, e)| e.as_str())
            .unwrap_or("unknown");
        Err(Error::Server(format!(
            "session store: write not durable: {why}"
        )))
    }

    /// The flusher thread's loop; returns at shutdown once everything written is flushed
    /// (or the last flush attempt failed).
    fn run(&self, store: &dyn SessionStore) {
        let mut done = 0u64;
        loop {
            let (target, shutdown) = {
                let mut p = self.lock();
                while p.written <= done && !p.shutdown {
                    p = self.wake.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                (p.written, p.shutdown)
            };
            if target <= done {
                return; // shutdown with nothing pending
            }
            match store.flush() {
                Ok(()) => {
                    done = target;
                    self.flushed.send_modify(|f| {
                        f.upto = target;
                        f.failed = None;
                    });
                }
                Err(e) => {
                    tracing::error!(error = %e, "session store flush failed");
                    self.flushed
                        .send_modify(|f| f.failed = Some((target, e.to_string())));
                    if shutdown {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

/// Work for the store's thread.
type Job = Box<dyn FnOnce(&dyn SessionStore) + Send>;

/// The one thread that runs the store's work, in order. Why one: sled keeps the pages it
/// rewrites on each write (its cache) — long-lived allocations made during a burst. Run on
/// the blocking pool, they were made by whichever thread took the job, spread over up to
/// 16 malloc arenas among everything else those threads did, and each of them pinned its
/// arena's pages after the burst (`benches/idle.rs sessions`). Made on one thread, they
/// stay in one arena. A store operation is short; the flushes run on their own thread.
struct Worker {
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn start(store: Arc<dyn SessionStore>) -> anyhow::Result<Worker> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("session-store".into())
            .spawn(move || {
                for job in queue {
                    // A panicking job drops its answer's sender: its caller gets an error,
                    // and the store's thread goes on.
                    let run = std::panic::AssertUnwindSafe(|| job(store.as_ref()));
                    let _ = std::panic::catch_unwind(run);
                }
            })
            .map_err(|e| anyhow::anyhow!("cannot start the session store thread: {e}"))?;
        Ok(Worker {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Runs `f` on the store's thread and waits for its result.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn SessionStore) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |store| {
            let _ = tx.send(f(store));
        });
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| Error::Server("the session store is closed".into()))?;
        rx.await
            .map_err(|_| Error::Server("session store task failed".into()))?
    }

    /// Finishes the queued work and stops the thread.
    fn stop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The session service the RPC layer and the invoke pipeline use.
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    worker: Worker,
    committer: Arc<Committer>,
    flusher: Option<JoinHandle<()>>,
    /// The sled store and its dir, to leave a clean-shutdown record on drop.
    sealable: Option<(Arc<SledStore>, PathBuf)>,
    /// Each session's recent calls, in memory.
    history: super::History,
    /// The ephemeral sessions the last daemon left, as they were, by id, with when they
    /// were reaped: a frontend that makes its session again under the same id (a bridge
    /// after a restart) gets back what `session.update` had changed ([`Sessions::take_left`]).
    left: Mutex<std::collections::HashMap<String, (Session, u64)>>,
}

/// How long a reaped ephemeral session can be taken up again: a bridge is back within
/// seconds; an HTTP client with its `Mcp-Session-Id` at its next request.
const LEFT_FOR_MS: u64 = 3600 * 1000;

impl Sessions {
    /// Opens (creating if needed) the sled store in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Sessions> {
        let store = Arc::new(SledStore::open(dir)?);
        let mut sessions = Sessions::with_store(store.clone())?;
        sessions.sealable = Some((store, dir.to_owned()));
        Ok(sessions)
    }

    /// A service over any store (starts its flusher thread).
    pub fn with_store(store: Arc<dyn SessionStore>) -> anyhow::Result<Sessions> {
        let committer = Arc::new(Committer {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            flushed: watch::Sender::new(Flushed::default()),
        });
        let (c, s) = (committer.clone(), store.clone());
        let flusher = std::thread::Builder::new()
            .name("session-flusher".into())
            .spawn(move || c.run(s.as_ref()))
            .map_err(|e| anyhow::anyhow!("cannot start the session flusher thread: {e}"))?;
        Ok(Sessions {
            worker: Worker::start(store.clone())?,
            store,
            committer,
            flusher: Some(flusher),
            sealable: None,
            history: super::History::default(),
            left: Mutex::default(),
        })
    }

    /// Runs `f` on the store's thread.
    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn SessionStore) -> Result<T> + Send + 'static,
    {
        self.worker.run(f).await
    }

    /// Runs a write on the store's thread, then waits until it is durable. `f` returns its
    /// result and whether it wrote anything.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn SessionStore) -> Result<(T, bool)> + Send + 'static,
    {
        let committer = self.committer.clone();
        let (out, generation) = self
            .blocking(move |store| {
                let (out, wrote) = f(store)?;
                Ok((out, wrote.then(|| committer.note_write())))
            })
            .await?;
        if let Some(g) = generation {
            self.committer.durable(g).await?;
        }
        Ok(out)
    }

    /// Stores a new session; `InvalidParams` when the id is taken.
    pub async fn create(&self, session: Session) -> Result<Session> {
        self.write(move |store| {
            let fresh = store.insert(&session)?;
            if !fresh {
                return Err(Error::InvalidParams(format!(
                    "session already exists: {}",
                    session.id
                )));
            }
            Ok((session, true))
        })
        .await
    }

    pub async fn get(&self, id: &str) -> Result<Session> {
        let id = id.to_owned();
        self.blocking(move |store| store.get(&id)?.ok_or(Error::SessionNotFound(id)))
            .await
    }

    /// Newest first; `after` is the `next` cursor of the previous page.
    pub async fn list(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<(Vec<Session>, Option<String>)> {
        let after = after.map(str::to_owned);
        let page = self
            .blocking(move |store| store.list(limit, after.as_deref()))
            .await?;
        Ok((page.sessions, page.next))
    }

    /// Atomically applies `f` to the stored session and persists the result durably.
    /// `f` may run more than once (when another writer got in between).
    pub async fn update<F>(&self, id: &str, f: F) -> Result<Session>
    where
        F: Fn(&mut Session) + Send + 'static,
    {
        let id = id.to_owned();
        self.write(move |store| match store.update(&id, &f)? {
            Some(s) => Ok((s, true)),
            None => Err(Error::SessionNotFound(id)),
        })
        .await
    }

    pub async fn delete(&self, id: &str) -> Result<bool> {
        self.history.forget(id);
        let id = id.to_owned();
        self.write(move |store| {
            let existed = store.delete(&id)?;
            Ok((existed, existed))
        })
        .await
    }

    /// The guards' persisted counters (read once, at start).
    pub fn counters(&self) -> Result<Vec<Counter>> {
        self.store.counters()
    }

    /// Sets or removes guards' counters and waits until the change is durable, so a call
    /// counted against a `daily` limit stays counted after a crash. `f` is handed the
    /// store's setter on the store's thread, so it can read the values to write at the
    /// moment they are written (under a lock of its own).
    pub async fn write_counters<F>(&self, f: F) -> Result<()>
    where
        F: FnOnce(&dyn Fn(&[CounterWrite]) -> Result<()>) -> Result<()> + Send + 'static,
    {
        self.write(move |store| f(&|w| store.set_counters(w)).map(|()| ((), true)))
            .await
    }

    /// Every record of `kind` (key, JSON value).
    pub async fn records(&self, kind: RecordKind) -> Result<Vec<Record>> {
        self.blocking(move |store| store.records(kind)).await
    }

    /// One record of `kind`.
    pub async fn record(&self, kind: RecordKind, key: &str) -> Result<Option<Vec<u8>>> {
        let key = key.to_owned();
        self.blocking(move |store| store.record(kind, &key)).await
    }

    /// Sets or removes records of `kind` and waits until the change is durable.
    pub async fn write_records(&self, kind: RecordKind, writes: Vec<RecordWrite>) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        self.write(move |store| store.set_records(kind, &writes).map(|()| ((), true)))
            .await
    }

    /// The sessions' recent calls (what the invoke pipeline records as calls end).
    pub fn history(&self) -> &super::History {
        &self.history
    }

    pub fn count(&self) -> u64 {
        self.store.count()
    }

    /// Deletes every ephemeral session; returns how many. Run at start, before anything is
    /// served: the connections those sessions were made for ended with the last daemon
    /// (a facade ends when its daemon goes), so whatever is left is an orphan, kept in
    /// memory for a while in case its frontend makes it again ([`Sessions::take_left`]).
    pub async fn reap_ephemeral(&self) -> Result<usize> {
        let orphans = self
            .blocking(|store| {
                let mut orphans = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    let page = store.list(1000, after.as_deref())?;
                    orphans.extend(page.sessions.into_iter().filter(|s| s.ephemeral));
                    match page.next {
                        Some(next) => after = Some(next),
                        None => return Ok(orphans),
                    }
                }
            })
            .await?;
        if orphans.is_empty() {
            return Ok(0);
        }
        let n = orphans.len();
        let ids: Vec<String> = orphans.iter().map(|s| s.id.clone()).collect();
        self.write(move |store| {
            for id in &ids {
                store.delete(id)?;
            }
            Ok(((), true))
        })
        .await?;
        let now = crate::now_ms();
        crate::lock(&self.left).extend(orphans.into_iter().map(|s| (s.id.clone(), (s, now))));
        Ok(n)
    }

    /// The ephemeral session `id` as the last daemon left it, reaped less than
    /// [`LEFT_FOR_MS`] ago; at most once.
    pub fn take_left(&self, id: &str) -> Option<Session> {
        let mut left = crate::lock(&self.left);
        let since = crate::now_ms().saturating_sub(LEFT_FOR_MS);
        left.retain(|_, (_, reaped)| *reaped >= since);
        left.remove(id).map(|(s, _)| s)
    }
}

impl Drop for Sessions {
    /// Finishes the queued work, then stops the flusher after a last flush of anything
    /// still pending; when everything written is on disk, records the clean shutdown (see `SledStore::seal`).
    fn drop(&mut self) {
        self.worker.stop();
        self.committer.lock().shutdown = true;
        self.committer.wake.notify_one();
        let joined = self.flusher.take().is_none_or(|h| h.join().is_ok());
        let written = self.committer.lock().written;
        let clean = joined && {
            let f = self.committer.flushed.borrow();
            f.failed.is_none() && f.upto >= written
        };
        if let (true, Some((store, dir))) = (clean, self.sealable.take()) {
            // Our last other handle: sled must close its files before the record is taken.
            self.store = Arc::new(Closed);
            match SledStore::seal(store, &dir) {
                Ok(()) => tracing::info!(store = %dir.display(), "session store closed cleanly"),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "no clean-shutdown record"),
            }
        }
    }
}

/// Stands in for the store once `Sessions` has closed it.
struct Closed;

impl SessionStore for Closed {
    fn get(&self, _: &str) -> Result<Option<Session>> {
        Err(closed())
    }
    fn insert(&self, _: &Session) -> Result<bool> {
        Err(closed())
    }
    fn update(&self, _: &str, _: &dyn Fn(&mut Session)) -> Result<Option<Session>> {
        Err(closed())
    }
    fn delete(&self, _: &str) -> Result<bool> {
        Err(closed())
    }
    fn list(&self, _: usize, _: Option<&str>) -> Result<Page> {
        Err(closed())
    }
    fn count(&self) -> u64 {
        0
    }
    fn flush(&self) -> Result<()> {
        Err(closed())
    }
    fn counters(&self) -> Result<Vec<Counter>> {
        Err(closed())
    }
    fn set_counters(&self, _: &[CounterWrite]) -> Result<()> {
        Err(closed())
    }
    fn records(&self, _: RecordKind) -> Result<Vec<Record>> {
        Err(closed())
    }
    fn record(&self, _: RecordKind, _: &str) -> Result<Option<Vec<u8>>> {
        Err(closed())
    }
    fn set_records(&self, _: RecordKind, _: &[RecordWrite]) -> Result<()> {
        Err(closed())
    }
}

fn closed() -> Error {
    Error::Server("session store closed".into())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::super::sled_store::SledStore;
    use super::*;
    use crate::protocol::ApprovalMode;

    fn sess(id: &str, created_at: u64) -> Session {
        Session {
            id: id.to_owned(),
            created_at,
            updated_at: created_at,
            workspace: "/w".into(),
            approval: ApprovalMode::Auto,
            meta: Map::new(),
            sandbox: None,
            tool_names: vec!["read_file".into(), "bash".into()],
            tools_etag: "e1".into(),
            loaded_tools: Vec::new(),
            profile: None,
            ephemeral: false,
        }
    }

    #[tokio::test]
    async fn reaping_deletes_the_ephemeral_sessions_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::open(&dir.path().join("sessions")).unwrap();
        for i in 0..1500 {
            let mut one = sess(&format!("e{i}"), i);
            one.ephemeral = true;
            s.create(one).await.unwrap();
        }
        s.create(sess("kept", 1)).await.unwrap();
        assert_eq!(s.reap_ephemeral().await.unwrap(), 1500);
        assert_eq!(s.count(), 1);
        assert!(s.get("kept").await.is_ok());
        assert_eq!(s.reap_ephemeral().await.unwrap(), 0);
    }

    #[tokio::test]
    async fn create_get_duplicate_delete_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::open(&dir.path().join("sessions")).unwrap();
        assert_eq!(s.count(), 0);
        let a = s.create(sess("a", 10)).await.unwrap();
        assert_eq!(s.get("a").await.unwrap(), a);
        assert_eq!(s.count(), 1);
        let dup = s.create(sess("a", 11)).await.unwrap_err();
        assert_eq!(
            dup,
            Error::InvalidParams("session already exists: a".into())
        );
        assert_eq!(s.get("a").await.unwrap().created_at, 10);
        assert_eq!(s.count(), 1);
        assert_eq!(
            s.get("nope").await.unwrap_err(),
            Error::SessionNotFound("nope".into())
        );
        let e = s.update("nope", |_| {}).await.unwrap_err();
        assert_eq!(e, Error::SessionNotFound("nope".into()));
        assert!(s.delete("a").await.unwrap());
        assert!(!s.delete("a").await.unwrap());
        assert_eq!(s.count(), 0);
        assert_eq!(
            s.get("a").await.unwrap_err(),
            Error::SessionNotFound("a".into())
        );
        assert_eq!(s.list(10, None).await.unwrap(), (vec![], None));
        // The id is free again, and the old index entry is gone.
        s.create(sess("a", 12)).await.unwrap();
        let (page, next) = s.list(10, None).await.unwrap();
        assert_eq!(
            page.iter().map(|x| x.created_at).collect::<Vec<_>>(),
            vec![12]
        );
        assert_eq!(next, None);
    }

    #[tokio::test]
    async fn update_keeps_id_and_created_at() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::open(dir.path()).unwrap();
        s.create(sess("a", 10)).await.unwrap();
        let u = s
            .update("a", |x| {
                x.id = "b".into();
                x.created_at = 99;
                x.updated_at = 20;
                x.approval = ApprovalMode::Strict;
            })
            .await
            .unwrap();
        assert_eq!((u.id.as_str(), u.created_at, u.updated_at), ("a", 10, 20));
        assert_eq!(s.get("a").await.unwrap(), u);
        assert_eq!(s.list(10, None).await.unwrap().0, vec![u]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_updates_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(Sessions::open(dir.path()).unwrap());
        s.create(sess("a", 1)).await.unwrap();
        let mut tasks = Vec::new();
        for t in 0..16 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20 {
                    let key = format!("k{t}_{i}");
                    s.update("a", move |x| {
                        x.meta.insert(key.clone(), json!(i));
                    })
                    .await
                    .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let got = s.get("a").await.unwrap();
        assert_eq!(got.meta.len(), 16 * 20);
        for t in 0..16 {
            for i in 0..20 {
                assert_eq!(got.meta[&format!("k{t}_{i}")], json!(i));
            }
        }
    }

    /// Pages through everything; checks each original session shows up exactly once.
    async fn page_all(
        s: &Sessions,
        limit: usize,
        mut between: impl FnMut(usize) -> Option<Session>,
    ) -> Vec<Session> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        let mut n = 0;
        loop {
            let (page, next) = s.list(limit, after.as_deref()).await.unwrap();
            assert!(page.len() <= limit);
            out.extend(page);
            if let Some(new) = between(n) {
                s.create(new).await.unwrap();
            }
            n += 1;
            match next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn list_pages_newest_first_while_inserting() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(Sessions::open(dir.path()).unwrap());
        // 1,000 sessions, created concurrently; pairs share a timestamp (ties break by id).
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in (t..1000).step_by(8) {
                    s.create(sess(&format!("s{i:04}"), 1_000 + i / 2))
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(s.count(), 1000);
        let mut expected: Vec<(u64, String)> = (0..1000u64)
            .map(|i| (1_000 + i / 2, format!("s{i:04}")))
            .collect();
        expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));

        let got = page_all(&s, 100, |_| None).await;
        let got: Vec<(u64, String)> = got.into_iter().map(|x| (x.created_at, x.id)).collect();
        assert_eq!(got, expected);

        // New (newer) sessions created between pages never show up in later pages, and
        // nothing is skipped or repeated.
        let got = page_all(&s, 100, |n| {
            Some(sess(&format!("new{n}"), 100_000 + n as u64))
        })
        .await;
        let got: Vec<(u64, String)> = got.into_iter().map(|x| (x.created_at, x.id)).collect();
        assert_eq!(got, expected);
        assert_eq!(s.count(), 1010);

        // limit larger than the rest; the exact end gives no `next`.
        let (page, next) = s.list(1010, None).await.unwrap();
        assert_eq!((page.len(), next), (1010, None));
        let (page, next) = s.list(1009, None).await.unwrap();
        assert_eq!(page.len(), 1009);
        let (page, next) = s.list(5, next.as_deref()).await.unwrap();
        assert_eq!((page.len(), next), (1, None));
        assert!(matches!(
            s.list(5, Some("zz")).await,
            Err(Error::InvalidParams(_))
        ));
        assert!(matches!(
            s.list(5, Some("00")).await,
            Err(Error::InvalidParams(_))
        ));
    }

    #[tokio::test]
    async fn reopen_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Sessions::open(dir.path()).unwrap();
            for i in 0..50 {
                s.create(sess(&format!("s{i}"), i)).await.unwrap();
            }
            s.update("s3", |x| {
                x.meta.insert("model".into(), json!("m"));
            })
            .await
            .unwrap();
            s.delete("s4").await.unwrap();
        }
        let s = Sessions::open(dir.path()).unwrap();
        assert_eq!(s.count(), 49);
        assert_eq!(s.get("s3").await.unwrap().meta["model"], json!("m"));
        assert_eq!(
            s.get("s4").await.unwrap_err(),
            Error::SessionNotFound("s4".into())
        );
        let (all, next) = s.list(100, None).await.unwrap();
        assert_eq!((all.len(), next), (49, None));
        assert_eq!(all[0].id, "s49");
    }

    #[tokio::test]
    async fn second_open_is_refused_as_locked() {
        let dir = tempfile::tempdir().unwrap();
        let _s = Sessions::open(dir.path()).unwrap();
        let e = Sessions::open(dir.path()).err().unwrap().to_string();
        assert!(
            e.contains("locked") && e.contains(&dir.path().display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let st = SledStore::open(dir.path()).unwrap();
            st.put_meta(b"schema_version", &2u32.to_be_bytes());
        }
        let e = SledStore::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("schema version 2") && e.contains("newer"), "{e}");
        {
            let st = SledStore::open(tempfile::tempdir().unwrap().path()).unwrap();
            assert_eq!(st.count(), 0);
        }
    }

    #[tokio::test]
    async fn corrupt_record_is_skipped_in_list_and_an_error_on_get() {
        let dir = tempfile::tempdir().unwrap();
        let st = Arc::new(SledStore::open(dir.path()).unwrap());
        st.put_raw("bad", 5, b"{not json");
        let s = Sessions::with_store(st).unwrap();
        s.create(sess("good", 4)).await.unwrap();
        s.create(sess("newer", 6)).await.unwrap();
        assert!(matches!(s.get("bad").await, Err(Error::Server(m)) if m.contains("corrupt")));
        assert!(matches!(
            s.update("bad", |_| {}).await,
            Err(Error::Server(_))
        ));
        let (page, _) = s.list(10, None).await.unwrap();
        assert_eq!(
            page.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
            vec!["newer", "good"]
        );
        // Paging over it: one per page.
        let (p1, n1) = s.list(1, None).await.unwrap();
        let (p2, n2) = s.list(1, n1.as_deref()).await.unwrap();
        assert_eq!(
            (p1[0].id.as_str(), p2[0].id.as_str(), n2),
            ("newer", "good", None)
        );
        assert!(s.delete("bad").await.unwrap());
        assert_eq!(s.list(10, None).await.unwrap().0.len(), 2);
    }

    /// A store whose flush can be made to fail, counting flushes.
    struct Flaky {
        inner: SledStore,
        fail: std::sync::atomic::AtomicBool,
        flushes: std::sync::atomic::AtomicU64,
    }

    impl SessionStore for Flaky {
        fn get(&self, id: &str) -> Result<Option<Session>> {
            self.inner.get(id)
        }
        fn insert(&self, session: &Session) -> Result<bool> {
            self.inner.insert(session)
        }
        fn update(&self, id: &str, f: &dyn Fn(&mut Session)) -> Result<Option<Session>> {
            self.inner.update(id, f)
        }
        fn delete(&self, id: &str) -> Result<bool> {
            self.inner.delete(id)
        }
        fn list(&self, limit: usize, after: Option<&str>) -> Result<Page> {
            self.inner.list(limit, after)
        }
        fn count(&self) -> u64 {
            self.inner.count()
        }
        fn flush(&self) -> Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            self.flushes.fetch_add(1, SeqCst);
            if self.fail.load(SeqCst) {
                return Err(Error::Server("disk on fire".into()));
            }
            self.inner.flush()
        }
        fn counters(&self) -> Result<Vec<Counter>> {
            self.inner.counters()
        }
        fn set_counters(&self, writes: &[CounterWrite]) -> Result<()> {
            self.inner.set_counters(writes)
        }
        fn records(&self, kind: RecordKind) -> Result<Vec<Record>> {
            self.inner.records(kind)
        }
        fn record(&self, kind: RecordKind, key: &str) -> Result<Option<Vec<u8>>> {
            self.inner.record(kind, key)
        }
        fn set_records(&self, kind: RecordKind, writes: &[RecordWrite]) -> Result<()> {
            self.inner.set_records(kind, writes)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn group_commit_groups_and_reports_flush_failures() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = tempfile::tempdir().unwrap();
        let flaky = Arc::new(Flaky {
            inner: SledStore::open(dir.path()).unwrap(),
            fail: false.into(),
            flushes: 0.into(),
        });
        let s = Arc::new(Sessions::with_store(flaky.clone()).unwrap());
        for i in 0..16 {
            s.create(sess(&format!("s{i}"), i)).await.unwrap();
        }
        let before = flaky.flushes.load(SeqCst);
        let mut tasks = Vec::new();
        for t in 0..16 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..50 {
                    s.update(&format!("s{t}"), move |x| x.updated_at = i)
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let flushes = flaky.flushes.load(SeqCst) - before;
        assert!(
            flushes < 16 * 50,
            "{flushes} flushes for 800 writes: not grouped"
        );

        // Reads need no flush; a write whose flush fails is reported, not acknowledged.
        flaky.fail.store(true, SeqCst);
        assert_eq!(s.get("s1").await.unwrap().updated_at, 49);
        let e = s.update("s1", |x| x.updated_at = 100).await.unwrap_err();
        assert!(
            matches!(&e, Error::Server(m) if m.contains("disk on fire")),
            "{e:?}"
        );
        // Once flushing works again, writes are acknowledged again.
        flaky.fail.store(false, SeqCst);
        s.update("s1", |x| x.updated_at = 101).await.unwrap();
        assert_eq!(s.get("s1").await.unwrap().updated_at, 101);
    }

    #[tokio::test]
    async fn large_records_spill_to_blobs_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(200 * 1024);
        {
            let s = Sessions::open(dir.path()).unwrap();
            for i in 0..20 {
                let mut x = sess(&format!("big{i}"), i);
                x.meta.insert("blob".into(), json!(big));
                s.create(x).await.unwrap();
            }
            s.update("big3", |x| {
                x.meta.insert("k".into(), json!(1));
            })
            .await
            .unwrap();
        }
        assert!(std::fs::read_dir(dir.path().join("blobs")).unwrap().count() > 0);
        let s = Sessions::open(dir.path()).unwrap();
        assert_eq!(s.count(), 20);
        let b = s.get("big3").await.unwrap();
        assert_eq!(
            (b.meta["blob"].as_str().map(str::len), &b.meta["k"]),
            (Some(big.len()), &json!(1))
        );
        assert_eq!(s.list(100, None).await.unwrap().0.len(), 20);
    }

    /// A log cut short without a clean-shutdown record (as after a crash): sled replays it,
    /// and `open` returns an error (a caught panic or sled's corruption report) or a store
    /// with a prefix of the sessions; it never panics.
    #[tokio::test]
    async fn truncated_log_never_panics_open() {
        let dir = tempfile::tempdir().unwrap();
        let orig = dir.path().join("orig");
        {
            let s = Sessions::open(&orig).unwrap();
            for i in 0..2000 {
                let mut x = sess(&format!("s{i:05}"), i);
                x.meta.insert("pad".into(), json!("x".repeat(100)));
                s.create(x).await.unwrap();
            }
        }
        std::fs::remove_file(orig.join("toolhost-clean-shutdown.json")).unwrap();
        let len = std::fs::metadata(orig.join("db")).unwrap().len();
        let mut outcomes = Vec::new();
        for pct in [30, 60, 90] {
            let copy = dir.path().join(format!("cut{pct}"));
            std::fs::create_dir_all(copy.join("blobs")).unwrap();
            for f in ["conf", "db"] {
                std::fs::copy(orig.join(f), copy.join(f)).unwrap();
            }
            std::fs::OpenOptions::new()
                .write(true)
                .open(copy.join("db"))
                .unwrap()
                .set_len(len * pct / 100)
                .unwrap();
            match SledStore::open(&copy) {
                Ok(st) => outcomes.push(format!("{pct}%: opened with {}", st.count())),
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        e.contains("is damaged") && e.contains("toolhost session recover"),
                        "{e}"
                    );
                    outcomes.push(format!(
                        "{pct}%: {}",
                        &e[..e.find(". The daemon").unwrap_or(e.len())]
                    ));
                }
            }
        }
        eprintln!("{outcomes:#?}");
    }
}
