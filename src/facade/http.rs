//! `/mcp`: the facade as MCP streamable HTTP on the daemon's own listeners.
//!
//! rmcp's `StreamableHttpService` does the transport (sessions with `Mcp-Session-Id`, POST
//! answered as JSON or SSE, the standalone GET stream, DELETE, protocol-version checks);
//! the RPC layer routes `/mcp` here after its bearer check (TCP). Every MCP session gets its
//! own [`Facade`]; their sessions are bounded and resumable ([`Sessions`]).
//!
//! All sessions share one in-process connection to the host ([`SharedClient`]): the
//! client multiplexes calls, so a session costs no file descriptor of its own, and an
//! abandoned one holds only memory until it is evicted or idles out.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Bytes;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::OnceCell;

use super::handoff::{Handoff, HANDED_OVER};
use super::mrtr::HeldCalls;
use super::persisted::Persisted;
use super::sessions::{Sessions, SSE_RETRY};
use super::{Changes, Connect, Facade, Link};
use crate::client::Client;
use crate::host::Host;
use crate::protocol::LOCAL_ORIGINS;

/// How often an idle SSE stream gets a keep-alive comment. The listeners allow half-close,
/// so hyper does not take a client's EOF as the end of a stream it is sending: a stream
/// whose client went away is found out by the next write failing. Short, so that a call
/// whose stream went away is cancelled within seconds ([`super::sessions::RESUME_GRACE`]).
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(2);

/// How long a 2026-07-28 POST waits for its call's first message before its response head
/// goes out anyway ([`Endpoint::answer_new_era`]).
const EARLY_HEAD: Duration = Duration::from_millis(500);

/// How long the `/mcp` service outlives the host's shutdown at most, for the answers of the
/// calls it cancelled to reach their clients.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// A token the `/mcp` service stops on: the host's shutdown, once the calls it cancelled
/// have ended (at most [`ANSWER_GRACE`] later). Stopped together, a call in flight at a
/// restart lost its answer (a 500, or a stream closed without it) and its client waited.
fn answered_then_stopped(host: &Host) -> tokio_util::sync::CancellationToken {
    let stop = tokio_util::sync::CancellationToken::new();
    let (host, token) = (host.clone(), stop.clone());
    tokio::spawn(async move {
        host.shutdown_token().cancelled().await;
        let _ = tokio::time::timeout(ANSWER_GRACE, host.calls().idle()).await;
        // A moment for the last answers to be written.
        tokio::time::sleep(Duration::from_millis(100)).await;
        token.cancel();
    });
    stop
}

/// The `/mcp` endpoint, shared by every listener of the daemon.
#[derive(Clone)]
pub struct Endpoint {
    service: StreamableHttpService<Facade, Sessions>,
    sessions: Arc<Sessions>,
    shared: Arc<SharedClient>,
    /// In fleet mode: hands MRTR retries to the member holding their call.
    handoff: Option<Arc<Handoff>>,
    /// The largest request body read before rmcp sees it (`limits.max_request_bytes`).
    max_body: usize,
}

impl Endpoint {
    /// `connect` opens an in-process connection to the host; the host's shutdown ends
    /// every session and open SSE stream (so a graceful HTTP shutdown does not wait on
    /// them).
    pub fn new(host: Host, connect: Connect) -> Endpoint {
        let shutdown = answered_then_stopped(&host);
        let persisted = Persisted::new(host.clone());
        let sessions = Arc::new(Sessions::new(host.clone(), persisted.clone()));
        let held = Arc::new(match host.fleet() {
            Some(fleet) => HeldCalls::for_member(fleet.member(), fleet.request_state_key()),
            None => HeldCalls::default(),
        });
        let handoff = host.fleet().and_then(|fleet| {
            Handoff::new(fleet.clone(), held.clone())
                .map_err(|e| tracing::error!(%e, "cannot hand MRTR retries to other members"))
                .ok()
                .map(Arc::new)
        });
        let max_body = host.config().limits.max_request_bytes;
        let shared = Arc::new(SharedClient::new(host, connect, persisted.clone(), held));
        // The Host header is not checked: the Unix socket is reachable only through the
        // file system, and TCP requires the bearer token (which a rebinding page cannot
        // know); the Origin check still refuses foreign browser pages.
        let mut config = StreamableHttpServerConfig::default();
        config.session_store = Some(persisted);
        let config = config
            .disable_allowed_hosts()
            .with_allowed_origins(LOCAL_ORIGINS)
            .enforce_origin_validation()
            .with_sse_retry(Some(SSE_RETRY))
            .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
            .with_cancellation_token(shutdown);
        let link = shared.clone();
        let service = StreamableHttpService::new(
            move || {
                Ok(Facade::with_link(
                    Link::Shared(link.clone()),
                    None,
                    None,
                    super::Workspace::daemon(),
                ))
            },
            sessions.clone(),
            config,
        );
        Endpoint {
            service,
            sessions,
            shared,
            handoff,
            max_body,
        }
    }

