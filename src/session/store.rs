//! The session store: a small synchronous [`SessionStore`] trait (implemented with sled in
//! `sled_store.rs`) and [`Sessions`], the async service the host uses.
//!
//! Durability: a write is acknowledged only once it is on disk. Writers don't flush
//! themselves; they use GROUP COMMIT. Each write, once done in the store, takes the next
//! write generation; one flusher thread loops "take the newest generation, flush, publish it
//! as flushed", and each writer awaits `flushed >= its generation`. All writes done while a
//! flush runs share the next flush, so the fsync rate is bounded by the disk, not the client
//! count.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

use super::sled_store::SledStore;
use crate::error::{Error, Result};
use crate::protocol::Session;

/// One page of [`SessionStore::list`].
#[derive(Debug, Default)]
pub struct Page {
    pub sessions: Vec<Session>,
    /// Opaque cursor for the next page; `None` on the last page.
    pub next: Option<String>,
}

/// Durable storage of session records. Synchronous (may block on disk: call it from a
/// blocking thread); writes need not be durable until [`SessionStore::flush`] returns.
pub trait SessionStore: Send + Sync {
    /// A point lookup; `Error::Server` if the record is unreadable.
    fn get(&self, id: &str) -> Result<Option<Session>>;
    /// Stores a new session if its id is free; `false` when the id is taken.
    fn insert(&self, session: &Session) -> Result<bool>;
    /// Atomic read-modify-write (`f` may run more than once; `id` and `created_at` are kept).
    /// `None` when there is no such session.
    fn update(&self, id: &str, f: &dyn Fn(&mut Session)) -> Result<Option<Session>>;
    /// Removes the session; whether it existed.
    fn delete(&self, id: &str) -> Result<bool>;
    /// Newest first, at most `limit`, strictly after the cursor `after` (a previous `next`).
    /// Unreadable records are skipped (and logged). `Error::InvalidParams` for a bad cursor.
    fn list(&self, limit: usize, after: Option<&str>) -> Result<Page>;
    /// Number of sessions; cheap.
    fn count(&self) -> u64;
    /// Makes every write that returned before this call durable.
    fn flush(&self) -> Result<()>;
}

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
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
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

/// The session service the RPC layer and the invoke pipeline use.
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    committer: Arc<Committer>,
    flusher: Option<JoinHandle<()>>,
}

impl Sessions {
    /// Opens (creating if needed) the sled store in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Sessions> {
        let store = SledStore::open(dir)?;
        Sessions::with_store(Arc::new(store))
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
            store,
            committer,
            flusher: Some(flusher),
        })
    }

    /// Runs `f` on a blocking thread.
    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn SessionStore) -> Result<T> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(store.as_ref()))
            .await
            .map_err(|e| Error::Server(format!("session store task failed: {e}")))?
    }

    /// Runs a write on a blocking thread, then waits until it is durable. `f` returns its
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
        let id = id.to_owned();
        self.write(move |store| {
            let existed = store.delete(&id)?;
            Ok((existed, existed))
        })
        .await
    }

    pub fn count(&self) -> u64 {
        self.store.count()
    }
}

impl Drop for Sessions {
    /// Stops the flusher after a last flush of anything still pending.
    fn drop(&mut self) {
        self.committer.lock().shutdown = true;
        self.committer.wake.notify_one();
        if let Some(h) = self.flusher.take() {
            let _ = h.join();
        }
    }
}
