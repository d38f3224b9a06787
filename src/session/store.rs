//! The session store.
//!
//! TEMPORARY in-memory implementation of the API the host uses; replaced by the sled store.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::protocol::Session;

/// The session service the RPC layer and the invoke pipeline use.
pub struct Sessions {
    map: Mutex<BTreeMap<String, Session>>,
}

impl Sessions {
    pub fn open(_dir: &Path) -> anyhow::Result<Sessions> {
        Ok(Sessions {
            map: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Session>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores a new session; `InvalidParams` when the id is taken.
    pub async fn create(&self, session: Session) -> Result<Session> {
        let mut m = self.lock();
        if m.contains_key(&session.id) {
            return Err(Error::InvalidParams(format!(
                "session already exists: {}",
                session.id
            )));
        }
        m.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    pub async fn get(&self, id: &str) -> Result<Session> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::SessionNotFound(id.to_owned()))
    }

    /// Newest first; `after` is the `next` cursor of the previous page.
    pub async fn list(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<(Vec<Session>, Option<String>)> {
        let _ = (limit, after);
        Ok((self.lock().values().cloned().collect(), None))
    }

    /// Atomically applies `f` to the stored session and persists the result durably.
    pub async fn update<F>(&self, id: &str, f: F) -> Result<Session>
    where
        F: Fn(&mut Session) + Send + 'static,
    {
        let mut m = self.lock();
        let s = m
            .get_mut(id)
            .ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        f(s);
        Ok(s.clone())
    }

    pub async fn delete(&self, id: &str) -> Result<bool> {
        Ok(self.lock().remove(id).is_some())
    }

    pub fn count(&self) -> u64 {
        self.lock().len() as u64
    }
}