    /// Opens the shared connection to the host now (once the host can take it), so it
    /// follows the host's list changes before any request: the first
    /// `subscriptions/listen`, acknowledged before it runs, then misses none. Without it the
    /// connection opens at the first request. Then, until the daemon stops, it ends the
    /// sessionless clients' sessions that idle out.
    pub fn connect_early(&self) {
        let sessions = self.sessions.clone();
        tokio::spawn(async move { sessions.forget_unclaimed().await });
        let shared = self.shared.clone();
        tokio::spawn(async move {
            match shared.client().await {
                Ok(client) => shared.end_idle_sessions(&client).await,
                Err(e) => {
                    tracing::debug!(%e, "the /mcp endpoint connects to the host at its first request");
                }
            }
        });
    }

    /// Serves one HTTP request addressed to `/mcp`, which came on `connection`. Before rmcp
    /// sees it: a request of an evicted session gets a 404 that says why, and a new session
    /// is refused (503) while the daemon is short of descriptors or every session has a call
    /// running. After: the session learns the connection (see [`Sessions::seen_on`]).
    pub async fn handle<B>(
        &self,
        req: http::Request<B>,
        connection: &Connection,
    ) -> http::Response<BoxBody<Bytes, Infallible>>
    where
        B: hyper::body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let session = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match session.as_deref() {
            Some(id) if self.sessions.was_evicted(id) => {
                return plain(
                    http::StatusCode::NOT_FOUND,
                    "Not Found: this MCP session was closed to make room for newer ones \
                     (the longest idle goes first once facade.max_sessions are open); \
                     start a new session with initialize",
                );
            }
            // A new-era request opens no session (rmcp serves it statelessly).
            None if req.method() == http::Method::POST && !names_new_era(req.headers()) => {
                if let Some(why) = self.sessions.refusal() {
                    return plain(http::StatusCode::SERVICE_UNAVAILABLE, &why);
                }
            }
            _ => {}
        }
        // In fleet mode a new-era POST is read first: a retry of a call another member
        // holds goes there.
        if let Some(handoff) = &self.handoff {
            if req.method() == http::Method::POST
                && names_new_era(req.headers())
                && !req.headers().contains_key(HANDED_OVER)
            {
                let (head, body) = req.into_parts();
                let Some(body) = read_body(body, self.max_body).await else {
                    return plain(
                        http::StatusCode::PAYLOAD_TOO_LARGE,
                        "the request is larger than limits.max_request_bytes, or it broke off",
                    );
                };
                if let Some(member) = handoff.holder(&body) {
                    return handoff.hand_over(&member, &head, body).await;
                }
                let req = http::Request::from_parts(head, Full::new(body));
                return self.serve(req, session, connection).await;
            }
        }
        self.serve(req, session, connection).await
    }

    /// [`Endpoint::handle`] once the request is known to be served here.
    async fn serve<B>(
        &self,
        req: http::Request<B>,
        session: Option<String>,
        connection: &Connection,
    ) -> http::Response<BoxBody<Bytes, Infallible>>
    where
        B: hyper::body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let delete = req.method() == http::Method::DELETE;
        let mut res = if req.method() == http::Method::POST && names_new_era(req.headers()) {
            let discover = req
                .headers()
                .get("mcp-method")
                .is_some_and(|m| m == "server/discover");
            let res = self.answer_new_era(req).await;
            if discover && self.shared.offers_manifest() {
                declared_discover(res).await
            } else {
                res
            }
        } else {
            self.service.handle(req).await
        };
        // rmcp answers a DELETE with 202, which the SDKs take for a failed termination
        // (the Python SDK logs "Session termination failed: 202"): the session is gone, so 200.
        if delete && res.status() == http::StatusCode::ACCEPTED {
            *res.status_mut() = http::StatusCode::OK;
        }
        let answered = res
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let Some(id) = session.as_deref().or(answered) {
            self.sessions.seen_on(id, connection.id, &connection.closed);
        }
        res
    }
}

