//! The sessions of `/mcp`. Each runs on rmcp's `LocalSessionManager` (one per session, so
//! each has its own [`EventLog`]); this manager adds what rmcp lacks:
//!
//! - a bound: at most `facade.max_sessions` sessions; a new one evicts the longest idle
//!   (no call running), and the evicted client's next request gets a 404 that says why;
//! - resumption: `Last-Event-ID` replays the session's kept events and follows the stream
//!   on, so a result that came while no stream was open is not lost;
//! - cancellation: a call whose SSE stream goes away, and is not resumed within
//!   [`RESUME_GRACE`], is cancelled (as closing a stdio pipe does); DELETE cancels every
//!   call of the session at once (rmcp would let them run on for its 5 s drain);
//! - restarts: each session is kept in the store ([`Persisted`]) until it ends, and a
//!   restarted daemon takes a known id up again ([`SessionManager::restore_session`]);
//! - probes: a session that never made a call (`initialize`, `tools/list`, gone: `claude
//!   mcp list`, an Inspector CLI run) ends [`PROBE_GRACE`] after the last HTTP connection
//!   that carried its requests closed, instead of idling for `facade.session_idle_ms`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, GetExtensions, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionManager};
use rmcp::transport::WorkerTransport;
use tokio_util::sync::CancellationToken;

use super::events::EventLog;
use super::persisted::Persisted;
use crate::host::Host;
use crate::lock;

/// How long a call's SSE stream may be gone before the call is cancelled: long enough for
/// a client to reconnect after the `retry` the stream announced ([`SSE_RETRY`]).
pub const RESUME_GRACE: Duration = Duration::from_secs(3);

/// The reconnection delay announced to clients on every stream.
pub const SSE_RETRY: Duration = Duration::from_secs(1);

/// How long a session that never made a call outlives the last connection that carried
/// its requests: a client that reconnects its stream is back well within it, and one that
/// sends each request on a new connection has time for its next.
pub const PROBE_GRACE: Duration = Duration::from_secs(10);

/// Evicted session ids remembered, so their clients learn why the session is gone.
const EVICTED_REMEMBERED: usize = 1024;

/// Every `/mcp` session of the daemon.
pub struct Sessions {
    host: Host,
    persisted: Arc<Persisted>,
    open: Mutex<HashMap<SessionId, Arc<Session>>>,
    evicted: Mutex<Evicted>,
}

struct Session {
    id: SessionId,
    /// rmcp's manager, holding just this session.
    local: LocalSessionManager,
    log: Arc<EventLog>,
    last_active: Mutex<Instant>,
    /// It made a call (or was taken up after a restart): no probe.
    used: AtomicBool,
    /// The HTTP connections that carried its requests and are still open.
    connections: Mutex<HashSet<u64>>,
}

/// The session's id as its `initialize` request carries it to the facade (rmcp tells the
/// handler only on a restore), so the facade can keep the session under it.
#[derive(Debug, Clone)]
pub struct McpSessionId(pub SessionId);

/// The last [`EVICTED_REMEMBERED`] evicted sessions, as keyed 64-bit hashes of their ids in
/// two tables sized once: a thousand ids kept as strings were a thousand small allocations
/// made during a burst of sessions, each pinning a page of the heap after the burst
/// (`benches/idle.rs sessions`). Two ids sharing a hash (odds 2^-54 per lookup) only
/// change which 404 a client reads.
struct Evicted {
    keys: std::hash::RandomState,
    order: VecDeque<u64>,
    ids: HashSet<u64>,
}

impl Default for Evicted {
    fn default() -> Evicted {
        Evicted {
            keys: std::hash::RandomState::new(),
            order: VecDeque::with_capacity(EVICTED_REMEMBERED + 1),
            ids: HashSet::with_capacity(EVICTED_REMEMBERED + 1),
        }
    }
}

impl Evicted {
    fn key(&self, id: &str) -> u64 {
        std::hash::BuildHasher::hash_one(&self.keys, id)
    }

    fn contains(&self, id: &str) -> bool {
        self.ids.contains(&self.key(id))
    }

