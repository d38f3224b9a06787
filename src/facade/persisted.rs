//! `/mcp` sessions kept in the store (record kind `mcp_sessions`), so a daemon that
//! restarted (SIGTERM, `kill -9`, an upgrade) takes a client's `Mcp-Session-Id` up again
//! instead of answering 404: rmcp's session restore replays the client's `initialize` from
//! here (its [`SessionStore`]), and the facade makes the session's host session again as
//! it was — same id, workspace, profile and so the same frontend (`Facade::initialize`).
//!
//! A record is written once when the session is made (and again when the client's roots
//! move its workspace), and removed when the session ends for any reason but the daemon's
//! own shutdown: DELETE, idling out, eviction, a probe whose connections closed.

use std::sync::Arc;

use rmcp::model::InitializeRequestParams;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::protocol::SessionCreateParams;
use crate::session::RecordKind;

/// What a restarted daemon needs to take one `/mcp` session up again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kept {
    /// The client's `initialize` (its era, `clientInfo` and capabilities).
    pub initialize: InitializeRequestParams,
    /// How its host session was made: id, workspace, profile, meta (with the frontend id).
    #[serde(default)]
    pub host_session: Option<SessionCreateParams>,
    /// The workspace the client's roots gave the session since.
    #[serde(default)]
    pub roots: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
}

/// The kept `/mcp` sessions of this daemon's store.
pub struct Persisted {
    host: Host,
    /// Read-modify-writes of one daemon do not interleave.
    writing: tokio::sync::Mutex<()>,
}

impl Persisted {
    pub fn new(host: Host) -> Arc<Persisted> {
        Arc::new(Persisted {
            host,
            writing: tokio::sync::Mutex::default(),
        })
    }

    /// The kept session `id`; `None` when unknown or unreadable (logged).
    pub async fn get(&self, id: &str) -> Option<Kept> {
        let bytes = match self
            .host
            .sessions()
            .record(RecordKind::McpSession, id)
            .await
        {
            Ok(b) => b?,
            Err(e) => {
                tracing::warn!(%e, session = %id, "cannot read a kept MCP session");
                return None;
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| tracing::warn!(%e, session = %id, "a kept MCP session is unreadable"))
            .ok()
    }

    /// Keeps `kept` as session `id` (durably: the client may be told the id next).
    pub async fn put(&self, id: &str, kept: &Kept) {
        let _w = self.writing.lock().await;
        self.write(id, Some(kept)).await;
    }

    /// Changes the kept session `id`, if there is one.
    pub async fn update(&self, id: &str, f: impl FnOnce(&mut Kept)) {
        let _w = self.writing.lock().await;
        if let Some(mut kept) = self.get(id).await {
            f(&mut kept);
            self.write(id, Some(&kept)).await;
        }
    }

    /// Forgets session `id` (it ended).
    pub async fn delete(&self, id: &str) {
        let _w = self.writing.lock().await;
        self.write(id, None).await;
    }

    /// The ids of every kept session.
    pub async fn ids(&self) -> Vec<String> {
        match self.host.sessions().records(RecordKind::McpSession).await {
            Ok(all) => all.into_iter().map(|(id, _)| id).collect(),
            Err(e) => {
                tracing::warn!(%e, "cannot list the kept MCP sessions");
                Vec::new()
            }
        }
    }

    async fn write(&self, id: &str, kept: Option<&Kept>) {
        let value = match kept.map(serde_json::to_vec).transpose() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(%e, session = %id, "cannot encode an MCP session to keep");
                return;
            }
        };
        let writes = vec![(id.to_owned(), value)];
        if let Err(e) = self
            .host
            .sessions()
            .write_records(RecordKind::McpSession, writes)
            .await
        {
            tracing::warn!(%e, session = %id, "cannot keep (or forget) an MCP session in the store");
        }
    }
}

/// rmcp's side: it loads a session's `initialize` to replay it, and deletes the record on
/// DELETE. The facade writes the record itself while it answers `initialize` (with the
/// host session it made), so `store` only fills in one the facade did not write.
#[async_trait::async_trait]
impl SessionStore for Persisted {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self.get(id).await.map(|k| SessionState::new(k.initialize)))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let _w = self.writing.lock().await;
        if self.get(id).await.is_none() {
            let kept = Kept {
                initialize: state.initialize_params.clone(),
                host_session: None,
                roots: None,
                created_ms: crate::now_ms(),
            };
            self.write(id, Some(&kept)).await;
        }
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        Persisted::delete(self, id).await;
        Ok(())
    }
}