impl Endpoint {
    /// A 2026-07-28 POST (no session: the request is all there is). rmcp holds the response
    /// head until the call's first message, and the listeners allow half-close, so a client
    /// that gave up on a call that sends nothing (the SDKs abort the POST) would not be
    /// noticed until the call's deadline. A call still silent after [`EARLY_HEAD`] gets its
    /// SSE head at once and a comment every [`SSE_KEEP_ALIVE`]: a write to a client that went
    /// away fails, the body is dropped, and with it rmcp's pending answer, which cancels the
    /// call. A quick answer (every error, most results) goes out as rmcp made it.
    async fn answer_new_era<B>(
        &self,
        req: http::Request<B>,
    ) -> http::Response<BoxBody<Bytes, Infallible>>
    where
        B: hyper::body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let service = self.service.clone();
        let mut answer = Box::pin(async move { service.handle(req).await });
        if let Ok(quick) = tokio::time::timeout(EARLY_HEAD, answer.as_mut()).await {
            return quick;
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(relay_when_answered(answer, tx));
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            let bytes = rx.recv().await?;
            Some((Ok::<_, Infallible>(hyper::body::Frame::data(bytes)), rx))
        });
        let mut res = http::Response::new(BoxBody::new(http_body_util::StreamBody::new(frames)));
        let h = res.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-cache"),
        );
        res
    }
}

/// `server/discover`'s answer with tool manifests declared (`manifest.rs`); a quick answer,
/// so read whole.
async fn declared_discover(res: McpResponse) -> McpResponse {
    let (mut head, body) = res.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes());
    let body = super::manifest::declared_body(&body).map_or(body, Bytes::from);
    head.headers.remove(http::header::CONTENT_LENGTH);
    http::Response::from_parts(head, BoxBody::new(Full::new(body)))
}

/// An answer of the `/mcp` service.
type McpResponse = http::Response<BoxBody<Bytes, Infallible>>;

/// Keeps a stream whose head went out early alive until rmcp's `answer` comes, then relays
/// it: an SSE body frame by frame, anything else (a JSON answer) as one `message` event.
/// Ends, dropping `answer` (which cancels the call), as soon as the client is gone.
async fn relay_when_answered(
    mut answer: std::pin::Pin<Box<dyn std::future::Future<Output = McpResponse> + Send>>,
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let mut tick = tokio::time::interval(SSE_KEEP_ALIVE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let res = loop {
        tokio::select! {
            res = answer.as_mut() => break res,
            _ = tick.tick() => {
                if tx.send(Bytes::from_static(b": waiting for the call\n\n")).await.is_err() {
                    return;
                }
            }
            () = tx.closed() => return,
        }
    };
    let sse = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut body = res.into_body();
    if !sse {
        let Ok(whole) = body.collect().await.map(|b| b.to_bytes());
        let text = String::from_utf8_lossy(&whole);
        let data: String = text.lines().map(|l| format!("data: {l}\n")).collect();
        let _ = tx
            .send(Bytes::from(format!("event: message\n{data}\n")))
            .await;
        return;
    }
    loop {
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if tx.send(data).await.is_err() {
                            return;
                        }
                    }
                }
                _ => return,
            },
            () = tx.closed() => return,
        }
    }
}