    fn remember(&mut self, id: &str) {
        let key = self.key(id);
        if self.ids.insert(key) {
            self.order.push_back(key);
        }
        while self.order.len() > EVICTED_REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error("session not found: {0}")]
    NotFound(SessionId),
    #[error("{0}")]
    Full(String),
    #[error("event {0:?} is not (or no longer) kept")]
    UnknownEvent(String),
}

impl Sessions {
    pub fn new(host: Host, persisted: Arc<Persisted>) -> Sessions {
        Sessions {
            host,
            persisted,
            open: Mutex::default(),
            evicted: Mutex::default(),
        }
    }

    /// Whether session `id` is open in this daemon.
    pub fn is_open(&self, id: &str) -> bool {
        lock(&self.open).contains_key(id)
    }

    /// A request of session `id` came on HTTP connection `connection` (whose `closed` is
    /// cancelled when it closes). Once no such connection is left, a session that never made
    /// a call is ended after [`PROBE_GRACE`] unless one comes back.
    pub fn seen_on(self: &Arc<Self>, id: &str, connection: u64, closed: &CancellationToken) {
        let Some(s) = lock(&self.open).get(id).cloned() else {
            return;
        };
        if !lock(&s.connections).insert(connection) {
            return;
        }
        let (sessions, closed) = (self.clone(), closed.clone());
        tokio::spawn(async move {
            closed.cancelled().await;
            let probe = |s: &Session| {
                lock(&s.connections).is_empty()
                    && !s.used.load(Ordering::Relaxed)
                    && !s.log.is_busy()
            };
            lock(&s.connections).remove(&connection);
            if !probe(&s) {
                return;
            }
            tokio::time::sleep(PROBE_GRACE).await;
            if probe(&s) && sessions.is_open(&s.id) {
                tracing::debug!(session = %s.id, "an MCP session that made no call lost its connections; ending it");
                let _ = sessions.close_session(&s.id).await;
            }
        });
    }

    /// A fresh rmcp manager for one session, logging into `log`.
    fn local(&self, log: &Arc<EventLog>) -> LocalSessionManager {
        let cfg = &self.host.config().facade;
        let mut local = LocalSessionManager::default().with_event_store(log.clone());
        local.session_config.keep_alive = Some(Duration::from_millis(cfg.session_idle_ms));
        local.session_config.sse_retry = Some(SSE_RETRY);
        local
    }

    fn add(&self, id: &SessionId, local: LocalSessionManager, log: Arc<EventLog>, used: bool) {
        let session = Arc::new(Session {
            id: id.clone(),
            local,
            log,
            last_active: Mutex::new(Instant::now()),
            used: AtomicBool::new(used),
            connections: Mutex::default(),
        });
        lock(&self.open).insert(id.clone(), session);
    }

    /// Forgets the kept sessions of an earlier daemon that no client took up within
    /// `facade.session_idle_ms` of this one's start (their clients idled out meanwhile).
    pub async fn forget_unclaimed(&self) {
        let kept = self.persisted.ids().await;
        if kept.is_empty() {
            return;
        }
        let idle = Duration::from_millis(self.host.config().facade.session_idle_ms);
        let shutdown = self.host.shutdown_token().clone();
        tokio::select! {
            () = tokio::time::sleep(idle) => {}
            () = shutdown.cancelled() => return,
        }
        for id in kept {
            if !self.is_open(&id) {
                self.persisted.delete(&id).await;
            }
        }
    }

    /// Why a new session cannot be opened now, or `None`: the descriptor reserve is short,
    /// or every session has a call running.
    pub fn refusal(&self) -> Option<String> {
        if let Some(why) = crate::fds::short() {
            return Some(format!("no new MCP session: {why}"));
        }
        let max = self.host.config().facade.max_sessions;
        let open = lock(&self.open);
        let busy = open.values().filter(|s| s.log.is_busy()).count();
        (open.len() >= max && busy == open.len()).then(|| {
            format!(
                "no new MCP session: all {} sessions (facade.max_sessions) have a call running",
                open.len()
            )
        })
    }

