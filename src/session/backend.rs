//! The storage interface behind [`super::Sessions`]: what a backend (today sled) must do.
//! Its own module so the group committer (`store`) and the backend (`sled_store`) both
//! depend on it, and not on each other in a circle.

use crate::error::Result;
use crate::protocol::Session;

/// A stored counter of the guards: key and value, opaque to the store.
pub type Counter = (Vec<u8>, Vec<u8>);
/// A change of one: the key and its new value, or `None` to remove it.
pub type CounterWrite = (Vec<u8>, Option<Vec<u8>>);

/// The kinds of small keyed records a store keeps besides sessions and counters, each in
/// its own tree (a backend's table): the key is a string, the value JSON that only its
/// owner reads (the store reads nothing into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// `/mcp` sessions, so a restarted daemon takes their ids up again (src/facade/persisted.rs).
    McpSession,
    /// What the host knows of each frontend (src/frontends.rs).
    Frontend,
}

impl RecordKind {
    /// The tree (table) it is kept in.
    pub fn tree(self) -> &'static str {
        match self {
            RecordKind::McpSession => "mcp_sessions",
            RecordKind::Frontend => "frontends",
        }
    }
}

/// A stored record: key and value.
pub type Record = (String, Vec<u8>);
/// A change of one: the key and its new value, or `None` to remove it.
pub type RecordWrite = (String, Option<Vec<u8>>);

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
    /// Every counter the guards keep (`guards` tree: key, value), in key order. The store
    /// holds them for the guards (src/guards/) and reads nothing into them.
    fn counters(&self) -> Result<Vec<Counter>>;
    /// Sets (`Some`) or removes (`None`) the guards' counters, each of `writes` in turn.
    fn set_counters(&self, writes: &[CounterWrite]) -> Result<()>;
    /// Every record of `kind`, in key order.
    fn records(&self, kind: RecordKind) -> Result<Vec<Record>>;
    /// One record of `kind`.
    fn record(&self, kind: RecordKind, key: &str) -> Result<Option<Vec<u8>>>;
    /// Sets (`Some`) or removes (`None`) records of `kind`, each of `writes` in turn.
    fn set_records(&self, kind: RecordKind, writes: &[RecordWrite]) -> Result<()>;
}