/// One HTTP connection of the daemon's listeners, as `/mcp` sees it: an id, and a token
/// cancelled when the connection is gone (this is dropped with it).
pub struct Connection {
    id: u64,
    closed: tokio_util::sync::CancellationToken,
}

impl Connection {
    pub fn new() -> Connection {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Connection {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            closed: tokio_util::sync::CancellationToken::new(),
        }
    }
}

impl Default for Connection {
    fn default() -> Self {
        Connection::new()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

/// A request's body, read whole up to `limit` bytes; `None` past it, or when it broke off.
async fn read_body<B>(body: B, limit: usize) -> Option<Bytes>
where
    B: hyper::body::Body,
{
    use hyper::body::Buf as _;
    let mut body = std::pin::pin!(body);
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(mut data) = frame.ok()?.into_data() {
            if read.len() + data.remaining() > limit {
                return None;
            }
            while data.has_remaining() {
                let chunk = data.chunk();
                let n = chunk.len();
                read.extend_from_slice(chunk);
                data.advance(n);
            }
        }
    }
    Some(Bytes::from(read))
}

/// Whether the request's `MCP-Protocol-Version` header names 2026-07-28 or later.
fn names_new_era(headers: &http::HeaderMap) -> bool {
    headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= rmcp::model::ProtocolVersion::NO_INITIALIZE.as_str())
}

/// The profile an HTTP session asks for: `/mcp?profile=NAME` on its `initialize` request
/// (rmcp hands the request's head to the handler).
pub(super) fn profile_of(
    context: &rmcp::service::RequestContext<rmcp::RoleServer>,
) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    url::form_urlencoded::parse(parts.uri.query()?.as_bytes())
        .find(|(k, _)| k == "profile")
        .map(|(_, v)| v.into_owned())
}

/// The name of the bearer token the request of `context` carried (`/mcp` over TCP; the
/// RPC layer puts it in the request's extensions after its check).
pub(super) fn token_of(
    context: &rmcp::service::RequestContext<rmcp::RoleServer>,
) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    parts
        .extensions
        .get::<crate::audit::TokenName>()
        .map(|t| t.0.clone())
}

