//! The session store in PostgreSQL: what sled keeps for one daemon (sessions with their
//! meta and tool views, `/mcp` sessions, frontend identities, the guards' counters) in
//! tables every member shares (schemas 2 and 3), so a session made on one member is served by
//! another — the gateway's replicas need no affinity.
//!
//! [`SessionStore`] is synchronous (the group committer calls it from blocking threads,
//! and a few callers from the event loop, which may be tokio's single-threaded one), so
//! the store runs its own small runtime with a pool of its own: a call hands its query to
//! that runtime and waits for the answer on a plain channel, which neither deadlocks nor
//! panics whatever thread it comes from. Every exchange is bounded by [`DB_TIMEOUT`]: a
//! stuck database fails a write in seconds, never stalls it. Each write is committed when
//! it returns, so `flush` has nothing left to do.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use deadpool_postgres::{Object, Pool};

use super::{new_pool, pg_error, pool_error, Fleet, DB_TIMEOUT};
use crate::error::{Error, Result};
use crate::protocol::Session;
use crate::session::{Counter, CounterWrite, Page, Record, RecordKind, RecordWrite, SessionStore};

pub(super) struct PgStore {
    fleet: Fleet,
    pool: Pool,
    /// Shut down (in the background) when the store goes.
    runtime: Option<tokio::runtime::Runtime>,
    /// The last count read (`count` must not wait for the database).
    count: Arc<AtomicU64>,
}