    /// Whether `id` was closed to make room for newer sessions.
    pub fn was_evicted(&self, id: &str) -> bool {
        lock(&self.evicted).contains(id)
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Session>, SessionsError> {
        let s = lock(&self.open)
            .get(id)
            .cloned()
            .ok_or_else(|| SessionsError::NotFound(id.clone()))?;
        *lock(&s.last_active) = Instant::now();
        Ok(s)
    }

    /// Closes the longest idle sessions until one more fits under `max`.
    async fn make_room(&self, max: usize) -> Result<(), SessionsError> {
        let victims = {
            let mut open = lock(&self.open);
            let excess = (open.len() + 1).saturating_sub(max);
            let mut idle: Vec<(Instant, SessionId)> = open
                .values()
                .filter(|s| !s.log.is_busy())
                .map(|s| (*lock(&s.last_active), s.id.clone()))
                .collect();
            if idle.len() < excess {
                return Err(SessionsError::Full(format!(
                    "all {} MCP sessions (facade.max_sessions) have a call running",
                    open.len()
                )));
            }
            idle.sort();
            let victims: Vec<Arc<Session>> = idle
                .into_iter()
                .take(excess)
                .filter_map(|(_, id)| open.remove(&id))
                .collect();
            let mut evicted = lock(&self.evicted);
            for v in &victims {
                evicted.remember(&v.id);
            }
            victims
        };
        for v in victims {
            tracing::info!(session = %v.id, "closing the longest idle MCP session to make room");
            v.close().await;
        }
        Ok(())
    }
}

impl Session {
    /// Cancels `request` in the session's handler, as the client's
    /// `notifications/cancelled` would.
    async fn cancel(&self, request: RequestId, reason: &str) {
        if !self.log.end(&request) {
            return;
        }
        let note = CancelledNotification::new(CancelledNotificationParam::new(
            Some(request),
            Some(reason.to_owned()),
        ));
        let message =
            ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(note));
        if let Err(e) = self.local.accept_message(&self.id, message).await {
            tracing::debug!(%e, session = %self.id, "cannot cancel a call of an ended session");
        }
    }

    /// Ends the session: its calls are cancelled first, at once.
    async fn close(&self) {
        for request in self.log.running() {
            self.cancel(request, "the MCP session ended").await;
        }
        self.log.close();
        match self.local.close_session(&self.id).await {
            Ok(()) | Err(LocalSessionManagerError::SessionNotFound(_)) => {}
            Err(e) => tracing::debug!(%e, session = %self.id, "closing the MCP session"),
        }
    }

    /// `stream` as a client stream of the SSE stream `sse`: while it is attached the
    /// call's answer has somewhere to go; when it goes away with the call still running,
    /// the call is cancelled unless a client resumes it within [`RESUME_GRACE`].
    fn attach(
        self: &Arc<Self>,
        sse: Option<Arc<str>>,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> Attached {
        if let Some(sse) = &sse {
            self.log.attach(sse);
        }
        Attached {
            inner: Box::pin(stream),
            session: self.clone(),
            sse,
        }
    }
}

/// A client's SSE stream, counted as attached to its session's SSE stream until dropped.
pub struct Attached {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>,
    session: Arc<Session>,
    /// `None`: a stream without a priming event, which cannot be resumed anyway.
    sse: Option<Arc<str>>,
}

impl Stream for Attached {
    type Item = ServerSseMessage;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(Some(event)) = &next {
            if let Some(id) = &event.event_id {
                self.session.log.delivered(id);
            }
        }
        next
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let Some(sse) = self.sse.take() else { return };
        if self.session.log.detach(&sse).is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let session = self.session.clone();
        runtime.spawn(async move {
            tokio::time::sleep(RESUME_GRACE).await;
            if let Some(request) = session.log.abandoned(&sse) {
                tracing::debug!(session = %session.id, %request, "the call's SSE stream went away; cancelling it");
                session
                    .cancel(request, "the client's SSE stream went away")
                    .await;
            }
        });
    }
}

/// The request id of a message, when it is a request other than `initialize`.
fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(r)
            if !matches!(r.request, ClientRequest::InitializeRequest(_)) =>
        {
            Some(r.id.clone())
        }
        _ => None,
    }
}