fn plain(status: http::StatusCode, text: &str) -> http::Response<BoxBody<Bytes, Infallible>> {
    let mut res = http::Response::new(Full::new(Bytes::from(text.to_owned())).boxed());
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// The one in-process connection every HTTP session uses, opened on first use, and its
/// one subscription to each list change (`tools_changed`, `prompts_changed`,
/// `resources_changed`), whose notifications every session forwards: a subscription per
/// session would fill the connection's budget of subscriptions.
pub(super) struct SharedClient {
    host: Host,
    connect: Connect,
    /// The `/mcp` sessions kept for a restart.
    persisted: Arc<Persisted>,
    client: OnceCell<Arc<Client>>,
    /// The host sessions that sessionless (new-era) calls run in, one per client and
    /// profile, oldest first.
    sessions: tokio::sync::Mutex<VecDeque<Sessionless>>,
    changes: Changes,
    /// The calls held for new-era clients' retries, which may come on any connection.
    held: Arc<super::mrtr::HeldCalls>,
}

async fn delete_sessionless(client: &Client, id: &str) {
    if let Err(e) = client.session_delete(id).await {
        tracing::debug!(%e, session = %id, "cannot delete a sessionless client's session");
    }
}

/// Distinct new-era clients whose host sessions are kept (the key is the client's own
/// `clientInfo`, so it must not grow without bound).
const SESSIONLESS_CLIENTS: usize = 64;

/// The host session of one sessionless client.
struct Sessionless {
    key: SessionKey,
    id: String,
    /// Its last call's start: past `facade.session_idle_ms` after it, the session ends,
    /// as an HTTP session's does.
    used: Instant,
}

/// Who a sessionless request comes from, as far as it says (and its bearer token's name
/// over TCP: two tokens are two callers whatever their `clientInfo`).
#[derive(PartialEq, Eq)]
struct SessionKey {
    profile: Option<String>,
    name: String,
    version: String,
    token: Option<String>,
}

impl SharedClient {
    /// The daemon is shutting down.
    pub(super) fn stopping(&self) -> bool {
        self.host.shutdown_token().is_cancelled()
    }

    fn new(
        host: Host,
        connect: Connect,
        persisted: Arc<Persisted>,
        held: Arc<HeldCalls>,
    ) -> SharedClient {
        SharedClient {
            host,
            connect,
            persisted,
            client: OnceCell::new(),
            sessions: tokio::sync::Mutex::default(),
            changes: Changes::new(),
            held,
        }
    }

    pub(super) async fn client(&self) -> std::io::Result<Arc<Client>> {
        self.client
            .get_or_try_init(|| async {
                let client = Arc::new(Client::from_stream((self.connect)()?));
                self.changes
                    .follow(&client)
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                Ok(client)
            })
            .await
            .cloned()
    }

    /// `facade.tool_manifest` (`manifest.rs`).
    pub(super) fn offers_manifest(&self) -> bool {
        self.host.config().facade.tool_manifest
    }

    /// The `/mcp` sessions kept for a restart.
    pub(super) fn persisted(&self) -> &Arc<Persisted> {
        &self.persisted
    }

    /// The daemon's calls held for new-era clients' retries.
    pub(super) fn held_calls(&self) -> Arc<super::mrtr::HeldCalls> {
        self.held.clone()
    }

    /// The host session the sessionless calls of `peer` under `profile` run in: made on
    /// the first one, shared by every later one (a new-era client has no MCP session of
    /// its own, so this is what names it in the audit log and carries its profile). At most
    /// [`SESSIONLESS_CLIENTS`] are kept: past that the oldest is deleted, and its client
    /// gets a new one at its next call.
    pub(super) async fn session_for(
        &self,
        client: &Client,
        profile: Option<String>,
        peer: &super::era::Peer,
    ) -> Result<String, crate::client::ClientError> {
        let key = SessionKey {
            profile: profile.clone(),
            name: peer.info.name.clone(),
            version: peer.info.version.clone(),
            token: peer.token.clone(),
        };
        let mut sessions = self.sessions.lock().await;
        if let Some(s) = sessions.iter_mut().find(|s| s.key == key) {
            s.used = Instant::now();
            return Ok(s.id.clone());
        }
        let params = crate::protocol::SessionCreateParams {
            meta: Some(super::session_meta(
                peer,
                crate::protocol::WorkspaceFrom::Daemon,
            )),
            profile,
            ephemeral: true,
            ..Default::default()
        };
        let id = client.session_create(&params).await?.id;
        sessions.push_back(Sessionless {
            key,
            id: id.clone(),
            used: Instant::now(),
        });
        while sessions.len() > SESSIONLESS_CLIENTS {
            if let Some(old) = sessions.pop_front() {
                delete_sessionless(client, &old.id).await;
            }
        }
        Ok(id)
    }

    /// Ends each sessionless client's session once it has idled for
    /// `facade.session_idle_ms` (read anew each round, as reloads may change it), until
    /// the daemon stops.
    async fn end_idle_sessions(&self, client: &Client) {
        let shutdown = self.host.shutdown_token().clone();
        loop {
            let idle = Duration::from_millis(self.host.config().facade.session_idle_ms);
            let now = Instant::now();
            let (expired, next) = {
                let mut sessions = self.sessions.lock().await;
                let (expired, kept) = std::mem::take(&mut *sessions)
                    .into_iter()
                    .partition::<VecDeque<_>, _>(|s| s.used + idle <= now);
                *sessions = kept;
                let next = sessions.iter().map(|s| s.used + idle).min();
                (expired, next)
            };
            for s in expired {
                tracing::debug!(session = %s.id, "a sessionless MCP client's session idled out");
                delete_sessionless(client, &s.id).await;
            }
            let wait = next.map_or(idle, |at| at.saturating_duration_since(now));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// Forgets the sessionless clients' session `id` (it was deleted from outside).
    pub(super) async fn forget(&self, id: &str) {
        self.sessions.lock().await.retain(|s| s.id != id);
    }

    /// The host's list changes, as this connection follows them.
    pub(super) fn changes(&self) -> &Changes {
        &self.changes
    }
}