impl PgStore {
    pub(super) fn open(fleet: &Fleet) -> anyhow::Result<PgStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fleet-store")
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("fleet store: cannot start its runtime: {e}"))?;
        let pool = new_pool(&fleet.0.pg, fleet.0.pool_size)?;
        let store = PgStore {
            fleet: fleet.clone(),
            pool,
            runtime: Some(runtime),
            count: Arc::default(),
        };
        store.refresh_count();
        Ok(store)
    }

    /// Runs `f` with a pooled client on the store's runtime and waits for its answer
    /// (within [`DB_TIMEOUT`]); a failure marks the database unreachable (`host.health`).
    pub(super) fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<T, tokio_postgres::Error>> + Send,
    {
        let Some(runtime) = &self.runtime else {
            return Err(Error::Server("fleet store: closed".into()));
        };
        let pool = self.pool.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let exchange = async {
                let client = pool.get().await.map_err(|e| pool_error(&e))?;
                f(client).await.map_err(|e| pg_error(&e))
            };
            let r = tokio::time::timeout(DB_TIMEOUT, exchange)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} ms", DB_TIMEOUT.as_millis())));
            let _ = tx.send(r);
        });
        match rx.recv() {
            Ok(Ok(v)) => {
                self.fleet.reached();
                Ok(v)
            }
            Ok(Err(e)) => Err(Error::Server(format!(
                "fleet store: {}",
                self.fleet.failed(e)
            ))),
            Err(_) => Err(Error::Server("fleet store: its runtime stopped".into())),
        }
    }

    /// This member's id.
    pub(super) fn member(&self) -> &str {
        &self.fleet.0.member
    }

    /// Reads the count again, in the background.
    fn refresh_count(&self) {
        let (Some(runtime), pool, count) = (&self.runtime, self.pool.clone(), self.count.clone())
        else {
            return;
        };
        runtime.spawn(async move {
            let read = async {
                let c = pool.get().await.ok()?;
                let row = c
                    .query_one("SELECT count(*) FROM toolhost_sessions", &[])
                    .await
                    .ok()?;
                u64::try_from(row.get::<_, i64>(0)).ok()
            };
            if let Ok(Some(n)) = tokio::time::timeout(DB_TIMEOUT, read).await {
                count.store(n, Ordering::Relaxed);
            }
        });
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn encode(s: &Session) -> Result<String> {
    serde_json::to_string(s).map_err(|e| Error::Server(format!("cannot encode session: {e}")))
}

fn decode(id: &str, text: &str) -> Result<Session> {
    serde_json::from_str(text).map_err(|e| {
        Error::Server(format!(
            "session {id} is unreadable in the fleet store: {e}"
        ))
    })
}

fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A page cursor: the last session's `created_at` and id.
fn cursor(c: &str) -> Result<(i64, String)> {
    c.split_once(':')
        .and_then(|(t, id)| Some((t.parse().ok()?, id.to_owned())))
        .ok_or_else(|| Error::InvalidParams(format!("invalid cursor: {c:?}")))
}

impl PgStore {
    /// Session `id`'s stored JSON as text: what `get` decodes and `update` compares and swaps.
    fn stored(&self, id: &str) -> Result<Option<String>> {
        let key = id.to_owned();
        self.run(move |c| async move {
            let row = c
                .query_opt(
                    "SELECT session::text FROM toolhost_sessions WHERE id = $1",
                    &[&key],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }
}

impl SessionStore for PgStore {
    fn get(&self, id: &str) -> Result<Option<Session>> {
        self.stored(id)?.map(|t| decode(id, &t)).transpose()
    }

    fn insert(&self, session: &Session) -> Result<bool> {
        let (id, at, text) = (
            session.id.clone(),
            millis(session.created_at),
            encode(session)?,
        );
        let n = self.run(move |c| async move {
            c.execute(
                "INSERT INTO toolhost_sessions (id, created_at, session)
                 VALUES ($1, $2, $3::text::jsonb) ON CONFLICT (id) DO NOTHING",
                &[&id, &at, &text],
            )
            .await
        })?;
        if n == 1 {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(n == 1)
    }

    /// Compare-and-swap on the stored JSON: a member that wrote in between makes `f` run
    /// again on its value.
    fn update(&self, id: &str, f: &dyn Fn(&mut Session)) -> Result<Option<Session>> {
        loop {
            let Some(old) = self.stored(id)? else {
                return Ok(None);
            };
            let mut s = decode(id, &old)?;
            let (keep_id, keep_created) = (s.id.clone(), s.created_at);
            f(&mut s);
            s.id = keep_id;
            s.created_at = keep_created;
            let (key, new) = (id.to_owned(), encode(&s)?);
            let swapped = self.run(move |c| async move {
                c.execute(
                    "UPDATE toolhost_sessions SET session = $3::text::jsonb
                      WHERE id = $1 AND session = $2::text::jsonb",
                    &[&key, &old, &new],
                )
                .await
            })?;
            if swapped == 1 {
                return Ok(Some(s));
            }
        }
    }

    fn delete(&self, id: &str) -> Result<bool> {
        let key = id.to_owned();
        let n = self.run(move |c| async move {
            c.execute("DELETE FROM toolhost_sessions WHERE id = $1", &[&key])
                .await
        })?;
        if n == 1 {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(n == 1)
    }

    fn list(&self, limit: usize, after: Option<&str>) -> Result<Page> {
        if limit == 0 {
            return Ok(Page::default());
        }
        let (at, last) = match after.map(cursor).transpose()? {
            Some((at, id)) => (Some(at), id),
            None => (None, String::new()),
        };
        let take = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<(String, i64, String)> = self.run(move |c| async move {
            let rows = c
                .query(
                    "SELECT id, created_at, session::text FROM toolhost_sessions
                      WHERE $1::bigint IS NULL OR created_at < $1 OR (created_at = $1 AND id > $2)
                      ORDER BY created_at DESC, id ASC LIMIT $3",
                    &[&at, &last, &take],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })?;
        let more = rows.len() > limit;
        let mut sessions = Vec::with_capacity(limit.min(rows.len()));
        let mut next = None;
        for (id, at, text) in rows.into_iter().take(limit) {
            match decode(&id, &text) {
                Ok(s) => sessions.push(s),
                Err(e) => tracing::warn!(%e, "skipping an unreadable session"),
            }
            next = Some(format!("{at}:{id}"));
        }
        self.refresh_count();
        Ok(Page {
            sessions,
            next: next.filter(|_| more),
        })
    }

    fn count(&self) -> u64 {
        self.refresh_count();
        self.count.load(Ordering::Relaxed)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// The daily budgets' rows ([`super::budgets`]), as the guards store a day's count.
    fn counters(&self) -> Result<Vec<Counter>> {
        self.run(|c| async move {
            let rows = c
                .query("SELECT key, day, used FROM toolhost_budgets ORDER BY key", &[])
                .await?;
            Ok(rows
                .iter()
                .map(|r| {
                    let day = serde_json::json!({"day": r.get::<_, String>(1), "used": r.get::<_, i64>(2)});
                    (r.get(0), day.to_string().into_bytes())
                })
                .collect())
        })
    }

    /// Sets (a day's count, as the guards encode it) or removes (a reset) budget rows.
    fn set_counters(&self, writes: &[CounterWrite]) -> Result<()> {
        let mut rows = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            let day = match value {
                Some(v) => {
                    let d: serde_json::Value = serde_json::from_slice(v)
                        .map_err(|e| Error::Server(format!("unreadable guard counter: {e}")))?;
                    let day = d.get("day").and_then(serde_json::Value::as_str);
                    let used = d.get("used").and_then(serde_json::Value::as_i64);
                    match (day, used) {
                        (Some(day), Some(used)) => Some((day.to_owned(), used)),
                        _ => return Err(Error::Server("unreadable guard counter".into())),
                    }
                }
                None => None,
            };
            rows.push((key.clone(), day));
        }
        self.run(move |mut c| async move {
            let tx = c.transaction().await?;
            for (key, day) in &rows {
                match day {
                    Some((day, used)) => {
                        tx.execute(
                            "INSERT INTO toolhost_budgets (key, day, used) VALUES ($1, $2, $3)
                             ON CONFLICT (key) DO UPDATE SET day = excluded.day, used = excluded.used",
                            &[key, day, used],
                        )
                        .await?
                    }
                    None => {
                        tx.execute("DELETE FROM toolhost_budgets WHERE key = $1", &[key])
                            .await?
                    }
                };
            }
            tx.commit().await
        })
    }

    fn records(&self, kind: RecordKind) -> Result<Vec<Record>> {
        self.run(move |c| async move {
            let rows = c
                .query(
                    "SELECT key, value FROM toolhost_records WHERE kind = $1 ORDER BY key",
                    &[&kind.tree()],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn record(&self, kind: RecordKind, key: &str) -> Result<Option<Vec<u8>>> {
        let key = key.to_owned();
        self.run(move |c| async move {
            let row = c
                .query_opt(
                    "SELECT value FROM toolhost_records WHERE kind = $1 AND key = $2",
                    &[&kind.tree(), &key],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn set_records(&self, kind: RecordKind, writes: &[RecordWrite]) -> Result<()> {
        let writes = writes.to_vec();
        self.run(move |mut c| async move {
            let tx = c.transaction().await?;
            for (key, value) in &writes {
                match value {
                    Some(v) => {
                        tx.execute(
                            "INSERT INTO toolhost_records (kind, key, value) VALUES ($1, $2, $3)
                             ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value",
                            &[&kind.tree(), key, v],
                        )
                        .await?
                    }
                    None => {
                        tx.execute(
                            "DELETE FROM toolhost_records WHERE kind = $1 AND key = $2",
                            &[&kind.tree(), key],
                        )
                        .await?
                    }
                };
            }
            tx.commit().await
        })
    }
}