/// Whether `message` does something a probe does not: anything but the handshake, pings
/// and listings.
fn is_use(message: &ClientJsonRpcMessage) -> bool {
    let ClientJsonRpcMessage::Request(r) = message else {
        return false;
    };
    !matches!(
        r.request,
        ClientRequest::InitializeRequest(_)
            | ClientRequest::PingRequest(_)
            | ClientRequest::DiscoverRequest(_)
            | ClientRequest::SetLevelRequest(_)
            | ClientRequest::ListToolsRequest(_)
            | ClientRequest::ListPromptsRequest(_)
            | ClientRequest::ListResourcesRequest(_)
            | ClientRequest::ListResourceTemplatesRequest(_)
            | ClientRequest::ListSkillsRequest(_)
    )
}

impl SessionManager for Sessions {
    type Error = SessionsError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.make_room(self.host.config().facade.max_sessions)
            .await?;
        let log = Arc::new(EventLog::default());
        let local = self.local(&log);
        let (id, transport) = local.create_session().await?;
        self.add(&id, local, log, false);
        Ok((id, transport))
    }

    /// A session the store kept from an earlier daemon: rmcp replays its `initialize` next.
    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        if self.is_open(&id) {
            return Ok(RestoreOutcome::AlreadyPresent);
        }
        self.make_room(self.host.config().facade.max_sessions)
            .await?;
        // Its event ids start past the earlier daemon's, so a client's `Last-Event-ID` from
        // before the restart is unknown here rather than naming another event.
        let log = Arc::new(EventLog::restored());
        let local = self.local(&log);
        let outcome = local.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            tracing::info!(session = %id, "took up an MCP session of an earlier daemon");
            self.add(&id, local, log, true);
        }
        Ok(outcome)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let s = self.session(id)?;
        if let ClientJsonRpcMessage::Request(r) = &mut message {
            r.request.extensions_mut().insert(McpSessionId(id.clone()));
        }
        let answer = s.local.initialize_session(id, message).await?;
        Ok(if self.host.config().facade.tool_manifest {
            super::manifest::declared_message(answer)
        } else {
            answer
        })
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(lock(&self.open).contains_key(id))
    }

    /// DELETE, or the session's service ended (idle, shutdown): also after an eviction.
    /// Unless the daemon is stopping, the session is over for good: no longer kept.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let session = lock(&self.open).remove(id);
        if let Some(s) = session {
            s.close().await;
        }
        if !self.host.shutdown_token().is_cancelled() {
            self.persisted.delete(id).await;
        }
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let s = self.session(id)?;
        let request = request_id(&message);
        if let Some(r) = &request {
            s.log.begin(r.clone());
        }
        if is_use(&message) {
            s.used.store(true, Ordering::Relaxed);
        }
        let mut stream = s.local.create_stream(id, message).await?;
        // The first event is the stream's priming event: its id names the SSE stream.
        let priming = stream.next().await;
        let sse = priming
            .as_ref()
            .and_then(|p| p.event_id.as_deref())
            .and_then(|e| s.log.locate(e))
            .map(|(sse, _)| sse);
        let stream = futures::stream::iter(priming).chain(stream);
        if let (Some(sse), Some(r)) = (&sse, request) {
            s.log.bind(sse, r);
        }
        Ok(s.attach(sse, stream))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        let s = self.session(id)?;
        if let ClientJsonRpcMessage::Notification(n) = &message {
            if let ClientNotification::CancelledNotification(c) = &n.notification {
                if let Some(r) = &c.params.request_id {
                    s.log.end(r);
                }
            }
        }
        Ok(s.local.accept_message(id, message).await?)
    }

    /// A GET stream; a new one first gets the notifications no stream took yet.
    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let s = self.session(id)?;
        let sse: Arc<str> = format!("{id}:common").into();
        let missed = if s.log.is_attached(&sse) {
            Vec::new()
        } else {
            s.log.undelivered(&sse)
        };
        let stream = s.local.create_standalone_stream(id).await?;
        Ok(s.attach(Some(sse), futures::stream::iter(missed).chain(stream)))
    }

    /// `Last-Event-ID`: the kept events of that stream after it, then what comes next.
    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let s = self.session(id)?;
        let (sse, seq) = s
            .log
            .locate(&last_event_id)
            .ok_or(SessionsError::UnknownEvent(last_event_id))?;
        let follow = s.log.follow(sse.clone(), seq);
        Ok(s.attach(Some(sse), follow))
    }
}
